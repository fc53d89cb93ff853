package broker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkTransactionalProduce compares franz-go's idempotent producer
// with its transactional producer committing a transaction every 1,000
// records (AddPartitionsToTxn, the records, EndTxn and the markers), side
// by side on one broker: 100-byte records to four partitions, acks=all,
// in rounds of 1,000 records flushed together. b.N is records; records/s
// is the figure to compare.
//
//	go test ./internal/broker -run XXX -bench 'TransactionalProduce$' -benchtime 50000x
func BenchmarkTransactionalProduce(b *testing.B) {
	for _, mode := range []string{"idempotent", "transactional-1000"} {
		b.Run(mode, func(b *testing.B) {
			tb := startBroker(b, map[string]string{"transaction.state.log.num.partitions": "3"})
			createTopic(b, newAdmin(b, tb.Addr()), "bench-txn", 4, nil)
			opts := []kgo.Opt{kgo.DefaultProduceTopic("bench-txn"), kgo.ProducerLinger(0)}
			if mode != "idempotent" {
				opts = append(opts, kgo.TransactionalID("bench"))
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
