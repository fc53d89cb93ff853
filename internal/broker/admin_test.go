package broker

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAdminAPIs drives the administrative APIs a Kafka operator uses —
// DeleteRecords, OffsetForLeaderEpoch, DescribeLogDirs, DescribeCluster,
// and broker configs — with kadm.
func TestAdminAPIs(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	ctx := testContext(t)
	createTopic(t, adm, "admin", 2, nil)
	cl := newClient(t, b.Addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "admin", Partition: 0, Value: make([]byte, 100)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// DeleteRecords moves the log start; past the high watermark is refused.
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "admin", Partition: 0, At: 4})
	del.Add(kadm.Offset{Topic: "admin", Partition: 1, At: 5})
	resps, err := adm.DeleteRecords(ctx, del)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := resps.Lookup("admin", 0); r.Err != nil || r.LowWatermark != 4 {
		t.Fatalf("DeleteRecords to 4: %+v", r)
	}
	if r, _ := resps.Lookup("admin", 1); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("DeleteRecords past the high watermark: %+v", r)
	}
	starts, err := adm.ListStartOffsets(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup("admin", 0); o.Offset != 4 {
		t.Fatalf("log start after DeleteRecords: %d", o.Offset)
	}
	// Reading below the new start is out of range.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 12
	fetch.SessionEpoch = -1
	fetch.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "admin"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes = 2, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	if code := rawRequest(t, b.Addr(), fetch).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch below the log start: error %d", code)
	}

	// OffsetForLeaderEpoch: the current epoch ends at the log end.
	var req kadm.OffsetForLeaderEpochRequest
	req.Add("admin", 0, 0)
	epochs, err := adm.OffsetForLeaderEpoch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e := epochs["admin"][0]
	if e.Err != nil || e.LeaderEpoch != 0 || e.EndOffset != 10 {
		t.Fatalf("OffsetForLeaderEpoch: %+v", e)
	}

	// DescribeLogDirs: one absolute directory holding the partitions.
	dirs, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	dirs.Each(func(d kadm.DescribedLogDir) {
		if !filepath.IsAbs(d.Dir) || d.TotalBytes <= 0 || d.UsableBytes <= 0 {
			t.Errorf("log dir %+v", d)
		}
		if p, ok := d.Topics.Lookup("admin", 0); ok && p.Size > 0 {
			found = true
		}
	})
	if !found {
		t.Fatal("DescribeLogDirs does not show admin-0 with its size")
	}

	// DescribeCluster: this node, as controller.
	brokers, err := adm.ListBrokers(ctx)
	if err != nil || len(brokers) != 1 || brokers[0].NodeID != b.NodeID() {
		t.Fatalf("brokers: %v %v", brokers, err)
	}

	// Broker configs: a dynamic cluster-wide default becomes the default
	// of every topic that does not override it.
	if _, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "log.retention.ms", Value: ptr("3600000")}}); err != nil {
		t.Fatal(err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rcs.On("admin", nil)
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" && (c.MaybeValue() != "3600000" || c.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig) {
			t.Fatalf("retention.ms after the broker default changed: %q from %v", c.MaybeValue(), c.Source)
		}
	}
	l, _ := b.logs.Log("admin", 0)
	if got := l.Config().RetentionMs; got != 3600000 {
		t.Fatalf("the log's retention is %d after the broker default changed", got)
	}
	// Keys that cannot change at run time are refused.
	resp, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "listeners", Value: ptr("PLAINTEXT://0.0.0.0:1")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp[0].Err == nil {
		t.Fatal("changing listeners at run time was accepted")
	}
	// Described from the static configuration, with its source.
	bcs, err := adm.DescribeBrokerConfigs(ctx, b.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	bc, _ := bcs.On(itoa(b.NodeID()), nil)
	var listeners *kadm.Config
	for i, c := range bc.Configs {
		if c.Key == "listeners" {
			listeners = &bc.Configs[i]
		}
	}
	if listeners == nil || listeners.Source != kmsg.ConfigSourceStaticBrokerConfig {
		t.Fatalf("listeners described as %+v", listeners)
	}
}
