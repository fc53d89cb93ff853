package broker

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestTopicLifecycle(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	ctx := testContext(t)

	retention := "3600000"
	createTopic(t, adm, "orders-created", 6, map[string]*string{"retention.ms": &retention})
	createTopic(t, adm, "metrics.cpu", 1, nil)

	// Creating it again, or with bad arguments, fails with Kafka's codes.
	for name, tc := range map[string]struct {
		topic      string
		partitions int32
		rf         int16
		configs    map[string]*string
		want       error
	}{
		"exists":          {"orders-created", 1, 1, nil, kerr.TopicAlreadyExists},
		"zero partitions": {"t0", 0, 1, nil, kerr.InvalidPartitions},
		"rf too large":    {"t1", 1, 3, nil, kerr.InvalidReplicationFactor},
		"bad name":        {"no/slashes", 1, 1, nil, kerr.InvalidTopicException},
		"bad config":      {"t2", 1, 1, map[string]*string{"retention.ms": ptr("soon")}, kerr.InvalidConfig},
		"unknown config":  {"t3", 1, 1, map[string]*string{"no.such.key": ptr("1")}, kerr.InvalidConfig},
		"dot collision":   {"metrics_cpu", 1, 1, nil, kerr.InvalidTopicException},
	} {
		_, err := adm.CreateTopic(ctx, tc.partitions, tc.rf, tc.configs, tc.topic)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", name, err, tc.want)
		}
	}

	// Validate-only creates nothing.
	vresp, err := adm.ValidateCreateTopics(ctx, 2, 1, nil, "validated")
	if err != nil || vresp.Error() != nil {
		t.Fatalf("validate: %v %v", err, vresp.Error())
	}

	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !topics.Has("orders-created") || topics.Has("validated") || len(topics["orders-created"].Partitions) != 6 {
		t.Fatalf("topics after create: %v", topics.Names())
	}
	for _, p := range topics["orders-created"].Partitions {
		if p.Leader != b.NodeID() || len(p.ISR) != 1 {
			t.Errorf("partition %d: leader %d isr %v", p.Partition, p.Leader, p.ISR)
		}
	}

	// Configs show the override and its source.
	rcs, err := adm.DescribeTopicConfigs(ctx, "orders-created")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On("orders-created", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			found = true
			if c.MaybeValue() != "3600000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("retention.ms = %q from %v", c.MaybeValue(), c.Source)
			}
		}
	}
	if !found {
		t.Error("retention.ms not described")
	}

	// Partitions only grow.
	if _, err := adm.CreatePartitions(ctx, 2, "orders-created"); err != nil {
		t.Fatal(err)
	}
	cresp, err := adm.UpdatePartitions(ctx, 3, "orders-created")
	if err != nil {
		t.Fatal(err)
	}
	if cr, _ := cresp.On("orders-created", nil); !errors.Is(cr.Err, kerr.InvalidPartitions) {
		t.Errorf("shrinking: %v", cr.Err)
	}

	// Records go to the new partitions too.
	cl := newClient(t, b.Addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < 8; p++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders-created", Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
	}

	// A restart keeps topics, partitions and configs: the metadata log is
	// replayed.
	b.restart(t)
	adm = newAdmin(t, b.Addr())
	topics, err = adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(topics["orders-created"].Partitions) != 8 {
		t.Fatalf("after restart: %v", topics)
	}

	dresp, err := adm.DeleteTopics(ctx, "orders-created", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := dresp.On("orders-created", nil); r.Err != nil {
		t.Errorf("delete: %v", r.Err)
	}
	if r, _ := dresp.On("missing", nil); !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("delete missing: %v", r.Err)
	}
	// A new client: kadm answers from cached metadata.
	topics, _ = newAdmin(t, b.Addr()).ListTopics(ctx)
	if topics.Has("orders-created") {
		t.Fatal("topic still listed after delete")
	}
	// The name can be reused, and the new topic starts empty.
	createTopic(t, adm, "orders-created", 1, nil)
	ends, err := adm.ListEndOffsets(ctx, "orders-created")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("orders-created", 0); o.Offset != 0 {
		t.Fatalf("recreated topic ends at %d", o.Offset)
	}
}

