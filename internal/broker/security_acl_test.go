package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// aclBroker starts a broker with the authorizer on, a SASL_PLAINTEXT
// listener whose PLAIN users are admin (a super user) and u0..u119, and a
// PLAINTEXT one (principal ANONYMOUS).
func aclBroker(t *testing.T) (*testBroker, string) {
	var users strings.Builder
	for i := range 120 {
		fmt.Fprintf(&users, ` user_u%d="pw"`, i)
	}
	b := startBroker(t, map[string]string{
		"listeners":               "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
		"sasl.enabled.mechanisms": "PLAIN",
		"listener.name.sasl_plaintext.plain.sasl.jaas.config": `org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw"` + users.String() + `;`,
		"authorizer.class.name":                               "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users":                                         "User:admin",
		"offsets.topic.replication.factor":                    "1",
		"group.initial.rebalance.delay.ms":                    "0",
	})
	return b, listenerAddr(t, b.Broker, "SASL_PLAINTEXT")
}

func saslClient(t *testing.T, addr, user, pass string, opts ...kgo.Opt) *kgo.Client {
	return newClient(t, addr, append([]kgo.Opt{kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()), kgo.RequestRetries(0)}, opts...)...)
}

func grant(t *testing.T, adm *kadm.Client, b *kadm.ACLBuilder) {
	t.Helper()
	res, err := adm.CreateACLs(testContext(t), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("creating ACL: %v", r.Err)
		}
	}
}

var authorizationErrors = []*kerr.Error{kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed,
	kerr.ClusterAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed}

func isAuthorizationError(code int16) bool {
	for _, e := range authorizationErrors {
		if e.Code == code {
			return true
		}
	}
	return false
}

