package broker

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestSaramaIncrementalAlterBrokerConfig is sarama's own functional test
// TestFuncAdminIncrementalAlterConfigs (with DescribeConfigs for the
// deprecated DescribeConfig), which a Kafka broker passes: read
// log.cleaner.backoff.ms of broker "1", set it one higher with
// IncrementalAlterConfigs, and read it back as a dynamic broker value, in
// effect in the running cleaner.
func TestSaramaIncrementalAlterBrokerConfig(t *testing.T) {
	b := startBroker(t, nil)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const name = "log.cleaner.backoff.ms"
	get := func() sarama.ConfigEntry {
		t.Helper()
		results, err := admin.DescribeConfigs([]*sarama.ConfigResource{{Type: sarama.BrokerResource, Name: "1", ConfigNames: []string{name}}},
			sarama.DescribeConfigsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(results) != 1 || results[0].ErrorCode != sarama.ErrNoError {
			t.Fatalf("described %+v", results)
		}
		res := results[0].Configs
		if len(res) != 1 || res[0].Name != name {
			t.Fatalf("described %+v, want %s alone", res, name)
		}
		return res[0]
	}
	before := get()
	n, err := strconv.Atoi(before.Value)
	if err != nil || before.Source != sarama.SourceDefault || before.ReadOnly {
		t.Fatalf("before: %+v", before)
	}
	value := strconv.Itoa(n + 1)
	err = admin.IncrementalAlterConfig(sarama.BrokerResource, "1", map[string]sarama.IncrementalAlterConfigsEntry{
		name: {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &value},
	}, false)
	if err != nil {
		t.Fatalf("failed to alter config: %v", err)
	}
	if after := get(); after.Value != value || after.Source != sarama.SourceDynamicBroker {
		t.Fatalf("after: %+v, want %s from DYNAMIC_BROKER_CONFIG", after, value)
	}
	if got := b.Broker.settings.Load().cleaner.Backoff; got != time.Duration(n+1)*time.Millisecond {
		t.Fatalf("the cleaner runs with a backoff of %v", got)
	}
}

// describeBrokerKey returns one key of a broker resource ("" is the
// cluster-wide default) as kadm describes it, with its synonyms.
func describeBrokerKey(t *testing.T, addr, broker, key string) (kadm.Config, bool) {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Version = 4
	req.IncludeSynonyms = true
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeBroker, broker, []string{key}
	req.Resources = append(req.Resources, res)
	r := rawRequest(t, addr, req).(*kmsg.DescribeConfigsResponse).Resources[0]
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		t.Fatalf("describing broker %q: %v", broker, err)
	}
	for _, c := range r.Configs {
		if c.Name == key {
			out := kadm.Config{Key: c.Name, Value: c.Value, Source: c.Source}
			for _, s := range c.ConfigSynonyms {
				out.Synonyms = append(out.Synonyms, kadm.ConfigSynonym{Key: s.Name, Value: s.Value, Source: s.Source})
			}
			return out, true
		}
	}
	return kadm.Config{}, false
}

func alterBroker(t *testing.T, adm *kadm.Client, op kadm.IncrementalOp, key, value string, brokers ...int32) error {
	t.Helper()
	c := kadm.AlterConfig{Op: op, Name: key}
	if op == kadm.SetConfig {
		c.Value = &value
	}
	resps, err := adm.AlterBrokerConfigs(testContext(t), []kadm.AlterConfig{c}, brokers...)
	if err != nil {
		t.Fatal(err)
	}
	return resps[0].Err
}