// TestAutoCreateTopics: a Metadata request that allows auto-creation
// creates an unknown topic, and Kafka's first answer for it is
// UNKNOWN_TOPIC_OR_PARTITION with no partitions; the next one has them.
// A producer that allows auto-creation writes to a topic that did not
// exist.
func TestAutoCreateTopics(t *testing.T) {
	b := startBroker(t, map[string]string{"num.partitions": "3"})
	metadata := func(topic string) kmsg.MetadataResponseTopic {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 12
		req.AllowAutoTopicCreation = true
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp := rawRequest(t, b.Addr(), req).(*kmsg.MetadataResponse)
		if len(resp.Topics) != 1 {
			t.Fatalf("metadata of %s: %d topics", topic, len(resp.Topics))
		}
		return resp.Topics[0]
	}
	first := metadata("asked")
	if first.ErrorCode != kerr.UnknownTopicOrPartition.Code || len(first.Partitions) != 0 || first.TopicID != [16]byte{} {
		t.Fatalf("first answer for an auto-created topic: error %d, %d partitions, id %x", first.ErrorCode, len(first.Partitions), first.TopicID)
	}
	if again := metadata("asked"); again.ErrorCode != 0 || len(again.Partitions) != 3 {
		t.Fatalf("second answer: error %d, %d partitions", again.ErrorCode, len(again.Partitions))
	}

	cl := newClient(t, b.Addr(), kgo.AllowAutoTopicCreation())
	ctx := testContext(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	topics, err := kadm.NewClient(cl).ListTopics(ctx, "auto")
	if err != nil {
		t.Fatal(err)
	}
	if len(topics["auto"].Partitions) != 3 {
		t.Fatalf("auto-created topic: %+v", topics["auto"])
	}

	off := startBroker(t, map[string]string{"auto.create.topics.enable": "false"})
	md, err := kadm.NewClient(newClient(t, off.Addr())).Metadata(ctx, "nope")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(md.Topics["nope"].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("with auto-create off: %v", md.Topics["nope"].Err)
	}
}

func TestUnknownTopicsAndPartitions(t *testing.T) {
	b := startBroker(t, map[string]string{"auto.create.topics.enable": "false"})
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "known", 2, nil)
	ctx := testContext(t)
	cl := newClient(t, b.Addr())

	produce := func(topic string, partition int32) int16 {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = partition
		rp.Records = buildBatch(1, "v")
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	if code := produce("missing", 0); code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("unknown topic: %d", code)
	}
	if code := produce("known", 7); code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("unknown partition: %d", code)
	}
	if code := produce("known", 1); code != 0 {
		t.Errorf("known partition: %d", code)
	}

	offs, err := adm.ListEndOffsets(ctx, "missing")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := offs.Lookup("missing", 0); ok {
		t.Error("ListEndOffsets returned an offset for a missing topic")
	}
}

func ptr[T any](v T) *T { return &v }

// TestCreateTopicsDuplicateName sends a CreateTopics request naming one
// topic three times among others: as Kafka's ControllerApis.createTopics
// answers, the repeated name gets a single INVALID_REQUEST result and is
// not created, and the other topics are created as usual.
func TestCreateTopicsDuplicateName(t *testing.T) {
	b := startBroker(t, nil)
	cl := newClient(t, b.Addr())
	r := kmsg.NewPtrCreateTopicsRequest()
	r.TimeoutMillis = 10000
	for _, name := range []string{"dup", "single", "dup", "dup"} {
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = name, 1, 1
		r.Topics = append(r.Topics, ct)
	}
	resp, err := r.RequestWith(testContext(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	results := map[string][]int16{}
	for _, rt := range resp.Topics {
		results[rt.Topic] = append(results[rt.Topic], rt.ErrorCode)
	}
	if len(resp.Topics) != 2 || len(results["dup"]) != 1 || results["dup"][0] != kerr.InvalidRequest.Code ||
		len(results["single"]) != 1 || results["single"][0] != 0 {
		t.Fatalf("results %v, want dup once INVALID_REQUEST and single created", results)
	}
	topics, err := kadm.NewClient(cl).ListTopics(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("dup") || !topics.Has("single") {
		t.Fatalf("topics after the request: %v", topics.Names())
	}
}
