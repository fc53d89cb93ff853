package broker

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

// idempotentBatch builds an uncompressed batch of n records from producer
// id at epoch 0 starting at sequence seq, timestamped ts.
func idempotentBatch(n int, id int64, seq int32, ts int64) []byte {
	recs := make([]record.Rec, n)
	for i := range recs {
		recs[i] = record.Rec{Value: []byte("v"), Timestamp: ts}
	}
	b := record.Build(nil, recs)
	binary.BigEndian.PutUint64(b[43:], uint64(id))  // producerId
	binary.BigEndian.PutUint16(b[51:], 0)           // producerEpoch
	binary.BigEndian.PutUint32(b[53:], uint32(seq)) // baseSequence
	binary.BigEndian.PutUint32(b[17:], record.Checksum(b))
	return b
}

// produceRaw sends one batch to partition 0 of topic with acks=all
// (Produce v8) and returns the partition's response.
func produceRaw(t *testing.T, addr, topic string, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 8, -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return rawRequest(t, addr, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// TestIdempotentRetryAnsweredAsOriginal retries batches of an idempotent
// producer, the latest and an older one of the five a partition remembers,
// on a LogAppendTime topic, before and after a restart: each retry is
// answered as its original append was, with its base offset and its
// log-append time, and appends nothing.
func TestIdempotentRetryAnsweredAsOriginal(t *testing.T) {
	b := startBroker(t, nil)
	logAppendTime := "LogAppendTime"
	createTopic(t, newAdmin(t, b.Addr()), "appendtime", 1, map[string]*string{"message.timestamp.type": &logAppendTime})
	init := rawRequest(t, b.Addr(), kmsg.NewPtrInitProducerIDRequest()).(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 {
		t.Fatalf("InitProducerId: error %d", init.ErrorCode)
	}
	// Client timestamps far in the past, so that no log-append time can
	// be mistaken for them.
	const createTime = 1_000_000
	var batches [][]byte
	var firsts []kmsg.ProduceResponseTopicPartition
	for i := range 4 {
		batch := idempotentBatch(3, init.ProducerID, int32(3*i), createTime)
		batches = append(batches, batch)
		resp := produceRaw(t, b.Addr(), "appendtime", batch)
		if resp.ErrorCode != 0 || resp.BaseOffset != int64(3*i) || resp.LogAppendTime <= createTime {
			t.Fatalf("batch %d answered %+v", i, resp)
		}
		firsts = append(firsts, resp)
	}
	for _, restarted := range []bool{false, true} {
		if restarted {
			b.restart(t) // state from the shutdown snapshot
		}
		for _, i := range []int{3, 1} {
			retry := produceRaw(t, b.Addr(), "appendtime", batches[i])
			if retry.ErrorCode != 0 || retry.BaseOffset != firsts[i].BaseOffset || retry.LogAppendTime != firsts[i].LogAppendTime {
				t.Fatalf("restarted=%v: retry of batch %d answered offset %d, log-append time %d, error %d; the original %d, %d",
					restarted, i, retry.BaseOffset, retry.LogAppendTime, retry.ErrorCode, firsts[i].BaseOffset, firsts[i].LogAppendTime)
			}
		}
		l, _ := b.logs.Log("appendtime", 0)
		if end := l.LogEndOffset(); end != 12 {
			t.Fatalf("restarted=%v: log end offset %d after retries, want 12", restarted, end)
		}
	}
}

// BenchmarkProduceIdempotence measures franz-go producing 100-byte records
// to four partitions of one broker two ways, side by side: non-idempotent
// with acks=1, and idempotent with acks=all (franz-go's default producer).
// Issue 5's target is idempotent throughput at least 90% of acks=1.
//
// The two producers take turns, 100,000 records (about 25 full batches)
// at a time, in the order ABBA ABBA …, each turn timed on its own, so that
// whatever else runs on the machine, and whatever garbage one turn leaves
// to the next, weighs on both alike; b.N is the number of records each
// produces. It reports both throughputs
// and their ratio (idem/acks1-%). Both allow five produce requests in
// flight (the idempotent producer's pipeline; acks=1 would otherwise
// default to one) and send uncompressed batches, so the difference is the
// broker's (sequence checks, the acks=all wait) and the client's
// idempotence bookkeeping.
//
//	go test ./internal/broker -run XXX -bench ProduceIdempotence -count 5
func BenchmarkProduceIdempotence(b *testing.B) {
	const (
		partitions = 4
		turn       = 100_000
	)
	tb := startBroker(b, nil)
	createTopic(b, newAdmin(b, tb.Addr()), "bench", partitions, nil)
	values := make([][]byte, 256)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range values {
		values[i] = make([]byte, 100)
		for j := range values[i] {
			values[i][j] = byte('a' + rng.IntN(26))
		}
	}
	ctx := context.Background()
	var failed atomic.Int64
	var firstErr atomic.Value
	done := func(_ *kgo.Record, err error) {
		if err != nil && failed.Add(1) == 1 {
			firstErr.Store(err)
		}
	}
	type mode struct {
		cl      *kgo.Client
		elapsed time.Duration
	}
	newMode := func(opts ...kgo.Opt) *mode {
		cl := newClient(b, tb.Addr(), append(opts,
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchCompression(kgo.NoCompression()))...)
		// Connect, load metadata and (idempotent) the producer id before
		// the clock starts.
		for p := range int32(partitions) {
			cl.Produce(ctx, &kgo.Record{Topic: "bench", Partition: p, Value: values[0]}, done)
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return &mode{cl: cl}
	}
	acks1 := newMode(kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()), kgo.MaxProduceRequestsInflightPerBroker(5))
	idempotent := newMode()

	produce := func(m *mode, from, n int) {
		start := time.Now()
		for i := from; i < from+n; i++ {
			m.cl.Produce(ctx, &kgo.Record{Topic: "bench", Partition: int32(i % partitions), Value: values[i%len(values)]}, done)
		}
		if err := m.cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		m.elapsed += time.Since(start)
	}
	b.SetBytes(2 * 100) // one record of each kind per op
	b.ResetTimer()
	for k, from := 0, 0; from < b.N; k, from = k+1, from+turn {
		n := min(turn, b.N-from)
		first, second := acks1, idempotent
		if k%2 == 1 {
			first, second = second, first
		}
		produce(first, from, n)
		produce(second, from, n)
	}
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d records failed: %v", n, firstErr.Load())
	}
	acks1Rate := float64(b.N) / acks1.elapsed.Seconds()
	idempotentRate := float64(b.N) / idempotent.elapsed.Seconds()
	b.ReportMetric(acks1Rate, "acks1-rec/s")
	b.ReportMetric(idempotentRate, "idem-rec/s")
	b.ReportMetric(100*idempotentRate/acks1Rate, "idem/acks1-%")
}
