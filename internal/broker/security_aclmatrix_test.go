package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// firstCode is the first nonzero ErrorCode of a response, searched depth
// first through its fields, entries and their entries; 0 when there is
// none.
func firstCode(resp kmsg.Response) int16 {
	return firstCodeOf(reflect.ValueOf(resp))
}

func firstCodeOf(v reflect.Value) int16 {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return firstCodeOf(v.Elem())
	case reflect.Slice:
		for i := range v.Len() {
			if c := firstCodeOf(v.Index(i)); c != 0 {
				return c
			}
		}
	case reflect.Struct:
		if f := v.FieldByName("ErrorCode"); f.IsValid() && f.Kind() == reflect.Int16 && f.Int() != 0 {
			return int16(f.Int())
		}
		for i := range v.NumField() {
			if f := v.Field(i); f.Kind() == reflect.Slice || f.Kind() == reflect.Struct {
				if c := firstCodeOf(f); c != 0 {
					return c
				}
			}
		}
	}
	return 0
}

// codesByName maps each named entry of a response (a topic, a config
// resource) to its first error code, and returns the response's own
// error code.
func codesByName(resp kmsg.Response) (top int16, byName map[string]int16) {
	byName = map[string]int16{}
	v := reflect.ValueOf(resp).Elem()
	if f := v.FieldByName("ErrorCode"); f.IsValid() {
		top = int16(f.Int())
	}
	var walk func(reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Struct:
			for _, field := range []string{"Topic", "ResourceName"} {
				if f := v.FieldByName(field); f.IsValid() && f.Kind() == reflect.String {
					byName[f.String()] = firstCodeOf(v)
					return
				}
			}
			for i := range v.NumField() {
				walk(v.Field(i))
			}
		}
	}
	walk(v)
	return top, byName
}

// splitAnswer checks Kafka's answer to a request naming a resource the
// principal may not use (denied, answered code) and one it may (allowed,
// answered allowedCode, or, when that is nil, anything but an
// authorization error): the request is not refused as a whole.
func splitAnswer(denied string, code *kerr.Error, allowed string, allowedCode *kerr.Error) func(kmsg.Response) error {
	return func(resp kmsg.Response) error {
		top, byName := codesByName(resp)
		got, ok := byName[allowed]
		switch {
		case top != 0:
			return fmt.Errorf("the whole request answered %v", kerr.ErrorForCode(top))
		case byName[denied] != code.Code:
			return fmt.Errorf("%s answered %v, want %v", denied, kerr.ErrorForCode(byName[denied]), code)
		case !ok:
			return fmt.Errorf("no answer for %s", allowed)
		case allowedCode != nil && got != allowedCode.Code:
			return fmt.Errorf("%s answered %v, want %v", allowed, kerr.ErrorForCode(got), allowedCode)
		case allowedCode == nil && isAuthorizationError(got):
			return fmt.Errorf("%s answered %v", allowed, kerr.ErrorForCode(got))
		}
		return nil
	}
}

// everyEntry checks that a response answers code for the whole request
// and for each entry of name, as Kafka's error responses of the
// partition-list admin APIs do.
func everyEntry(code *kerr.Error, name string) func(kmsg.Response) error {
	return func(resp kmsg.Response) error {
		top, byName := codesByName(resp)
		if top != code.Code || byName[name] != code.Code {
			return fmt.Errorf("answered %v, %s %v; want %v for both", kerr.ErrorForCode(top), name, kerr.ErrorForCode(byName[name]), code)
		}
		return nil
	}
}

type aclFn func(*kadm.ACLBuilder) *kadm.ACLBuilder

// aclRow is one line of the matrix: a request, the ACLs it needs and
// Kafka's answers without and with them.
type aclRow struct {
	name string
	// base is granted first, so that the check under test is the one
	// reached (e.g. WRITE on the transactional id before the group's).
	base aclFn
	// acl is what the request needs; nil when it needs none (it must
	// then work without any ACL).
	acl aclFn
	req func() kmsg.Request
	// want is Kafka's error without acl; denied, when set instead, checks
	// Kafka's answer without acl when it is a filtered one.
	want   *kerr.Error
	denied func(kmsg.Response) error
	// allowed checks the answer with acl, beyond it having no
	// authorization error.
	allowed func(kmsg.Response) error
	// routed sends the request through the client's routing (to the
	// coordinator, the controller...); otherwise straight to the broker.
	routed bool
	opts   []kgo.Opt
}