// TestACLTopicExistenceNotLeaked checks that a principal that may not
// describe a topic gets the same answer whether it exists or not.
func TestACLTopicExistenceNotLeaked(t *testing.T) {
	_, addr := aclBroker(t)
	adm := kadm.NewClient(saslClient(t, addr, "admin", "admin-pw"))
	if r, err := adm.CreateTopic(testContext(t), 1, 1, nil, "secret"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	cl := saslClient(t, addr, "u1", "pw")
	for _, topic := range []string{"secret", "no-such-topic"} {
		r := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = &topic
		r.Topics = append(r.Topics, mt)
		resp, err := r.RequestWith(testContext(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("metadata of %s: %+v", topic, resp.Topics)
		}
		del := kmsg.NewPtrDeleteTopicsRequest()
		del.TopicNames = []string{topic}
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.Topic = &topic
		del.Topics, del.TimeoutMillis = append(del.Topics, dt), 5000
		dresp, err := del.RequestWith(testContext(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if dresp.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("deleting %s: %v", topic, kerr.ErrorForCode(dresp.Topics[0].ErrorCode))
		}
	}
	// Listing all topics leaves it out; it was not auto-created either.
	all, err := kmsg.NewPtrMetadataRequest().RequestWith(testContext(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Topics) != 0 {
		t.Fatalf("listing all topics showed %d", len(all.Topics))
	}
	if topics, _ := adm.ListTopics(testContext(t)); topics.Has("no-such-topic") {
		t.Fatal("a metadata request without CREATE created the topic")
	}
}

// TestACLCreateTopicsExistence pins CreateTopics to what Kafka answers
// (ControllerApis.createTopics and ReplicationControlManager.createTopics,
// Kafka 3.9/4.0):
//   - without CREATE on the cluster or the topic, TOPIC_AUTHORIZATION_FAILED
//     whether the topic exists or not, so existence does not leak;
//   - with CREATE, an existing topic is TOPIC_ALREADY_EXISTS even without
//     DESCRIBE: Kafka checks existence after authorization and asks for
//     no DESCRIBE (CREATE does not imply DESCRIBE, yet the principal may
//     create the name, so it learns only what a create attempt teaches);
//   - a created topic's configuration, partition count and replication
//     factor come back only with DESCRIBE_CONFIGS on the topic (cluster
//     CREATE does not grant it); otherwise ConfigErrorCode is
//     TOPIC_AUTHORIZATION_FAILED and the counts are -1.
func TestACLCreateTopicsExistence(t *testing.T) {
	_, addr := aclBroker(t)
	adm := kadm.NewClient(saslClient(t, addr, "admin", "admin-pw"))
	if r, err := adm.CreateTopic(testContext(t), 1, 1, nil, "exists"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	create := func(cl *kgo.Client, topics ...string) *kmsg.CreateTopicsResponse {
		t.Helper()
		r := kmsg.NewPtrCreateTopicsRequest()
		r.TimeoutMillis = 10000
		for _, name := range topics {
			ct := kmsg.NewCreateTopicsRequestTopic()
			ct.Topic, ct.NumPartitions, ct.ReplicationFactor = name, 1, 1
			r.Topics = append(r.Topics, ct)
		}
		resp, err := r.RequestWith(testContext(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Version < 5 {
			t.Fatalf("CreateTopics v%d: want v5+ to see the configurations", resp.Version)
		}
		if len(resp.Topics) != len(topics) {
			t.Fatalf("%d results for %d topics", len(resp.Topics), len(topics))
		}
		return resp
	}
	result := func(resp *kmsg.CreateTopicsResponse, name string) kmsg.CreateTopicsResponseTopic {
		t.Helper()
		for _, rt := range resp.Topics {
			if rt.Topic == name {
				return rt
			}
		}
		t.Fatalf("no result for %s", name)
		return kmsg.CreateTopicsResponseTopic{}
	}
	// grantAndCreate grants the ACLs, waits until they apply to name,
	// and returns name's result.
	grantAndCreate := func(cl *kgo.Client, name string, acls *kadm.ACLBuilder) kmsg.CreateTopicsResponseTopic {
		t.Helper()
		grant(t, adm, acls)
		var got kmsg.CreateTopicsResponseTopic
		poll.UntilStatus(t, 30*time.Second, "the ACLs to apply", func() (bool, string) {
			got = result(create(cl, name), name)
			return got.ErrorCode != kerr.TopicAuthorizationFailed.Code, fmt.Sprint(kerr.ErrorForCode(got.ErrorCode))
		})
		return got
	}
	hidden := func(rt kmsg.CreateTopicsResponseTopic) bool {
		return rt.ConfigErrorCode == kerr.TopicAuthorizationFailed.Code && len(rt.Configs) == 0 && rt.NumPartitions == -1 && rt.ReplicationFactor == -1
	}

	t.Run("no CREATE", func(t *testing.T) {
		resp := create(saslClient(t, addr, "u30", "pw"), "exists", "absent-0")
		e, a := result(resp, "exists"), result(resp, "absent-0")
		if e.ErrorCode != kerr.TopicAuthorizationFailed.Code || a.ErrorCode != e.ErrorCode ||
			fmt.Sprint(e.ErrorMessage) != fmt.Sprint(a.ErrorMessage) || e.NumPartitions != a.NumPartitions {
			t.Fatalf("existing %+v, absent %+v: want the same TOPIC_AUTHORIZATION_FAILED", e, a)
		}
		if topics, _ := adm.ListTopics(testContext(t)); topics.Has("absent-0") {
			t.Fatal("created without CREATE")
		}
		// A name given twice is INVALID_REQUEST before authorization, as
		// in Kafka's ControllerApis.createTopics; it reveals nothing.
		r := kmsg.NewPtrCreateTopicsRequest()
		r.TimeoutMillis = 10000
		for range 2 {
			ct := kmsg.NewCreateTopicsRequestTopic()
			ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "exists", 1, 1
			r.Topics = append(r.Topics, ct)
		}
		dup, err := r.RequestWith(testContext(t), saslClient(t, addr, "u30", "pw"))
		if err != nil {
			t.Fatal(err)
		}
		if len(dup.Topics) != 1 || dup.Topics[0].ErrorCode != kerr.InvalidRequest.Code {
			t.Fatalf("a duplicate name without CREATE: %+v, want one INVALID_REQUEST", dup.Topics)
		}
	})
	t.Run("topic CREATE without DESCRIBE", func(t *testing.T) {
		cl := saslClient(t, addr, "u31", "pw")
		got := grantAndCreate(cl, "exists", kadm.NewACLs().Allow("User:u31").Topics("exists", "absent-1").Operations(kadm.OpCreate))
		if got.ErrorCode != kerr.TopicAlreadyExists.Code {
			t.Fatalf("existing topic: %v, want TOPIC_ALREADY_EXISTS as Kafka answers", kerr.ErrorForCode(got.ErrorCode))
		}
		created := grantAndCreate(cl, "absent-1", kadm.NewACLs().Allow("User:u31").Topics("absent-1").Operations(kadm.OpCreate))
		if created.ErrorCode != 0 || !hidden(created) {
			t.Fatalf("created without DESCRIBE_CONFIGS: %+v, want success with the configuration withheld", created)
		}
	})
	t.Run("topic CREATE and DESCRIBE_CONFIGS", func(t *testing.T) {
		cl := saslClient(t, addr, "u32", "pw")
		created := grantAndCreate(cl, "absent-2", kadm.NewACLs().Allow("User:u32").Topics("absent-2").Operations(kadm.OpCreate, kadm.OpDescribeConfigs))
		if created.ErrorCode != 0 || created.ConfigErrorCode != 0 || len(created.Configs) == 0 || created.NumPartitions != 1 || created.ReplicationFactor != 1 {
			t.Fatalf("created with DESCRIBE_CONFIGS: %+v", created)
		}
	})
	t.Run("cluster CREATE", func(t *testing.T) {
		cl := saslClient(t, addr, "u33", "pw")
		created := grantAndCreate(cl, "absent-3", kadm.NewACLs().Allow("User:u33").Clusters().Operations(kadm.OpCreate))
		if created.ErrorCode != 0 || !hidden(created) {
			t.Fatalf("created with cluster CREATE only: %+v, want the configuration withheld", created)
		}
		if got := result(create(cl, "exists"), "exists"); got.ErrorCode != kerr.TopicAlreadyExists.Code {
			t.Fatalf("existing topic with cluster CREATE: %v", kerr.ErrorForCode(got.ErrorCode))
		}
	})
}

// TestACLAnonymousAndSuperUser checks that PLAINTEXT's ANONYMOUS principal
// is denied with no ACL, allowed by a User:* ACL, and that DENY wins.
func TestACLAnonymousAndSuperUser(t *testing.T) {
	b, addr := aclBroker(t)
	adm := kadm.NewClient(saslClient(t, addr, "admin", "admin-pw"))
	if r, err := adm.CreateTopic(testContext(t), 1, 1, nil, "open"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	anon := newClient(t, b.Addr(), kgo.RequestRetries(0), kgo.DisableIdempotentWrite(), kgo.RecordRetries(0))
	produce := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return anon.ProduceSync(ctx, &kgo.Record{Topic: "open", Value: []byte("x")}).FirstErr()
	}
	if err := produce(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("ANONYMOUS without ACLs: %v", err)
	}
	grant(t, adm, kadm.NewACLs().Allow("User:*").Topics("open").Operations(kadm.OpWrite))
	poll.Until(t, 30*time.Second, "User:* WRITE to let ANONYMOUS produce", func() bool { return produce() == nil })
	grant(t, adm, kadm.NewACLs().Deny("User:ANONYMOUS").Topics("open").Operations(kadm.OpWrite))
	poll.Until(t, 30*time.Second, "DENY to win over ALLOW", func() bool { return errors.Is(produce(), kerr.TopicAuthorizationFailed) })

	// The ACLs are in the metadata image: DescribeAcls lists them.
	dreq := kmsg.NewPtrDescribeACLsRequest()
	dreq.ResourceType, dreq.ResourcePatternType, dreq.Operation, dreq.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	described, err := dreq.RequestWith(testContext(t), saslClient(t, addr, "admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, res := range described.Resources {
		n += len(res.ACLs)
	}
	if n != 2 {
		t.Fatalf("DescribeAcls found %d ACLs, want 2", n)
	}
	deleted, err := adm.DeleteACLs(testContext(t), kadm.NewACLs().Deny("User:ANONYMOUS").DenyHosts("*").Topics("open").Operations(kadm.OpWrite))
	if err != nil || len(deleted) != 1 || len(deleted[0].Deleted) != 1 {
		t.Fatalf("DeleteAcls: %v %+v", err, deleted)
	}
	poll.Until(t, 30*time.Second, "the deleted DENY to stop applying", func() bool { return produce() == nil })
}
