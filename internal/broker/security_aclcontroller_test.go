package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/strata-io/strata/internal/quorum"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestACLControllerMatrix is TestACLMatrix for the APIs only the
// controller listener serves, on a single voter whose controller listener
// is SASL_PLAINTEXT: BrokerRegistration, BrokerHeartbeat, AlterPartition,
// AllocateProducerIds and the metadata Fetch and FetchSnapshot need
// CLUSTER_ACTION on the cluster and DescribeQuorum DESCRIBE, as in
// ControllerApis; without them the answer is CLUSTER_AUTHORIZATION_FAILED.
// ApiVersions and the SASL exchange need nothing. The APIs the broker
// listener also serves (the admin requests brokers forward) are
// TestACLMatrix's rows; the first subtest fails when the controller
// listener serves an API that is in neither.
func TestACLControllerMatrix(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctrl := ln.Addr().String()
	ln.Close()
	var users strings.Builder
	for i := range 20 {
		fmt.Fprintf(&users, ` user_c%d="pw"`, i)
	}
	jaas := `org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret"` + users.String() + `;`
	b := startBroker(t, map[string]string{
		"node.id":                                             "1",
		"process.roles":                                       "broker,controller",
		"controller.quorum.voters":                            "1@" + ctrl,
		"controller.listener.names":                           "CONTROLLER",
		"listeners":                                           "SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://" + ctrl,
		"listener.security.protocol.map":                      "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
		"inter.broker.listener.name":                          "SASL_PLAINTEXT",
		"sasl.enabled.mechanisms":                             "PLAIN",
		"sasl.mechanism.inter.broker.protocol":                "PLAIN",
		"sasl.mechanism.controller.protocol":                  "PLAIN",
		"listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
		"listener.name.controller.plain.sasl.jaas.config":     jaas,
		"authorizer.class.name":                               "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users":                                         "User:broker",
		"offsets.topic.replication.factor":                    "1",
	})
	brokerAddr := listenerAddr(t, b.Broker, "SASL_PLAINTEXT")
	admin := saslClient(t, brokerAddr, "broker", "broker-secret")
	adm := kadm.NewClient(admin)
	ctx := testContext(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "t"); err != nil || r.Err != nil {
		t.Fatalf("creating t: %v %v", err, r.Err)
	}
	topic := b.image.Load().Topics["t"]
	// A client of the controller listener: its requests go straight to
	// the seed (the controller listener serves no Metadata to route by).
	controllerClient := func(user, pass string) *kgo.Client {
		return newClient(t, ctrl, kgo.RequestRetries(0), kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	}

	clusterACL := func(ops ...kadm.ACLOperation) aclFn {
		return func(b *kadm.ACLBuilder) *kadm.ACLBuilder { return b.Clusters().Operations(ops...) }
	}
	rows := []aclRow{
		{name: "ApiVersions", req: func() kmsg.Request { return kmsg.NewPtrApiVersionsRequest() }, allowed: func(resp kmsg.Response) error {
			if c := firstCode(resp); c != 0 {
				return kerr.ErrorForCode(c)
			}
			return nil
		}},
		{name: "BrokerRegistration", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request {
			r := kmsg.NewPtrBrokerRegistrationRequest()
			r.BrokerID, r.ClusterID, r.Rack = 99, "not-this-cluster", nil
			l := kmsg.NewBrokerRegistrationRequestListener()
			l.Name, l.Host, l.Port, l.SecurityProtocol = "SASL_PLAINTEXT", "127.0.0.1", 1, 2
			r.Listeners = append(r.Listeners, l)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "BrokerHeartbeat", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request {
			r := kmsg.NewPtrBrokerHeartbeatRequest()
			r.BrokerID, r.BrokerEpoch = 42, 1
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "AlterPartition", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request {
			r := kmsg.NewPtrAlterPartitionRequest()
			r.BrokerID, r.BrokerEpoch = 1, 1 // a stale epoch: refused for what it says
			rt := kmsg.NewAlterPartitionRequestTopic()
			rt.TopicID = topic.ID
			rp := kmsg.NewAlterPartitionRequestTopicPartition()
			rp.LeaderEpoch = topic.Partitions[0].LeaderEpoch
			e := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
			e.BrokerID, e.BrokerEpoch = 1, 1
			rp.NewEpochISR = append(rp.NewEpochISR, e)
			rt.Partitions = append(rt.Partitions, rp)
			r.Topics = append(r.Topics, rt)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "AllocateProducerIds", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request {
			r := kmsg.NewPtrAllocateProducerIDsRequest()
			r.BrokerID, r.BrokerEpoch = 99, 1
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "Fetch of the metadata log", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request {
			r := kmsg.NewPtrFetchRequest()
			r.ReplicaID, r.MaxWaitMillis, r.MaxBytes = 99, 10, 1<<20
			r.ReplicaState.ID = 99
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = quorum.MetadataTopic, quorum.MetadataTopicID
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.FetchOffset = 1<<20, -1, 0
			ft.Partitions = append(ft.Partitions, fp)
			r.Topics = append(r.Topics, ft)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "FetchSnapshot", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request {
			r := kmsg.NewPtrFetchSnapshotRequest()
			r.ReplicaID, r.MaxBytes = 99, 1<<20
			rt := kmsg.NewFetchSnapshotRequestTopic()
			rt.Topic = quorum.MetadataTopic
			rp := kmsg.NewFetchSnapshotRequestTopicPartition()
			rp.CurrentLeaderEpoch, rp.SnapshotID.EndOffset, rp.SnapshotID.Epoch = -1, 1, 1
			rt.Partitions = append(rt.Partitions, rp)
			r.Topics = append(r.Topics, rt)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "DescribeQuorum", acl: clusterACL(kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeQuorumRequest()
			rt := kmsg.NewDescribeQuorumRequestTopic()
			rt.Topic = quorum.MetadataTopic
			rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
			r.Topics = append(r.Topics, rt)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
	}

	t.Run("every controller API has a row", func(t *testing.T) {
		covered := map[int16]bool{kmsg.SASLHandshake.Int16(): true, kmsg.SASLAuthenticate.Int16(): true}
		for _, row := range rows {
			covered[row.req().Key()] = true
		}
		brokerAPIs, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range brokerAPIs.ApiKeys {
			switch k.ApiKey {
			case kmsg.Fetch.Int16(), kmsg.DescribeQuorum.Int16(), kmsg.ApiVersions.Int16():
				// Rows of their own here: the controller's answer differs.
			default:
				covered[k.ApiKey] = true // TestACLMatrix's row
			}
		}
		resp, err := controllerClient("broker", "broker-secret").SeedBrokers()[0].Request(ctx, kmsg.NewPtrApiVersionsRequest())
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range resp.(*kmsg.ApiVersionsResponse).ApiKeys {
			if !covered[k.ApiKey] {
				t.Errorf("the controller listener serves %s (key %d) but no ACL matrix has a row for it", kmsg.NameForKey(k.ApiKey), k.ApiKey)
			}
		}
	})

	for i, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			user := fmt.Sprintf("c%d", i)
			cl := controllerClient(user, "pw")
			send := func() int16 {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				resp, err := cl.SeedBrokers()[0].Request(ctx, row.req())
				var ke *kerr.Error
				if errors.As(err, &ke) {
					return ke.Code
				}
				if err != nil {
					t.Fatalf("request: %v", err)
				}
				if row.allowed != nil {
					if err := row.allowed(resp); err != nil {
						t.Fatal(err)
					}
				}
				return firstCode(resp)
			}
			if row.acl == nil {
				if got := send(); isAuthorizationError(got) {
					t.Fatalf("without any ACL: %v", kerr.ErrorForCode(got))
				}
				return
			}
			if got := send(); got != row.want.Code {
				t.Fatalf("without an ACL: %v, want %v", kerr.ErrorForCode(got), row.want)
			}
			grant(t, adm, row.acl(kadm.NewACLs().Allow("User:"+user)))
			poll.UntilStatus(t, 30*time.Second, "the ACL to allow the request", func() (bool, string) {
				got := send()
				return !isAuthorizationError(got), fmt.Sprint(kerr.ErrorForCode(got))
			})
		})
	}
}
