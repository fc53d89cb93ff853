package broker

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// cleanerSettings run the log cleaner every 50ms.
func cleanerSettings() map[string]string {
	return map[string]string{"log.cleaner.backoff.ms": "50"}
}

// batchBytes counts the bytes of the record batches a franz-go client
// produced, headers included.
type batchBytes struct{ atomic.Int64 }

func (b *batchBytes) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	b.Add(int64(record.HeaderSize + m.CompressedBytes))
}

// TestCompactedTopicKeepsTheLatestValuePerKey produces many updates of
// each key with franz-go (idempotent, lz4) to a compacted topic with small
// segments, waits for the broker's cleaner, and consumes from the start:
// every key comes once, with its latest value. A record without a key is
// refused with INVALID_RECORD.
func TestCompactedTopicKeepsTheLatestValuePerKey(t *testing.T) {
	b := startBroker(t, cleanerSettings())
	adm := newAdmin(t, b.Addr())
	const topic = "compacted"
	createTopic(t, adm, topic, 1, map[string]*string{"cleanup.policy": ptr("compact"), "segment.bytes": ptr("4096")})
	ctx := testContext(t)
	// What was written is counted as it is produced: the log's size at
	// the end may already be cleaned, the cleaner running all along.
	var written batchBytes
	cl := newClient(t, b.Addr(), kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchMaxBytes(2048), kgo.WithHooks(&written))

	const keys, rounds = 40, 25
	latest := map[string]string{}
	for r := range rounds {
		for k := range keys {
			key, value := fmt.Sprintf("key-%02d", k), fmt.Sprintf("round %d of key %d", r, k)
			latest[key] = value
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("producing: %v", err)
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	l, _ := b.logs.Log(topic, 0)
	lastUpdate := l.LogEndOffset() - 1
	// Seal the last round in a segment of its own: only sealed segments
	// are cleaned.
	for l.SegmentBaseOffsets()[l.NumSegments()-1] <= lastUpdate {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("end"), Value: make([]byte, 100)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 30*time.Second, "the cleaner to clean past the last update", func() bool {
		return l.CleanerCheckpoint() > lastUpdate
	})
	if size := l.Size(); size > written.Load()/5 {
		t.Fatalf("log of %d bytes after cleaning, %d written", size, written.Load())
	}
	t.Logf("%d bytes in %d segments after cleaning, %d written", l.Size(), l.NumSegments(), written.Load())

	end := l.LogEndOffset()
	got := map[string][]string{}
	consumer := newClient(t, b.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	for done := false; !done; {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consuming: %v", ctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch error: %v", e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
			done = done || r.Offset == end-1
		})
	}
	for key, value := range latest {
		if v := got[key]; len(v) != 1 || v[0] != value {
			t.Errorf("key %s: consumed %q, want only %q", key, v, value)
		}
	}
	if len(got) != keys+1 {
		t.Errorf("consumed %d keys, want %d and end", len(got), keys)
	}

	// A record without a key cannot be compacted: Kafka refuses it.
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("no key")}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("producing without a key: %v, want INVALID_RECORD", err)
	}
}

