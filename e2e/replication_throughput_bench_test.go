package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkReplicationThroughput measures, on one cluster of three
// combined nodes, an idempotent acks=all franz-go producer at full speed
// into a topic of replication factor 1 and into one of replication factor
// 3 with min.insync.replicas=2 (six partitions each, 100-byte records,
// linger 5 ms), side by side in each iteration, and then the producer's
// latency into the RF 3 topic at half the rate it reached there: records
// sent at a steady pace for five seconds, linger 0, each timed from send
// to acknowledgement. REPL_BENCH_RECORDS sets the records per full-speed run
// (300,000).
//
//	go test ./e2e -run '^$' -bench BenchmarkReplicationThroughput -benchtime 1x -count 3
func BenchmarkReplicationThroughput(b *testing.B) {
	records := 300_000
	if env := os.Getenv("REPL_BENCH_RECORDS"); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n < 1000 {
			b.Fatalf("REPL_BENCH_RECORDS=%q", env)
		}
		records = n
	}
	c := startCluster(b, 3)
	seeds := []string{c.nodes[1].addr, c.nodes[2].addr, c.nodes[3].addr}
	adm := kadm.NewClient(client(b, seeds[0]))
	ctx := context.Background()
	for _, rf := range []int16{1, 3} {
		resp, err := adm.CreateTopic(ctx, 6, rf, map[string]*string{"min.insync.replicas": kadm.StringPtr(fmt.Sprint(min(rf, 2)))},
			fmt.Sprintf("rf%d", rf))
		if err != nil || resp.Err != nil {
			b.Fatalf("creating rf%d: %v %v", rf, err, resp.Err)
		}
	}
	var ratios []float64
	var rf3Rate float64
	for i := range b.N {
		rates := map[int16]float64{}
		order := []int16{1, 3}
		if i%2 == 1 {
			order = []int16{3, 1}
		}
		for _, rf := range order {
			rates[rf] = produceAtFullSpeed(b, seeds, fmt.Sprintf("rf%d", rf), records)
		}
		b.Logf("iteration %d: RF 1 %.0f records/s, RF 3 %.0f records/s: %.2f×", i, rates[1], rates[3], rates[3]/rates[1])
		ratios = append(ratios, rates[3]/rates[1])
		rf3Rate = rates[3]
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "rf3/rf1")
	b.ReportMetric(rf3Rate, "rf3-records/s")

	p50, p99 := produceAtRate(b, seeds, "rf3", rf3Rate/2, 5*time.Second)
	b.Logf("RF 3 at %.0f records/s (half its full speed): latency p50 %v, p99 %v", rf3Rate/2, p50, p99)
	b.ReportMetric(float64(p50.Microseconds())/1000, "rf3-half-rate-p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "rf3-half-rate-p99-ms")
}

func benchProducer(b *testing.B, seeds []string, topic string, linger time.Duration) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(linger), kgo.MaxBufferedRecords(100_000), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// produceAtFullSpeed sends n records of 100 bytes to topic and returns
// the acknowledged records per second.
func produceAtFullSpeed(b *testing.B, seeds []string, topic string, n int) float64 {
	cl := benchProducer(b, seeds, topic, 5*time.Millisecond)
	defer cl.Close()
	ctx := context.Background()
	// Warm up: metadata, producer id, connections.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 100)}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 100)
	var failed sync.Once
	start := time.Now()
	for range n {
		cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Do(func() { b.Error(err) })
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}

// produceAtRate sends 100-byte records to topic at rate records/s for d,
// in steps of 1 ms, and returns the p50 and p99 of the time from each send
// to its acknowledgement.
func produceAtRate(b *testing.B, seeds []string, topic string, rate float64, d time.Duration) (p50, p99 time.Duration) {
	cl := benchProducer(b, seeds, topic, 0)
	defer cl.Close()
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 100)}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var lat []time.Duration
	value := make([]byte, 100)
	start := time.Now()
	sent := 0
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for now := range tick.C {
		if now.Sub(start) > d {
			break
		}
		for due := int(rate * now.Sub(start).Seconds()); sent < due; sent++ {
			at := time.Now()
			cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(at))
				mu.Unlock()
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	return quantile(lat, 0.5), quantile(lat, 0.99)
}
