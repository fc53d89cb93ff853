package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestFetchFromEarliestLatestAndTimestamp(t *testing.T) {
	for _, zeroCopy := range []string{"true", "false"} {
		t.Run("zero.copy="+zeroCopy, func(t *testing.T) {
			b := startBroker(t, map[string]string{"strata.fetch.zero.copy": zeroCopy, "log.segment.bytes": "4096"})
			adm := newAdmin(t, b.Addr())
			createTopic(t, adm, "ts", 1, nil)
			ctx := testContext(t)
			cl := newClient(t, b.Addr(), kgo.ProducerLinger(0))
			base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
			for i := 0; i < 200; i++ {
				r := &kgo.Record{Topic: "ts", Value: []byte(fmt.Sprintf("v%03d", i)), Timestamp: base.Add(time.Duration(i) * time.Second)}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			read := func(offset kgo.Offset, n int) []*kgo.Record {
				c := newClient(t, b.Addr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"ts": {0: offset}}), kgo.FetchMaxWait(100*time.Millisecond))
				var out []*kgo.Record
				for len(out) < n {
					fs := c.PollFetches(ctx)
					if err := fs.Err(); err != nil {
						t.Fatal(err)
					}
					out = append(out, fs.Records()...)
				}
				return out
			}
			recs := read(kgo.NewOffset().AtStart(), 200)
			for i, r := range recs[:200] {
				if r.Offset != int64(i) || string(r.Value) != fmt.Sprintf("v%03d", i) {
					t.Fatalf("record %d: offset %d value %q", i, r.Offset, r.Value)
				}
			}
			if got := read(kgo.NewOffset().At(137), 1)[0]; got.Offset != 137 {
				t.Fatalf("at 137: got offset %d", got.Offset)
			}
			if got := read(kgo.NewOffset().AfterMilli(base.Add(150*time.Second).UnixMilli()), 1)[0]; got.Offset != 150 {
				t.Fatalf("by timestamp: got offset %d", got.Offset)
			}
			// From the end: only what is produced afterwards.
			c := newClient(t, b.Addr(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"ts": {0: kgo.NewOffset().AtEnd()}}), kgo.FetchMaxWait(100*time.Millisecond))
			c.PollFetches(ctxWithTimeout(t, 300*time.Millisecond))
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "ts", Value: []byte("late")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			fs := c.PollFetches(ctx)
			if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "late" || recs[0].Offset != 200 {
				t.Fatalf("from end: %v", recs)
			}

			offs, err := adm.ListOffsetsAfterMilli(ctx, base.Add(10*time.Hour).UnixMilli(), "ts")
			if err != nil {
				t.Fatal(err)
			}
			if o, _ := offs.Lookup("ts", 0); o.Offset != 201 && o.Offset != -1 {
				t.Fatalf("timestamp past the end: %d", o.Offset)
			}
			maxTS, err := adm.ListMaxTimestampOffsets(ctx, "ts")
			if err != nil {
				t.Fatal(err)
			}
			if o, _ := maxTS.Lookup("ts", 0); o.Offset != 200 {
				t.Fatalf("max timestamp offset %d", o.Offset)
			}
		})
	}
}

func ctxWithTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(testContext(t), d)
	t.Cleanup(cancel)
	return ctx
}

// TestLongPollWakesOnAppend sends a fetch that may wait 60 seconds for one
// byte and checks that a produce answers it: the test's own deadline is
// shorter than the fetch's wait, so only a wake-up can pass it.
func TestLongPollWakesOnAppend(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "poll", 1, nil)
	ctx := testContext(t)

	fetched := make(chan *kmsg.FetchResponse, 1)
	go func() {
		req := kmsg.NewPtrFetchRequest()
		req.Version = 11
		req.MaxWaitMillis = 60_000
		req.MinBytes = 1
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "poll"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		fetched <- rawRequest(t, b.Addr(), req).(*kmsg.FetchResponse)
	}()
	// The fetch is parked once the broker has nothing for it; poll until a
	// metadata round trip on another connection has gone through, then
	// produce.
	producer := newClient(t, b.Addr())
	if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "poll", Value: []byte("wake")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-fetched:
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.HighWatermark != 1 || len(p.RecordBatches) == 0 {
			t.Fatalf("woken fetch: %+v", p)
		}
	case <-ctx.Done():
		t.Fatal("the fetch was not woken by the append")
	}
}

func TestFetchOffsetOutOfRange(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "range", 1, nil)
	cl := newClient(t, b.Addr())
	ctx := testContext(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "range", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.MaxBytes = 1 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "range"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset = 5
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(t, b.Addr(), req).(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("fetch at 5 of 1: %v", err)
	}
}

// TestFetchMaxBytes checks per-partition and per-response limits, with
// KIP-74's rule that the first partition returns at least one batch.
func TestFetchMaxBytes(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "big", 2, nil)
	cl := newClient(t, b.Addr(), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := testContext(t)
	value := make([]byte, 10_000)
	for i := 0; i < 10; i++ {
		for p := int32(0); p < 2; p++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "big", Partition: p, Value: value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	fetch := func(maxBytes, partitionMaxBytes int32) []int {
		req := kmsg.NewPtrFetchRequest()
		req.Version = 11
		req.MaxBytes = maxBytes
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "big"
		for p := int32(0); p < 2; p++ {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition = p
			rp.PartitionMaxBytes = partitionMaxBytes
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp := rawRequest(t, b.Addr(), req).(*kmsg.FetchResponse)
		var sizes []int
		for _, p := range resp.Topics[0].Partitions {
			sizes = append(sizes, len(p.RecordBatches))
		}
		return sizes
	}
	if s := fetch(1<<20, 25_000); s[0] > 25_000 || s[0] < 10_000 || s[1] > 25_000 || s[1] < 10_000 {
		t.Errorf("partition limit 25000: %v", s)
	}
	if s := fetch(1<<20, 100); s[0] == 0 || s[1] != 0 {
		t.Errorf("partition limit 100: the first partition must return one batch, the second none: %v", s)
	}
	if s := fetch(15_000, 1<<20); s[0] == 0 || s[0] > 15_000 || s[1] != 0 {
		t.Errorf("response limit 15000: %v", s)
	}
}

// TestCloseAnswersLongPolls checks that shutting down does not wait for
// fetches parked for a minute.
func TestCloseAnswersLongPolls(t *testing.T) {
	// A shutdown that waited for the fetch would take the full minute.
	b := startBroker(t, map[string]string{"shutdown.timeout.ms": "60000"})
	createTopic(t, newAdmin(t, b.Addr()), "idle", 1, nil)
	consumer := newClient(t, b.Addr(), kgo.ConsumeTopics("idle"), kgo.FetchMaxWait(time.Minute))
	ctx := testContext(t)
	go consumer.PollFetches(ctx)
	// Wait until the fetch is parked: the partition has a watcher.
	p, _ := b.partition("idle", 0)
	for !p.Watched() {
		if ctx.Err() != nil {
			t.Fatal("the fetch never parked")
		}
		time.Sleep(time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for a parked fetch")
	}
}