// TestACLMatrix sends each API the broker advertises as a principal
// without, then with, the ACLs it needs, over SASL with franz-go, and
// checks Kafka's answers (KafkaApis/ControllerApis and the documentation's
// "Operations and Resources on Protocols"): the authorization error, or
// the filtered answer, first; no authorization error after. The first
// subtest fails when the broker advertises an API without a row here, so
// an API cannot ship without its authorization test.
func TestACLMatrix(t *testing.T) {
	b, addr := aclBroker(t)
	admin := saslClient(t, addr, "admin", "admin-pw")
	adm := kadm.NewClient(admin)
	ctx := testContext(t)
	for _, topic := range []string{"t", "t2", "del", "markers", "txt"} {
		if r, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil || r.Err != nil {
			t.Fatalf("%s: %v %v", topic, err, r.Err)
		}
	}
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Group lg has committed offsets (ListGroups lists it, OffsetDelete
	// deletes them); transaction tx-d is ongoing with partition txt-0
	// (DescribeTransactions and ListTransactions show it).
	offsets := kadm.Offsets{}
	offsets.AddOffset("t", 0, 1, -1)
	if err := adm.CommitAllOffsets(ctx, "lg", offsets); err != nil {
		t.Fatal(err)
	}
	openTransaction(t, addr, "tx-d", "txt")

	str := func(s string) *string { return &s }
	topicACL := func(name string, ops ...kadm.ACLOperation) aclFn {
		return func(b *kadm.ACLBuilder) *kadm.ACLBuilder { return b.Topics(name).Operations(ops...) }
	}
	groupACL := func(name string, ops ...kadm.ACLOperation) aclFn {
		return func(b *kadm.ACLBuilder) *kadm.ACLBuilder { return b.Groups(name).Operations(ops...) }
	}
	txnACL := func(id string, ops ...kadm.ACLOperation) aclFn {
		return func(b *kadm.ACLBuilder) *kadm.ACLBuilder { return b.TransactionalIDs(id).Operations(ops...) }
	}
	clusterACL := func(ops ...kadm.ACLOperation) aclFn {
		return func(b *kadm.ACLBuilder) *kadm.ACLBuilder { return b.Clusters().Operations(ops...) }
	}
	metadataReq := func(topics ...string) kmsg.Request {
		r := kmsg.NewPtrMetadataRequest()
		for _, topic := range topics {
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = str(topic)
			r.Topics = append(r.Topics, mt)
		}
		return r
	}
	hasTopic := func(want bool) func(kmsg.Response) error {
		return func(resp kmsg.Response) error {
			for _, rt := range resp.(*kmsg.MetadataResponse).Topics {
				if rt.Topic != nil && *rt.Topic == "t" {
					if !want {
						return errors.New("lists topic t")
					}
					return nil
				}
			}
			if want {
				return errors.New("does not list topic t")
			}
			return nil
		}
	}
	produceReq := func(txn *string) kmsg.Request {
		r := kmsg.NewPtrProduceRequest()
		r.Acks, r.TimeoutMillis, r.TransactionID = -1, 5000, txn
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = buildBatch(1, "v")
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
		return r
	}
	fetchReq := func(replica int32) kmsg.Request {
		r := kmsg.NewPtrFetchRequest()
		r.ReplicaID, r.MaxWaitMillis, r.MaxBytes = replica, 10, 1<<20
		r.ReplicaState.ID = replica
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = "t", b.image.Load().Topics["t"].ID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = 1<<20, -1
		ft.Partitions = append(ft.Partitions, fp)
		r.Topics = append(r.Topics, ft)
		return r
	}
	offsetForLeaderEpochReq := func(replica int32) kmsg.Request {
		r := kmsg.NewPtrOffsetForLeaderEpochRequest()
		r.ReplicaID = replica
		ot := kmsg.NewOffsetForLeaderEpochRequestTopic()
		ot.Topic = "t"
		op := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		op.CurrentLeaderEpoch, op.LeaderEpoch = -1, 0
		ot.Partitions = append(ot.Partitions, op)
		r.Topics = append(r.Topics, ot)
		return r
	}
	createTopicsReq := func(name string) func() kmsg.Request {
		return func() kmsg.Request {
			r := kmsg.NewPtrCreateTopicsRequest()
			ct := kmsg.NewCreateTopicsRequestTopic()
			ct.Topic, ct.NumPartitions, ct.ReplicationFactor = name, 1, 1
			r.Topics, r.TimeoutMillis = append(r.Topics, ct), 10000
			return r
		}
	}
	describeConfigsReq := func(rt kmsg.ConfigResourceType, name string) func() kmsg.Request {
		return func() kmsg.Request {
			r := kmsg.NewPtrDescribeConfigsRequest()
			res := kmsg.NewDescribeConfigsRequestResource()
			res.ResourceType, res.ResourceName = rt, name
			r.Resources = append(r.Resources, res)
			return r
		}
	}
	alterConfigsReq := func(rt kmsg.ConfigResourceType, names ...string) func() kmsg.Request {
		return func() kmsg.Request {
			r := kmsg.NewPtrAlterConfigsRequest()
			r.ValidateOnly = true
			for _, name := range names {
				res := kmsg.NewAlterConfigsRequestResource()
				res.ResourceType, res.ResourceName = rt, name
				if rt == kmsg.ConfigResourceTypeTopic {
					c := kmsg.NewAlterConfigsRequestResourceConfig()
					c.Name, c.Value = "retention.ms", str("100000")
					res.Configs = append(res.Configs, c)
				}
				r.Resources = append(r.Resources, res)
			}
			return r
		}
	}
	incrementalAlterConfigsReq := func(rt kmsg.ConfigResourceType, names ...string) func() kmsg.Request {
		return func() kmsg.Request {
			r := kmsg.NewPtrIncrementalAlterConfigsRequest()
			for _, name := range names {
				res := kmsg.NewIncrementalAlterConfigsRequestResource()
				res.ResourceType, res.ResourceName = rt, name
				c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
				c.Name, c.Value = "retention.ms", str("100000")
				if rt == kmsg.ConfigResourceTypeBroker {
					c.Name, c.Value = "log.retention.ms", str("100000")
				}
				r.ValidateOnly = true
				res.Configs = append(res.Configs, c)
				r.Resources = append(r.Resources, res)
			}
			return r
		}
	}
	heartbeatReq := func() kmsg.Request {
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.MemberID, r.Generation = "g", "m", 1
		return r
	}
	syncGroupReq := func() kmsg.Request {
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.MemberID, r.Generation = "g", "m", 1
		r.ProtocolType, r.Protocol = str("consumer"), str("range")
		return r
	}
	leaveGroupReq := func() kmsg.Request {
		r := kmsg.NewPtrLeaveGroupRequest()
		r.Group, r.MemberID = "g", "m"
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = "m"
		r.Members = append(r.Members, m)
		return r
	}
	offsetDeleteReq := func(topics ...string) func() kmsg.Request {
		return func() kmsg.Request {
			r := kmsg.NewPtrOffsetDeleteRequest()
			r.Group = "lg"
			for _, topic := range topics {
				ot := kmsg.NewOffsetDeleteRequestTopic()
				ot.Topic = topic
				ot.Partitions = append(ot.Partitions, kmsg.NewOffsetDeleteRequestTopicPartition())
				r.Topics = append(r.Topics, ot)
			}
			return r
		}
	}
	listGroupsHas := func(want bool) func(kmsg.Response) error {
		return func(resp kmsg.Response) error {
			r := resp.(*kmsg.ListGroupsResponse)
			found := slices.ContainsFunc(r.Groups, func(g kmsg.ListGroupsResponseGroup) bool { return g.Group == "lg" })
			switch {
			case r.ErrorCode != 0:
				return kerr.ErrorForCode(r.ErrorCode)
			case found != want:
				return fmt.Errorf("group lg listed: %v, want %v", found, want)
			}
			return nil
		}
	}
	initProducerIDReq := func(txn *string) func() kmsg.Request {
		return func() kmsg.Request {
			r := kmsg.NewPtrInitProducerIDRequest()
			r.TransactionalID, r.TransactionTimeoutMillis = txn, 60000
			return r
		}
	}
	addPartitionsToTxnReq := func(id string, topics ...string) func() kmsg.Request {
		return func() kmsg.Request {
			r := kmsg.NewPtrAddPartitionsToTxnRequest()
			r.TransactionalID, r.ProducerID, r.ProducerEpoch = id, 1, 0
			for _, topic := range topics {
				rt := kmsg.NewAddPartitionsToTxnRequestTopic()
				rt.Topic, rt.Partitions = topic, []int32{0}
				r.Topics = append(r.Topics, rt)
			}
			return r
		}
	}
	clientAddPartitions := kversion.Stable()
	clientAddPartitions.SetMaxKeyVersion(kmsg.AddPartitionsToTxn.Int16(), 3) // v4+ is the brokers' form
	addOffsetsToTxnReq := func() kmsg.Request {
		r := kmsg.NewPtrAddOffsetsToTxnRequest()
		r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Group = "tx-ao", 1, 0, "g"
		return r
	}
	txnOffsetCommitReq := func(id string, topics ...string) func() kmsg.Request {
		if topics == nil {
			topics = []string{"t"}
		}
		return func() kmsg.Request {
			r := kmsg.NewPtrTxnOffsetCommitRequest()
			r.TransactionalID, r.Group, r.ProducerID, r.ProducerEpoch, r.Generation = id, "g", 1, 0, -1
			for _, topic := range topics {
				ot := kmsg.NewTxnOffsetCommitRequestTopic()
				ot.Topic = topic
				op := kmsg.NewTxnOffsetCommitRequestTopicPartition()
				op.Offset = 1
				ot.Partitions = append(ot.Partitions, op)
				r.Topics = append(r.Topics, ot)
			}
			return r
		}
	}
	offsetFetchReq := func(topics ...string) func() kmsg.Request {
		return func() kmsg.Request {
			r := kmsg.NewPtrOffsetFetchRequest()
			r.Group = "g"
			g := kmsg.NewOffsetFetchRequestGroup()
			g.Group = "g"
			for _, topic := range topics {
				rt := kmsg.NewOffsetFetchRequestGroupTopic()
				rt.Topic, rt.Partitions = topic, []int32{0}
				g.Topics = append(g.Topics, rt)
				ot := kmsg.NewOffsetFetchRequestTopic()
				ot.Topic, ot.Partitions = topic, []int32{0}
				r.Topics = append(r.Topics, ot)
			}
			r.Groups = append(r.Groups, g)
			return r
		}
	}
	describeTransactionsReq := func() kmsg.Request {
		r := kmsg.NewPtrDescribeTransactionsRequest()
		r.TransactionalIDs = []string{"tx-d"}
		return r
	}
	describedTopics := func(want bool) func(kmsg.Response) error {
		return func(resp kmsg.Response) error {
			r := resp.(*kmsg.DescribeTransactionsResponse)
			if len(r.TransactionStates) != 1 || r.TransactionStates[0].ErrorCode != 0 {
				return fmt.Errorf("states %+v", r.TransactionStates)
			}
			if got := len(r.TransactionStates[0].Topics) > 0; got != want {
				return fmt.Errorf("partitions of txt shown: %v, want %v", got, want)
			}
			return nil
		}
	}
	listTransactionsHas := func(want bool) func(kmsg.Response) error {
		return func(resp kmsg.Response) error {
			r := resp.(*kmsg.ListTransactionsResponse)
			found := slices.ContainsFunc(r.TransactionStates, func(s kmsg.ListTransactionsResponseTransactionState) bool { return s.TransactionalID == "tx-d" })
			if r.ErrorCode != 0 || found != want {
				return fmt.Errorf("error %v, tx-d listed: %v, want %v", kerr.ErrorForCode(r.ErrorCode), found, want)
			}
			return nil
		}
	}
	describeClusterOpsReq := func() kmsg.Request {
		r := kmsg.NewPtrDescribeClusterRequest()
		r.EndpointType, r.IncludeClusterAuthorizedOperations = 1, true
		return r
	}
	clusterOps := func(want int32) func(kmsg.Response) error {
		return func(resp kmsg.Response) error {
			r := resp.(*kmsg.DescribeClusterResponse)
			if r.ErrorCode != 0 || r.ClusterAuthorizedOperations != want {
				return fmt.Errorf("error %v, authorized operations %#x, want %#x", kerr.ErrorForCode(r.ErrorCode), r.ClusterAuthorizedOperations, want)
			}
			return nil
		}
	}
	bits := func(ops ...kmsg.ACLOperation) int32 {
		var out int32
		for _, op := range ops {
			out |= 1 << op
		}
		return out
	}
	metadataOpsReq := func() kmsg.Request {
		r := metadataReq("t").(*kmsg.MetadataRequest)
		r.IncludeTopicAuthorizedOperations = true
		return r
	}
	// topicOps checks topic t's answer: code (0 for none) and its
	// authorized operations.
	topicOps := func(code int16, want int32) func(kmsg.Response) error {
		return func(resp kmsg.Response) error {
			r := resp.(*kmsg.MetadataResponse)
			if len(r.Topics) != 1 || r.Topics[0].ErrorCode != code || r.Topics[0].AuthorizedOperations != want {
				return fmt.Errorf("answered %+v, want %v and authorized operations %#x", r.Topics, kerr.ErrorForCode(code), want)
			}
			return nil
		}
	}
	metadataClusterOps := func(want int32) func(kmsg.Response) error {
		return func(resp kmsg.Response) error {
			if r := resp.(*kmsg.MetadataResponse); r.Version != 10 || r.AuthorizedOperations != want {
				return fmt.Errorf("v%d: cluster authorized operations %#x, want %#x", r.Version, r.AuthorizedOperations, want)
			}
			return nil
		}
	}
	metadataV10 := kversion.Stable()
	metadataV10.SetMaxKeyVersion(kmsg.Metadata.Int16(), 10)
	describeGroupsOpsReq := func() kmsg.Request {
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.Groups, r.IncludeAuthorizedOperations = []string{"lg"}, true
		return r
	}
	groupOps := func(want int32) func(kmsg.Response) error {
		return func(resp kmsg.Response) error {
			r := resp.(*kmsg.DescribeGroupsResponse)
			if len(r.Groups) != 1 || r.Groups[0].ErrorCode != 0 || r.Groups[0].AuthorizedOperations != want {
				return fmt.Errorf("answered %+v, want authorized operations %#x", r.Groups, want)
			}
			return nil
		}
	}
	noError := func(resp kmsg.Response) error {
		if c := firstCode(resp); c != 0 {
			return kerr.ErrorForCode(c)
		}
		return nil
	}
	rows := []aclRow{
		{name: "ApiVersions", req: func() kmsg.Request { return kmsg.NewPtrApiVersionsRequest() }, allowed: noError},
		{name: "DescribeCluster", req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeClusterRequest()
			r.EndpointType = 1
			return r
		}, allowed: noError},

		{name: "DescribeCluster authorized operations", acl: clusterACL(kadm.OpDescribe), req: describeClusterOpsReq,
			denied: clusterOps(0), allowed: clusterOps(1 << kmsg.ACLOperationDescribe)},

		{name: "Metadata topic authorized operations", acl: topicACL("t", kadm.OpDescribe, kadm.OpWrite), req: metadataOpsReq,
			denied:  topicOps(kerr.TopicAuthorizationFailed.Code, math.MinInt32),
			allowed: topicOps(0, bits(kmsg.ACLOperationDescribe, kmsg.ACLOperationWrite))},
		{name: "Metadata cluster authorized operations", acl: clusterACL(kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrMetadataRequest()
			r.IncludeClusterAuthorizedOperations = true
			return r
		}, denied: metadataClusterOps(0), allowed: metadataClusterOps(bits(kmsg.ACLOperationDescribe)), opts: []kgo.Opt{kgo.MaxVersions(metadataV10)}},
		{name: "DescribeGroups authorized operations", acl: groupACL("lg", kadm.OpDescribe, kadm.OpDelete), req: describeGroupsOpsReq,
			want: kerr.GroupAuthorizationFailed, allowed: groupOps(bits(kmsg.ACLOperationDescribe, kmsg.ACLOperationDelete))},

		{name: "Produce", acl: topicACL("t", kadm.OpWrite), req: func() kmsg.Request { return produceReq(nil) }, want: kerr.TopicAuthorizationFailed},
		{name: "Produce transactional", acl: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.Topics("t").TransactionalIDs("tx-p").Operations(kadm.OpWrite)
		}, req: func() kmsg.Request { return produceReq(str("tx-p")) }, want: kerr.TransactionalIDAuthorizationFailed},
		{name: "Fetch", acl: topicACL("t", kadm.OpRead), req: func() kmsg.Request { return fetchReq(-1) }, want: kerr.TopicAuthorizationFailed},
		{name: "Fetch as a replica", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request { return fetchReq(7) }, want: kerr.TopicAuthorizationFailed},
		{name: "Metadata", acl: topicACL("t", kadm.OpDescribe), req: func() kmsg.Request { return metadataReq("t") }, want: kerr.TopicAuthorizationFailed, routed: true},
		{name: "Metadata of all topics", acl: topicACL("t", kadm.OpDescribe), req: func() kmsg.Request {
			return kmsg.NewPtrMetadataRequest()
		}, denied: hasTopic(false), allowed: hasTopic(true)},
		// By id, a topic it may not describe is denied without its name.
		{name: "Metadata by topic id", acl: topicACL("t", kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.TopicID = b.image.Load().Topics["t"].ID
			r.Topics = append(r.Topics, mt)
			return r
		}, denied: func(resp kmsg.Response) error {
			r := resp.(*kmsg.MetadataResponse)
			if r.Version < 10 || len(r.Topics) != 1 || r.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || r.Topics[0].Topic != nil || len(r.Topics[0].Partitions) != 0 {
				return fmt.Errorf("v%d answered %+v, want TOPIC_AUTHORIZATION_FAILED without a name", r.Version, r.Topics)
			}
			return nil
		}, allowed: hasTopic(true)},
		{name: "ListOffsets", acl: topicACL("t", kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrListOffsetsRequest()
			lt := kmsg.NewListOffsetsRequestTopic()
			lt.Topic = "t"
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Timestamp = -1
			lt.Partitions = append(lt.Partitions, lp)
			r.Topics = append(r.Topics, lt)
			return r
		}, want: kerr.TopicAuthorizationFailed},
		{name: "OffsetForLeaderEpoch", acl: topicACL("t", kadm.OpDescribe), req: func() kmsg.Request { return offsetForLeaderEpochReq(-1) }, want: kerr.TopicAuthorizationFailed},
		{name: "OffsetForLeaderEpoch as a replica", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request { return offsetForLeaderEpochReq(7) }, want: kerr.ClusterAuthorizationFailed},
		{name: "DescribeTopicPartitions", acl: topicACL("t", kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeTopicPartitionsRequest()
			dt := kmsg.NewDescribeTopicPartitionsRequestTopic()
			dt.Topic = "t"
			r.Topics, r.ResponsePartitionLimit = append(r.Topics, dt), 100
			return r
		}, want: kerr.TopicAuthorizationFailed},
		{name: "DescribeProducers", acl: topicACL("t", kadm.OpRead), req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeProducersRequest()
			rt := kmsg.NewDescribeProducersRequestTopic()
			rt.Topic, rt.Partitions = "t", []int32{0}
			r.Topics = append(r.Topics, rt)
			return r
		}, want: kerr.TopicAuthorizationFailed},
		{name: "DeleteRecords", acl: topicACL("t", kadm.OpDelete), req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteRecordsRequest()
			dt := kmsg.NewDeleteRecordsRequestTopic()
			dt.Topic = "t"
			dt.Partitions = append(dt.Partitions, kmsg.NewDeleteRecordsRequestTopicPartition())
			r.Topics, r.TimeoutMillis = append(r.Topics, dt), 5000
			return r
		}, want: kerr.TopicAuthorizationFailed},

		{name: "CreateTopics", acl: clusterACL(kadm.OpCreate), req: createTopicsReq("created"), want: kerr.TopicAuthorizationFailed},
		{name: "CreateTopics with topic CREATE", acl: topicACL("created-t", kadm.OpCreate), req: createTopicsReq("created-t"), want: kerr.TopicAuthorizationFailed},
		// An existing topic: TOPIC_AUTHORIZATION_FAILED without CREATE,
		// TOPIC_ALREADY_EXISTS with it (see TestACLCreateTopicsExistence).
		{name: "CreateTopics existing with topic CREATE", acl: topicACL("t2", kadm.OpCreate), req: createTopicsReq("t2"), want: kerr.TopicAuthorizationFailed},
		{name: "DeleteTopics", acl: topicACL("del", kadm.OpDelete), req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteTopicsRequest()
			r.TopicNames, r.TimeoutMillis = []string{"del"}, 10000
			dt := kmsg.NewDeleteTopicsRequestTopic()
			dt.Topic = str("del")
			r.Topics = append(r.Topics, dt)
			return r
		}, want: kerr.TopicAuthorizationFailed},
		{name: "CreatePartitions", acl: topicACL("t2", kadm.OpAlter), req: func() kmsg.Request {
			r := kmsg.NewPtrCreatePartitionsRequest()
			ct := kmsg.NewCreatePartitionsRequestTopic()
			ct.Topic, ct.Count = "t2", 2
			r.Topics, r.TimeoutMillis = append(r.Topics, ct), 10000
			return r
		}, want: kerr.TopicAuthorizationFailed},

		{name: "DescribeConfigs topic", acl: topicACL("t", kadm.OpDescribeConfigs), req: describeConfigsReq(kmsg.ConfigResourceTypeTopic, "t"), want: kerr.TopicAuthorizationFailed},
		{name: "DescribeConfigs broker", acl: clusterACL(kadm.OpDescribeConfigs), req: describeConfigsReq(kmsg.ConfigResourceTypeBroker, "1"), want: kerr.ClusterAuthorizationFailed},
		{name: "AlterConfigs topic", acl: topicACL("t", kadm.OpAlterConfigs), req: alterConfigsReq(kmsg.ConfigResourceTypeTopic, "t"), want: kerr.TopicAuthorizationFailed},
		{name: "AlterConfigs broker", acl: clusterACL(kadm.OpAlterConfigs), req: alterConfigsReq(kmsg.ConfigResourceTypeBroker, "1"), want: kerr.ClusterAuthorizationFailed},
		{name: "IncrementalAlterConfigs topic", acl: topicACL("t", kadm.OpAlterConfigs), req: incrementalAlterConfigsReq(kmsg.ConfigResourceTypeTopic, "t"), want: kerr.TopicAuthorizationFailed},
		{name: "IncrementalAlterConfigs broker", acl: clusterACL(kadm.OpAlterConfigs), req: incrementalAlterConfigsReq(kmsg.ConfigResourceTypeBroker, "1"), want: kerr.ClusterAuthorizationFailed},
		{name: "DescribeClientQuotas", acl: clusterACL(kadm.OpDescribeConfigs), req: func() kmsg.Request {
			return kmsg.NewPtrDescribeClientQuotasRequest()
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "AlterClientQuotas", acl: clusterACL(kadm.OpAlterConfigs), req: func() kmsg.Request {
			r := kmsg.NewPtrAlterClientQuotasRequest()
			r.ValidateOnly = true
			e := kmsg.NewAlterClientQuotasRequestEntry()
			ee := kmsg.NewAlterClientQuotasRequestEntryEntity()
			ee.Type, ee.Name = "user", str("quota-user")
			op := kmsg.NewAlterClientQuotasRequestEntryOp()
			op.Key, op.Value = "producer_byte_rate", 1024
			e.Entity, e.Ops = append(e.Entity, ee), append(e.Ops, op)
			r.Entries = append(r.Entries, e)
			return r
		}, want: kerr.ClusterAuthorizationFailed},

		{name: "FindCoordinator group", acl: groupACL("g", kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrFindCoordinatorRequest()
			r.CoordinatorKey, r.CoordinatorKeys = "g", []string{"g"}
			return r
		}, want: kerr.GroupAuthorizationFailed},
		{name: "FindCoordinator transaction", acl: txnACL("tx-f", kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrFindCoordinatorRequest()
			r.CoordinatorType, r.CoordinatorKey, r.CoordinatorKeys = 1, "tx-f", []string{"tx-f"}
			return r
		}, want: kerr.TransactionalIDAuthorizationFailed},
		{name: "JoinGroup", acl: groupACL("g", kadm.OpRead), req: func() kmsg.Request {
			r := kmsg.NewPtrJoinGroupRequest()
			r.Group, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = "g", 30000, 30000, "consumer"
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name = "range"
			r.Protocols = append(r.Protocols, p)
			return r
		}, want: kerr.GroupAuthorizationFailed},
		{name: "Heartbeat", acl: groupACL("g", kadm.OpRead), req: heartbeatReq, want: kerr.GroupAuthorizationFailed},
		{name: "SyncGroup", acl: groupACL("g", kadm.OpRead), req: syncGroupReq, want: kerr.GroupAuthorizationFailed},
		{name: "LeaveGroup", acl: groupACL("g", kadm.OpRead), req: leaveGroupReq, want: kerr.GroupAuthorizationFailed},
		{name: "OffsetCommit", acl: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.Topics("t").Groups("g").Operations(kadm.OpRead)
		}, req: func() kmsg.Request {
			r := kmsg.NewPtrOffsetCommitRequest()
			r.Group, r.Generation = "g", -1
			ot := kmsg.NewOffsetCommitRequestTopic()
			ot.Topic = "t"
			op := kmsg.NewOffsetCommitRequestTopicPartition()
			op.Offset = 1
			ot.Partitions = append(ot.Partitions, op)
			r.Topics = append(r.Topics, ot)
			return r
		}, want: kerr.GroupAuthorizationFailed},
		{name: "OffsetFetch", acl: groupACL("g", kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrOffsetFetchRequest()
			r.Group = "g"
			g := kmsg.NewOffsetFetchRequestGroup()
			g.Group = "g"
			r.Groups = append(r.Groups, g)
			return r
		}, want: kerr.GroupAuthorizationFailed},
		{name: "OffsetDelete", acl: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.Groups("lg").Topics("t").Operations(kadm.OpDelete, kadm.OpRead)
		}, req: offsetDeleteReq("t"), want: kerr.GroupAuthorizationFailed},
		{name: "OffsetDelete topic", base: groupACL("lg", kadm.OpDelete), acl: topicACL("t", kadm.OpRead), req: offsetDeleteReq("t"), want: kerr.TopicAuthorizationFailed},
		{name: "DescribeGroups", acl: groupACL("g", kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeGroupsRequest()
			r.Groups = []string{"g"}
			return r
		}, want: kerr.GroupAuthorizationFailed},
		{name: "ListGroups", acl: groupACL("lg", kadm.OpDescribe), req: func() kmsg.Request {
			return kmsg.NewPtrListGroupsRequest()
		}, denied: listGroupsHas(false), allowed: listGroupsHas(true)},
		{name: "ListGroups with cluster DESCRIBE", acl: clusterACL(kadm.OpDescribe), req: func() kmsg.Request {
			return kmsg.NewPtrListGroupsRequest()
		}, denied: listGroupsHas(false), allowed: listGroupsHas(true)},
		{name: "DeleteGroups", acl: groupACL("g", kadm.OpDelete), req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteGroupsRequest()
			r.Groups = []string{"g"}
			return r
		}, want: kerr.GroupAuthorizationFailed},
		{name: "ConsumerGroupHeartbeat", acl: groupACL("cg", kadm.OpRead), req: func() kmsg.Request {
			r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			r.Group, r.MemberID, r.MemberEpoch, r.RebalanceTimeoutMillis = "cg", "matrix-member-0000001", 0, 30000
			r.SubscribedTopicNames = []string{"t"}
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			return r
		}, want: kerr.GroupAuthorizationFailed},
		{name: "ConsumerGroupDescribe", acl: groupACL("cg", kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrConsumerGroupDescribeRequest()
			r.Groups = []string{"cg"}
			return r
		}, want: kerr.GroupAuthorizationFailed},

		{name: "InitProducerId idempotent", acl: clusterACL(kadm.OpIdempotentWrite), req: initProducerIDReq(nil), want: kerr.ClusterAuthorizationFailed},
		{name: "InitProducerId transactional", acl: txnACL("tx-i", kadm.OpWrite), req: initProducerIDReq(str("tx-i")), want: kerr.TransactionalIDAuthorizationFailed, allowed: noError},
		{name: "AddPartitionsToTxn", acl: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.TransactionalIDs("tx-a").Topics("t").Operations(kadm.OpWrite)
		}, req: addPartitionsToTxnReq("tx-a", "t"), want: kerr.TransactionalIDAuthorizationFailed, opts: []kgo.Opt{kgo.MaxVersions(clientAddPartitions)}},
		{name: "AddPartitionsToTxn topic", base: txnACL("tx-a", kadm.OpWrite), acl: topicACL("t", kadm.OpWrite),
			req: addPartitionsToTxnReq("tx-a", "t"), want: kerr.TopicAuthorizationFailed, opts: []kgo.Opt{kgo.MaxVersions(clientAddPartitions)}},
		{name: "AddPartitionsToTxn brokers' form", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request {
			r := kmsg.NewPtrAddPartitionsToTxnRequest()
			tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
			tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = "tx-b", 1, 0, true
			rt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
			rt.Topic, rt.Partitions = "t", []int32{0}
			tx.Topics = append(tx.Topics, rt)
			r.Transactions = append(r.Transactions, tx)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "AddOffsetsToTxn", acl: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.TransactionalIDs("tx-ao").Groups("g").Operations(kadm.OpWrite, kadm.OpRead)
		}, req: addOffsetsToTxnReq, want: kerr.TransactionalIDAuthorizationFailed},
		{name: "AddOffsetsToTxn group", base: txnACL("tx-ao", kadm.OpWrite), acl: groupACL("g", kadm.OpRead), req: addOffsetsToTxnReq, want: kerr.GroupAuthorizationFailed},
		{name: "EndTxn", acl: txnACL("tx-e", kadm.OpWrite), req: func() kmsg.Request {
			r := kmsg.NewPtrEndTxnRequest()
			r.TransactionalID, r.ProducerID, r.ProducerEpoch = "tx-e", 1, 0
			return r
		}, want: kerr.TransactionalIDAuthorizationFailed},
		{name: "TxnOffsetCommit", acl: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			// WRITE on the id, READ on the group and topic: ALL covers them.
			return b.TransactionalIDs("tx-o").Groups("g").Topics("t").Operations(kadm.OpAll)
		}, req: txnOffsetCommitReq("tx-o"), want: kerr.TransactionalIDAuthorizationFailed},
		{name: "TxnOffsetCommit group", base: txnACL("tx-og", kadm.OpWrite), acl: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.Groups("g").Topics("t").Operations(kadm.OpRead)
		}, req: txnOffsetCommitReq("tx-og"), want: kerr.GroupAuthorizationFailed},
		{name: "TxnOffsetCommit topic", base: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.TransactionalIDs("tx-ot").Groups("g").Operations(kadm.OpWrite, kadm.OpRead)
		}, acl: topicACL("t", kadm.OpRead), req: txnOffsetCommitReq("tx-ot"), want: kerr.TopicAuthorizationFailed},
		{name: "WriteTxnMarkers", acl: clusterACL(kadm.OpClusterAction), req: func() kmsg.Request {
			r := kmsg.NewPtrWriteTxnMarkersRequest()
			m := kmsg.NewWriteTxnMarkersRequestMarker()
			m.ProducerID, m.ProducerEpoch = 99, 0
			mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			mt.Topic, mt.Partitions = "markers", []int32{0}
			m.Topics = append(m.Topics, mt)
			r.Markers = append(r.Markers, m)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "DescribeTransactions", acl: txnACL("tx-d", kadm.OpDescribe), req: describeTransactionsReq, want: kerr.TransactionalIDAuthorizationFailed},
		// Kafka leaves out the partitions of topics the principal may not
		// describe.
		{name: "DescribeTransactions topics", base: txnACL("tx-d", kadm.OpDescribe), acl: topicACL("txt", kadm.OpDescribe), req: describeTransactionsReq,
			denied: describedTopics(false), allowed: describedTopics(true)},
		{name: "ListTransactions", acl: txnACL("tx-d", kadm.OpDescribe), req: func() kmsg.Request {
			return kmsg.NewPtrListTransactionsRequest()
		}, denied: listTransactionsHas(false), allowed: listTransactionsHas(true)},

		// A request naming a resource the principal may use and one it may
		// not is answered per resource, not refused as a whole.
		{name: "OffsetDelete of a topic it may not read", base: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.Groups("lg").Topics("t2").Operations(kadm.OpDelete, kadm.OpRead)
		}, acl: topicACL("t", kadm.OpRead), req: offsetDeleteReq("t", "t2"), denied: splitAnswer("t", kerr.TopicAuthorizationFailed, "t2", nil)},
		{name: "OffsetFetch of a topic it may not describe", base: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.Groups("g").Topics("t2").Operations(kadm.OpDescribe)
		}, acl: topicACL("t", kadm.OpDescribe), req: offsetFetchReq("t", "t2"), denied: splitAnswer("t", kerr.TopicAuthorizationFailed, "t2", nil)},
		{name: "TxnOffsetCommit of a topic it may not read", base: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.TransactionalIDs("tx-om").Groups("g").Topics("t2").Operations(kadm.OpWrite, kadm.OpRead)
		}, acl: topicACL("t", kadm.OpRead), req: txnOffsetCommitReq("tx-om", "t", "t2"), denied: splitAnswer("t", kerr.TopicAuthorizationFailed, "t2", nil)},
		// Kafka adds no partition then: the others are OPERATION_NOT_ATTEMPTED.
		{name: "AddPartitionsToTxn of a topic it may not write", base: func(b *kadm.ACLBuilder) *kadm.ACLBuilder {
			return b.TransactionalIDs("tx-am").Topics("t2").Operations(kadm.OpWrite)
		}, acl: topicACL("t", kadm.OpWrite), req: addPartitionsToTxnReq("tx-am", "t", "t2"),
			denied: splitAnswer("t", kerr.TopicAuthorizationFailed, "t2", kerr.OperationNotAttempted), opts: []kgo.Opt{kgo.MaxVersions(clientAddPartitions)}},
		{name: "AlterConfigs of a topic it may not alter", base: topicACL("t2", kadm.OpAlterConfigs), acl: topicACL("t", kadm.OpAlterConfigs),
			req: alterConfigsReq(kmsg.ConfigResourceTypeTopic, "t", "t2"), denied: splitAnswer("t", kerr.TopicAuthorizationFailed, "t2", nil)},
		{name: "IncrementalAlterConfigs of a topic it may not alter", base: topicACL("t2", kadm.OpAlterConfigs), acl: topicACL("t", kadm.OpAlterConfigs),
			req: incrementalAlterConfigsReq(kmsg.ConfigResourceTypeTopic, "t", "t2"), denied: splitAnswer("t", kerr.TopicAuthorizationFailed, "t2", nil)},

		{name: "CreateAcls", acl: clusterACL(kadm.OpAlter), req: func() kmsg.Request {
			r := kmsg.NewPtrCreateACLsRequest()
			c := kmsg.NewCreateACLsRequestCreation()
			c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeTopic, "x", kmsg.ACLResourcePatternTypeLiteral
			c.Principal, c.Host, c.Operation, c.PermissionType = "User:nobody", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
			r.Creations = append(r.Creations, c)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "DeleteAcls", acl: clusterACL(kadm.OpAlter), req: func() kmsg.Request {
			r := kmsg.NewPtrDeleteACLsRequest()
			f := kmsg.NewDeleteACLsRequestFilter()
			f.ResourceType, f.ResourceName, f.ResourcePatternType = kmsg.ACLResourceTypeTopic, str("x"), kmsg.ACLResourcePatternTypeLiteral
			f.Principal, f.Host, f.Operation, f.PermissionType = str("User:nobody"), str("*"), kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
			r.Filters = append(r.Filters, f)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "DescribeAcls", acl: clusterACL(kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeACLsRequest()
			r.ResourceType, r.ResourcePatternType, r.Operation, r.PermissionType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny, kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "DescribeUserScramCredentials", acl: clusterACL(kadm.OpDescribe), req: func() kmsg.Request {
			return kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "AlterUserScramCredentials", acl: clusterACL(kadm.OpAlter), req: func() kmsg.Request {
			r := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
			u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
			u.Name, u.Mechanism, u.Iterations = "scram-user", 1, 4096
			u.Salt, u.SaltedPassword = []byte("salt-salt-salt"), make([]byte, 32)
			r.Upsertions = append(r.Upsertions, u)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "DescribeLogDirs", acl: clusterACL(kadm.OpDescribe), req: func() kmsg.Request {
			return kmsg.NewPtrDescribeLogDirsRequest()
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "AlterPartitionReassignments", acl: clusterACL(kadm.OpAlter), req: func() kmsg.Request {
			r := kmsg.NewPtrAlterPartitionAssignmentsRequest()
			rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
			rt.Topic = "t"
			rt.Partitions = append(rt.Partitions, kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()) // cancel: none in progress
			r.Topics, r.TimeoutMillis = append(r.Topics, rt), 10000
			return r
		}, denied: everyEntry(kerr.ClusterAuthorizationFailed, "t")},
		{name: "ListPartitionReassignments", acl: clusterACL(kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrListPartitionReassignmentsRequest()
			r.TimeoutMillis = 10000
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "ElectLeaders", acl: clusterACL(kadm.OpAlter), req: func() kmsg.Request {
			r := kmsg.NewPtrElectLeadersRequest()
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic, rt.Partitions = "t", []int32{0}
			r.Topics, r.TimeoutMillis = append(r.Topics, rt), 10000
			return r
		}, denied: everyEntry(kerr.ClusterAuthorizationFailed, "t")},
		{name: "DescribeQuorum", acl: clusterACL(kadm.OpDescribe), req: func() kmsg.Request {
			r := kmsg.NewPtrDescribeQuorumRequest()
			rt := kmsg.NewDescribeQuorumRequestTopic()
			rt.Topic = "__cluster_metadata"
			rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
			r.Topics = append(r.Topics, rt)
			return r
		}, want: kerr.ClusterAuthorizationFailed},
		{name: "UpdateFeatures", acl: clusterACL(kadm.OpAlter), req: func() kmsg.Request {
			r := kmsg.NewPtrUpdateFeaturesRequest()
			r.ValidateOnly, r.TimeoutMillis = true, 10000
			return r
		}, want: kerr.ClusterAuthorizationFailed},
	}

	t.Run("every advertised API has a row", func(t *testing.T) {
		covered := map[int16]bool{
			// The SASL exchange: see the subtest below.
			kmsg.SASLHandshake.Int16(): true, kmsg.SASLAuthenticate.Int16(): true,
		}
		for _, row := range rows {
			covered[row.req().Key()] = true
		}
		resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		advertised := map[int16]bool{}
		for _, k := range resp.ApiKeys {
			advertised[k.ApiKey] = true
			if !covered[k.ApiKey] {
				t.Errorf("the broker advertises %s (key %d) but the ACL matrix has no row for it", kmsg.NameForKey(k.ApiKey), k.ApiKey)
			}
		}
		for k := range covered {
			if !advertised[k] {
				t.Errorf("the matrix has a row for %s (key %d), which the broker does not advertise", kmsg.NameForKey(k), k)
			}
		}
	})

	// A super user is authorized for every operation on the cluster.
	t.Run("authorized operations of a super user", func(t *testing.T) {
		resp, err := admin.Request(ctx, describeClusterOpsReq())
		if err != nil {
			t.Fatal(err)
		}
		var all int32
		for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationCreate, kmsg.ACLOperationClusterAction, kmsg.ACLOperationDescribeConfigs,
			kmsg.ACLOperationAlterConfigs, kmsg.ACLOperationIdempotentWrite, kmsg.ACLOperationAlter, kmsg.ACLOperationDescribe} {
			all |= 1 << op
		}
		if err := clusterOps(all)(resp); err != nil {
			t.Fatal(err)
		}
		resp, err = admin.Request(ctx, metadataOpsReq())
		if err != nil {
			t.Fatal(err)
		}
		allTopic := bits(kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationCreate, kmsg.ACLOperationDescribe,
			kmsg.ACLOperationDelete, kmsg.ACLOperationAlter, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs)
		if err := topicOps(0, allTopic)(resp); err != nil {
			t.Fatal(err)
		}
		resp, err = admin.Request(ctx, describeGroupsOpsReq())
		if err != nil {
			t.Fatal(err)
		}
		if err := groupOps(bits(kmsg.ACLOperationRead, kmsg.ACLOperationDescribe, kmsg.ACLOperationDelete,
			kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs))(resp); err != nil {
			t.Fatal(err)
		}
	})

	// SaslHandshake and SaslAuthenticate need no ACL: a principal with
	// none authenticates (the hook sees both answered) and is then
	// refused by its ACLs, not by the exchange.
	t.Run("SaslHandshake and SaslAuthenticate", func(t *testing.T) {
		var handshakes, authentications atomic.Int32
		hook := brokerReadHook(func(key int16, err error) {
			switch {
			case err != nil:
			case key == kmsg.SASLHandshake.Int16():
				handshakes.Add(1)
			case key == kmsg.SASLAuthenticate.Int16():
				authentications.Add(1)
			}
		})
		cl := saslClient(t, addr, "u0", "pw", kgo.WithHooks(hook))
		resp, err := metadataReq("t").(*kmsg.MetadataRequest).RequestWith(testContext(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if handshakes.Load() == 0 || authentications.Load() == 0 {
			t.Fatalf("answered %d handshakes, %d authentications", handshakes.Load(), authentications.Load())
		}
		if c := firstCode(resp); c != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("after authenticating: %v, want TOPIC_AUTHORIZATION_FAILED", kerr.ErrorForCode(c))
		}
	})

	for i, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			user := fmt.Sprintf("u%d", i+1)
			cl := saslClient(t, addr, user, "pw", row.opts...)
			send := func() (kmsg.Response, int16) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				req := row.req()
				var resp kmsg.Response
				var err error
				if row.routed {
					resp, err = cl.Request(ctx, req)
				} else {
					resp, err = cl.Broker(int(b.nodeID)).Request(ctx, req)
				}
				var ke *kerr.Error
				if errors.As(err, &ke) {
					return nil, ke.Code
				}
				if err != nil {
					t.Fatalf("request: %v", err)
				}
				return resp, firstCode(resp)
			}
			// answer says whether the answer is Kafka's without the ACL.
			answer := func() (bool, string) {
				resp, got := send()
				if row.denied != nil {
					if resp == nil {
						return false, fmt.Sprint(kerr.ErrorForCode(got))
					}
					err := row.denied(resp)
					return err == nil, fmt.Sprint(err)
				}
				return got == row.want.Code, fmt.Sprintf("%v, want %v", kerr.ErrorForCode(got), row.want)
			}
			allowed := func() (bool, string) {
				resp, got := send()
				if isAuthorizationError(got) {
					return false, fmt.Sprint(kerr.ErrorForCode(got))
				}
				if row.allowed != nil {
					if err := row.allowed(resp); err != nil {
						return false, err.Error()
					}
				}
				return true, ""
			}
			if row.acl == nil {
				if ok, status := allowed(); !ok {
					t.Fatalf("without any ACL: %s", status)
				}
				return
			}
			if row.base != nil {
				grant(t, adm, row.base(kadm.NewACLs().Allow("User:"+user)))
				poll.UntilStatus(t, 30*time.Second, "the first ACLs to apply", answer)
			} else if ok, status := answer(); !ok {
				t.Fatalf("without an ACL: %s", status)
			}
			grant(t, adm, row.acl(kadm.NewACLs().Allow("User:"+user)))
			poll.UntilStatus(t, 30*time.Second, "the ACL to allow the request", allowed)
		})
	}
}

// brokerReadHook is a kgo hook seeing each response read.
type brokerReadHook func(key int16, err error)

func (h brokerReadHook) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	h(key, err)
}

// openTransaction begins transaction id with a partition of topic, as
// the admin on addr, and leaves it ongoing.
func openTransaction(t *testing.T, addr, id, topic string) {
	t.Helper()
	ctx := testContext(t)
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(kmsg.AddPartitionsToTxn.Int16(), 3) // a client's request
	cl := saslClient(t, addr, "admin", "admin-pw", kgo.MaxVersions(vs))
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &id, 600000
	ir, err := init.RequestWith(ctx, cl)
	if err != nil || ir.ErrorCode != 0 {
		t.Fatalf("InitProducerId %s: %v %v", id, err, kerr.ErrorForCode(ir.ErrorCode))
	}
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, ir.ProducerID, ir.ProducerEpoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = topic, []int32{0}
	add.Topics = append(add.Topics, at)
	resp, err := cl.Request(ctx, add)
	if err != nil || firstCode(resp) != 0 {
		t.Fatalf("AddPartitionsToTxn %s: %v %v", id, err, kerr.ErrorForCode(firstCode(resp)))
	}
}
