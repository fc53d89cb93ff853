package broker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// BenchmarkTransactionalProduce compares franz-go's idempotent producer
// with its transactional producer committing a transaction every 1,000
// records, side by side on one broker: with transactions version 2 (the
// leaders add the partitions as the records come, EndTxn v5, the markers)
// and, capped at Produce v11, version 1 (AddPartitionsToTxn first).
// 100-byte records to four partitions, acks=all, in rounds of 1,000
// records flushed together. b.N is records; records/s is the figure to
// compare.
//
//	go test ./internal/broker -run XXX -bench 'TransactionalProduce$' -benchtime 50000x
func BenchmarkTransactionalProduce(b *testing.B) {
	for _, mode := range []string{"idempotent", "transactional-1000", "transactional-1000-v1"} {
		b.Run(mode, func(b *testing.B) {
			tb := startBroker(b, map[string]string{"transaction.state.log.num.partitions": "3"})
			createTopic(b, newAdmin(b, tb.Addr()), "bench-txn", 4, nil)
			opts := []kgo.Opt{kgo.DefaultProduceTopic("bench-txn"), kgo.ProducerLinger(0)}
			if mode != "idempotent" {
				opts = append(opts, kgo.TransactionalID("bench"))
			}
			if mode == "transactional-1000-v1" {
				v1 := kversion.Stable()
				v1.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
				opts = append(opts, kgo.MaxVersions(v1))
			}
			cl := newClient(b, tb.Addr(), opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			value := make([]byte, 100)
			round := func(n int) {
				if mode != "idempotent" {
					if err := cl.BeginTransaction(); err != nil {
						b.Fatal(err)
					}
				}
				for range n {
					cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
						if err != nil {
							b.Error(err)
						}
					})
				}
				if err := cl.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				if mode != "idempotent" {
					if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
						b.Fatal(err)
					}
				}
			}
			round(1000) // warm: producer id, metadata, coordinator
			b.ResetTimer()
			start := time.Now()
			for done := 0; done < b.N; done += 1000 {
				round(min(1000, b.N-done))
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
		})
	}
}

// BenchmarkReadCommittedLag measures how far behind a read_committed
// consumer trails a transactional producer writing 10,000 records/s in
// transactions of 1,000 (ten commits a second), beside a read_uncommitted
// consumer of the same records: the time from a record's timestamp to its
// delivery, p50 and p99, over three seconds of traffic per iteration.
//
//	go test ./internal/broker -run XXX -bench 'ReadCommittedLag$' -benchtime 1x
func BenchmarkReadCommittedLag(b *testing.B) {
	const (
		rate     = 10000
		perTxn   = 1000
		duration = 3 * time.Second
	)
	tb := startBroker(b, map[string]string{"transaction.state.log.num.partitions": "3"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range b.N {
		topic := fmt.Sprintf("lag-%d", i)
		createTopic(b, newAdmin(b, tb.Addr()), topic, 1, nil)
		prod := newClient(b, tb.Addr(), kgo.TransactionalID("lag"), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
		type lags struct{ ms []float64 }
		consume := func(level kgo.IsolationLevel, n int, out *lags, done chan<- struct{}) {
			cl := newClient(b, tb.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(50*time.Millisecond))
			defer close(done)
			for len(out.ms) < n && ctx.Err() == nil {
				cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
					out.ms = append(out.ms, float64(time.Since(r.Timestamp).Microseconds())/1000)
				})
			}
		}
		total := int(rate * duration / time.Second)
		var committed, uncommitted lags
		cdone, udone := make(chan struct{}), make(chan struct{})
		go consume(kgo.ReadCommitted(), total, &committed, cdone)
		go consume(kgo.ReadUncommitted(), total, &uncommitted, udone)
		start := time.Now()
		for sent := 0; sent < total; {
			if err := prod.BeginTransaction(); err != nil {
				b.Fatal(err)
			}
			for range perTxn {
				// Paced: record i goes at start + i/rate.
				if d := time.Until(start.Add(time.Duration(sent) * time.Second / rate)); d > 0 {
					time.Sleep(d)
				}
				prod.Produce(ctx, &kgo.Record{Value: make([]byte, 100)}, nil)
				sent++
			}
			if err := prod.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-cdone:
		case <-time.After(20 * time.Second):
			rp, _ := tb.partition(topic, 0)
			md, _ := tb.txns.Describe("lag")
			b.Fatalf("read_committed consumer stuck at %d of %d; last stable offset %d, high watermark %d; %+v", len(committed.ms), total, rp.LastStableOffset(), rp.HighWatermark(), md)
		}
		<-udone
		pct := func(v []float64, p float64) float64 {
			if len(v) == 0 {
				return -1
			}
			slices.Sort(v)
			return v[min(len(v)-1, int(p*float64(len(v))))]
		}
		b.ReportMetric(pct(committed.ms, 0.5), "committed-p50-ms")
		b.ReportMetric(pct(committed.ms, 0.99), "committed-p99-ms")
		b.ReportMetric(pct(uncommitted.ms, 0.5), "uncommitted-p50-ms")
		b.ReportMetric(pct(uncommitted.ms, 0.99), "uncommitted-p99-ms")
		prod.Close()
	}
}