// TestConsumerOffsetsAreCompacted commits offsets again and again for a
// few groups, waits for the cleaner to shrink __consumer_offsets, and
// restarts the broker: every group still has its latest offsets, from a
// log the coordinator now replays in a fraction of the records.
func TestConsumerOffsetsAreCompacted(t *testing.T) {
	settings := cleanerSettings()
	settings["offsets.topic.num.partitions"] = "1"
	settings["offsets.topic.segment.bytes"] = "4096"
	b := startBroker(t, settings)
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "data", 3, nil)
	ctx := testContext(t)

	const groups, commits = 4, 150
	want := map[string]kadm.Offsets{}
	for i := range commits {
		for g := range groups {
			group := fmt.Sprintf("group-%d", g)
			var o kadm.Offsets
			for p := int32(0); p < 3; p++ {
				o.Add(kadm.Offset{Topic: "data", Partition: p, At: int64(i*(g+1) + int(p)), LeaderEpoch: -1})
			}
			if resp, err := adm.CommitOffsets(ctx, group, o); err != nil || resp.Error() != nil {
				t.Fatalf("commit %d of %s: %v %v", i, group, err, resp.Error())
			}
			want[group] = o
		}
	}
	l, ok := b.logs.Log(OffsetsTopic, 0)
	if !ok {
		t.Fatal("no __consumer_offsets partition")
	}
	records := l.LogEndOffset()
	// Records, not bytes: the cleaner runs all along, so the log's size
	// after the commits may already be a cleaned one.
	kept := func(l *storage.Log) int {
		n := 0
		if err := l.ReadBatches(0, 0, func(h record.Header, _ []byte) bool {
			n += int(h.NumRecords)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	poll.Until(t, 30*time.Second, "__consumer_offsets to be cleaned", func() bool {
		return l.CleanerCheckpoint() > 0 && kept(l)*4 <= int(records)
	})

	check := func(when string) {
		t.Helper()
		for group, o := range want {
			fetched, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				t.Fatalf("%s: fetching %s's offsets: %v", when, group, err)
			}
			o.Each(func(w kadm.Offset) {
				if got, ok := fetched.Lookup(w.Topic, w.Partition); !ok || got.At != w.At {
					t.Errorf("%s: %s %s/%d at %d, want %d", when, group, w.Topic, w.Partition, got.At, w.At)
				}
			})
		}
	}
	check("after cleaning")
	b.restart(t)
	adm = newAdmin(t, b.Addr())
	check("after a restart")
	l, _ = b.logs.Log(OffsetsTopic, 0)
	if cfg := l.Config(); !cfg.Compact || cfg.SegmentBytes != 4096 {
		t.Fatalf("after a restart __consumer_offsets has compact=%v, segment.bytes %d", cfg.Compact, cfg.SegmentBytes)
	}
	n := kept(l)
	if n*4 > int(records) {
		t.Fatalf("after a restart, %d of %d records kept", n, records)
	}
	t.Logf("%d of %d records kept, in %d bytes", n, records, l.Size())
}

// TestKafkaGoReadsACompactedLog is kafka-go's TestReaderReadCompactedMessage:
// its writer (no idempotence, batches of 3) fills a compacted topic of
// 200-byte segments with a key written many times among keys written once,
// the cleaner empties whole batches, and kafka-go's reader, fetching at
// most 200 bytes (one segment) at a time, must read every key once. Its
// reader stops for good at a batch without records, which Kafka's cleaner
// never leaves for a producer without id: the boundary markers Strata keeps
// on disk must not reach it.
func TestKafkaGoReadsACompactedLog(t *testing.T) {
	b := startBroker(t, cleanerSettings())
	ctx := testContext(t)
	var msgs []kafkago.Message
	keys := map[string]bool{}
	add := func(key string) {
		msgs = append(msgs, kafkago.Message{Key: []byte(key), Value: []byte(key)})
		keys[key] = true
	}
	n := 0
	for dups := range 5 {
		for range 30 {
			add(fmt.Sprintf("%04d", n))
			n++
			for range dups {
				add("dup_")
			}
		}
	}
	const ends = 10
	for i := range ends {
		add(fmt.Sprintf("e-%02d", i))
	}

	// fill writes msgs to a new topic, waits for the cleaner to clean past
	// the last duplicate, and counts the segments that hold nothing but a
	// batch emptied by the cleaner: the case kafka-go trips on. How many
	// there are depends on where the cleaner's passes fall among the
	// writes, and now and then none is left; then the test fills another
	// topic rather than passing without the case.
	fill := func(topic string) int {
		// A low dirty ratio, so that the cleaner goes on cleaning the last
		// few segments written, however much it cleaned before.
		createTopic(t, newAdmin(t, b.Addr()), topic, 1, map[string]*string{"cleanup.policy": ptr("compact"), "segment.bytes": ptr("200"),
			"min.cleanable.dirty.ratio": ptr("0.01")})
		// NewWriter(WriterConfig{}), as the suite writes, waits for acks=all.
		// A transport of its own: kafka-go's default one is shared by the
		// process and caches metadata by address for 6 s, and an earlier
		// test's broker may have had this port.
		w := &kafkago.Writer{Addr: kafkago.TCP(b.Addr()), Topic: topic, BatchSize: 3, Balancer: &kafkago.LeastBytes{},
			Transport:    &kafkago.Transport{},
			RequiredAcks: kafkago.RequireAll}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		w.Close()

		l, _ := b.logs.Log(topic, 0)
		lastDup := l.LogEndOffset() - ends - 1
		poll.Until(t, 30*time.Second, "the cleaner to clean past the last duplicate", func() bool {
			return l.CleanerCheckpoint() > lastDup
		})
		bases := map[int64]bool{}
		for _, base := range l.SegmentBaseOffsets() {
			bases[base] = true
		}
		empty := 0
		if err := l.ScanBatchHeaders(0, func(h record.Header, _ int64) bool {
			if h.NumRecords == 0 && bases[h.BaseOffset] && bases[h.NextOffset()] {
				empty++
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return empty
	}
	var topic string
	emptySegments := 0
	for try := 0; emptySegments == 0; try++ {
		if try == 5 {
			t.Fatal("in 5 topics no segment was emptied by the cleaner; the test needs one")
		}
		topic = fmt.Sprintf("kafkago-compacted-%d", try)
		emptySegments = fill(topic)
	}

	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{b.Addr()}, Topic: topic, MinBytes: 1, MaxBytes: 200,
		MaxWait: 100 * time.Millisecond})
	defer r.Close()
	read := map[string]int{}
	for len(read) < len(keys) {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("read %d of %d keys, stopped at offset %d: %v", len(read), len(keys), r.Offset(), err)
		}
		read[string(m.Key)]++
	}
	for key, times := range read {
		if times != 1 || !keys[key] {
			t.Errorf("key %q read %d times", key, times)
		}
	}
	t.Logf("%d keys read; %d segments held only an emptied batch", len(read), emptySegments)
}