// TestDynamicBrokerConfig changes broker keys per broker and cluster-wide
// with kadm and checks what DescribeConfigs reports (value, source,
// synonyms in Kafka's precedence), what the broker runs with, that it
// survives a restart (the values are metadata-log records), and what is
// refused as Kafka refuses it.
func TestDynamicBrokerConfig(t *testing.T) {
	b := startBroker(t, map[string]string{"log.cleaner.backoff.ms": "60000"})
	adm := newAdmin(t, b.Addr())
	const key = "log.cleaner.backoff.ms"
	self := b.NodeID()
	check := func(broker, value string, source kmsg.ConfigSource, backoffMs int64, synonyms ...kmsg.ConfigSource) {
		t.Helper()
		c, ok := describeBrokerKey(t, b.Addr(), broker, key)
		if !ok || c.MaybeValue() != value || c.Source != source {
			t.Fatalf("broker %q %s = %q from %v, want %q from %v", broker, key, c.MaybeValue(), c.Source, value, source)
		}
		var got []kmsg.ConfigSource
		for _, s := range c.Synonyms {
			got = append(got, s.Source)
		}
		if fmt.Sprint(got) != fmt.Sprint(synonyms) {
			t.Fatalf("broker %q %s synonyms %v, want %v", broker, key, got, synonyms)
		}
		if got := b.Broker.settings.Load().cleaner.Backoff.Milliseconds(); got != backoffMs {
			t.Fatalf("the cleaner runs with a backoff of %d ms, want %d", got, backoffMs)
		}
	}
	node := itoa(self)
	check(node, "60000", kmsg.ConfigSourceStaticBrokerConfig, 60000, kmsg.ConfigSourceStaticBrokerConfig)
	if _, ok := describeBrokerKey(t, b.Addr(), "", key); ok {
		t.Fatal("the cluster-wide resource lists a key nobody set")
	}

	// Cluster-wide, then for this broker, which wins.
	if err := alterBroker(t, adm, kadm.SetConfig, key, "30000"); err != nil {
		t.Fatal(err)
	}
	check(node, "30000", kmsg.ConfigSourceDynamicDefaultBrokerConfig, 30000,
		kmsg.ConfigSourceDynamicDefaultBrokerConfig, kmsg.ConfigSourceStaticBrokerConfig)
	check("", "30000", kmsg.ConfigSourceDynamicDefaultBrokerConfig, 30000, kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	if err := alterBroker(t, adm, kadm.SetConfig, key, "20000", self); err != nil {
		t.Fatal(err)
	}
	check(node, "20000", kmsg.ConfigSourceDynamicBrokerConfig, 20000,
		kmsg.ConfigSourceDynamicBrokerConfig, kmsg.ConfigSourceDynamicDefaultBrokerConfig, kmsg.ConfigSourceStaticBrokerConfig)

	// A per-broker topic default (not only the cluster-wide one) reaches
	// the logs at once.
	createTopic(t, adm, "dyn", 1, nil)
	if err := alterBroker(t, adm, kadm.SetConfig, "log.retention.ms", "3600000", self); err != nil {
		t.Fatal(err)
	}
	l, _ := b.logs.Log("dyn", 0)
	if got := l.Config().RetentionMs; got != 3600000 {
		t.Fatalf("retention of the log after the broker's log.retention.ms changed: %d", got)
	}

	// The values are in the metadata log: a restart keeps them.
	b.restart(t)
	adm = newAdmin(t, b.Addr())
	check(node, "20000", kmsg.ConfigSourceDynamicBrokerConfig, 20000,
		kmsg.ConfigSourceDynamicBrokerConfig, kmsg.ConfigSourceDynamicDefaultBrokerConfig, kmsg.ConfigSourceStaticBrokerConfig)
	l, _ = b.logs.Log("dyn", 0)
	if got := l.Config().RetentionMs; got != 3600000 {
		t.Fatalf("retention after a restart: %d", got)
	}

	// Deleting falls back a level at a time.
	if err := alterBroker(t, adm, kadm.DeleteConfig, key, "", self); err != nil {
		t.Fatal(err)
	}
	check(node, "30000", kmsg.ConfigSourceDynamicDefaultBrokerConfig, 30000,
		kmsg.ConfigSourceDynamicDefaultBrokerConfig, kmsg.ConfigSourceStaticBrokerConfig)
	if err := alterBroker(t, adm, kadm.DeleteConfig, key, ""); err != nil {
		t.Fatal(err)
	}
	check(node, "60000", kmsg.ConfigSourceStaticBrokerConfig, 60000, kmsg.ConfigSourceStaticBrokerConfig)

	// The other keys Kafka makes dynamic, in the running broker.
	for k, v := range map[string]string{"log.cleaner.threads": "2", "log.cleaner.dedupe.buffer.size": "1048576",
		"producer.id.expiration.ms": "60000", "num.recovery.threads.per.data.dir": "2"} {
		if err := alterBroker(t, adm, kadm.SetConfig, k, v); err != nil {
			t.Fatalf("%s=%s: %v", k, v, err)
		}
	}
	s := b.Broker.settings.Load()
	if s.cleaner.Threads != 2 || s.cleaner.DedupeBufferSize != 1<<20 || s.producerIDExpirationMs != 60000 ||
		s.cleaner.ProducerIDExpirationMs != 60000 || s.recoveryThreads != 2 {
		t.Fatalf("settings after the changes: %+v", s)
	}

	// Refused as Kafka refuses them.
	for _, c := range []struct {
		key, value string
		brokers    []int32
		want       error
	}{
		{"num.partitions", "3", nil, kerr.InvalidConfig},                               // read only in Kafka
		{"log.cleaner.enable", "false", []int32{self}, kerr.InvalidConfig},             // read only in Kafka
		{"log.cleaner.threads", "5", nil, kerr.InvalidConfig},                          // more than double 2
		{"listeners", b.cfg.String("listeners"), nil, kerr.InvalidConfig},              // per broker only
		{"listeners", "PLAINTEXT://127.0.0.1:1", []int32{self}, kerr.InvalidConfig},    // cannot change with a Raft quorum
		{"advertised.listeners", "PLAINTEXT://h:1", []int32{self}, kerr.InvalidConfig}, // nor these
		{"log.cleaner.backoff.ms", "0", []int32{self}, kerr.InvalidConfig},             // out of range
		{"no.such.key", "1", []int32{self}, kerr.InvalidConfig},                        // unknown
	} {
		if err := alterBroker(t, adm, kadm.SetConfig, c.key, c.value, c.brokers...); !errors.Is(err, c.want) {
			t.Errorf("%s=%s for %v: %v, want %v", c.key, c.value, c.brokers, err, c.want)
		}
	}
	// Setting a listener to what it is is accepted, as in Kafka.
	if err := alterBroker(t, adm, kadm.SetConfig, "listeners", b.cfg.String("listeners"), self); err != nil {
		t.Fatalf("listeners to its current value: %v", err)
	}
	for k, readOnly := range map[string]bool{"num.partitions": true, "log.cleaner.enable": true, "log.cleaner.threads": false} {
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.Version = 4
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeBroker, node, []string{k}
		req.Resources = append(req.Resources, res)
		cs := rawRequest(t, b.Addr(), req).(*kmsg.DescribeConfigsResponse).Resources[0].Configs
		if len(cs) != 1 || cs[0].ReadOnly != readOnly {
			t.Errorf("%s described %+v, want read only %v", k, cs, readOnly)
		}
	}
}

// TestDynamicCleanerBackoffTakesEffect starts a broker whose cleaner looks
// for work once an hour, fills a compacted topic, and sets the broker's
// log.cleaner.backoff.ms to 50 ms: the log is cleaned within seconds,
// without a restart.
func TestDynamicCleanerBackoffTakesEffect(t *testing.T) {
	b := startBroker(t, map[string]string{"log.cleaner.backoff.ms": "3600000"})
	adm := newAdmin(t, b.Addr())
	const topic = "compacted"
	createTopic(t, adm, topic, 1, map[string]*string{"cleanup.policy": ptr("compact"), "segment.bytes": ptr("4096")})
	ctx := testContext(t)
	cl := newClient(t, b.Addr(), kgo.ProducerLinger(0))
	for i := range 400 {
		r := &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("key-%d", i%10)), Value: make([]byte, 100)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := b.logs.Log(topic, 0)
	if l.NumSegments() < 5 || l.CleanerCheckpoint() != 0 {
		t.Fatalf("%d segments, cleaned up to %d: want a dirty log", l.NumSegments(), l.CleanerCheckpoint())
	}
	if err := alterBroker(t, adm, kadm.SetConfig, "log.cleaner.backoff.ms", "50", b.NodeID()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the cleaner to run with the new backoff", func() bool { return l.CleanerCheckpoint() > 0 })
}
