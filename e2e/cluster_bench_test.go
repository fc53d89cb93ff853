package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// BenchmarkControllerFailover measures, on three combined nodes with
// Kafka's default timeouts, the time from SIGKILL of the active
// controller until a CreateTopics sent to a surviving node succeeds, as a
// client sees it: each attempt is a new client seeded with that node only
// (so its idea of the controller comes from that node), sent every 20 ms.
// The killed node is restarted and rejoins before the next kill.
// FAILOVER_BENCH_KILLS sets the kills per iteration (20), and
// FAILOVER_BENCH_BIN another strata binary to measure (a baseline).
//
//	go test ./e2e -run '^$' -bench BenchmarkControllerFailover -benchtime 1x
func BenchmarkControllerFailover(b *testing.B) {
	if env := os.Getenv("FAILOVER_BENCH_BIN"); env != "" {
		defer func(saved string) { binary = saved }(binary)
		binary = env
	}
	kills := 20
	if env := os.Getenv("FAILOVER_BENCH_KILLS"); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n < 1 {
			b.Fatalf("FAILOVER_BENCH_KILLS=%q", env)
		}
		kills = n
	}
	var gaps []time.Duration
	for range b.N {
		c := startCluster(b, 3)
		for k := range kills {
			active := c.controller(1)
			survivor := active%3 + 1
			killed := time.Now()
			c.nodes[active].kill()
			var took time.Duration
			for attempt := 0; ; attempt++ {
				if err := createVia(c.nodes[survivor].addr, fmt.Sprintf("failover-%d", k)); err == nil {
					took = time.Since(killed)
					break
				} else if time.Since(killed) > 60*time.Second {
					b.Fatalf("kill %d: no CreateTopics through node %d within 60s: %v", k, survivor, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			gaps = append(gaps, took)
			b.Logf("kill %d: node %d (active controller) killed; CreateTopics through node %d succeeded %v later",
				k, active, survivor, took.Round(time.Millisecond))
			c.nodes[active].restart()
			c.waitBrokers(1, 2, 3)
		}
	}
	slices.Sort(gaps)
	b.ReportMetric(quantile(gaps, 0.5).Seconds(), "p50-s")
	b.ReportMetric(quantile(gaps, 0.99).Seconds(), "p99-s")
	b.ReportMetric(gaps[len(gaps)-1].Seconds(), "max-s")
}

// createVia creates a topic of one partition through a new client seeded
// with addr only; an existing topic counts as created (an earlier attempt
// that timed out after committing).
func createVia(addr, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RetryTimeout(time.Second), kgo.RequestRetries(0))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic)
	if err != nil {
		return err
	}
	if resp.Err != nil && !strings.Contains(resp.Err.Error(), "TOPIC_ALREADY_EXISTS") {
		return resp.Err
	}
	return nil
}

// quantile returns the q-quantile of sorted durations: the one at index
// q·n (the largest for q close to 1).
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// BenchmarkManyTopics creates 1,000 topics of 10 partitions (replication
// factor 1) on three combined nodes, 100 topics a CreateTopics, and
// reports the wall time, the metadata log's size on disk, each node's
// RSS, and how long one node takes after a clean restart until it
// answers Metadata with all 10,000 partitions led.
//
//	go test ./e2e -run '^$' -bench BenchmarkManyTopics -benchtime 1x
func BenchmarkManyTopics(b *testing.B) {
	const topics, partitions = 1000, 10
	for range b.N {
		c := startCluster(b, 3)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.nodes[1].addr, c.nodes[2].addr, c.nodes[3].addr))
		if err != nil {
			b.Fatal(err)
		}
		adm := kadm.NewClient(cl)
		adm.SetTimeoutMillis(120_000)
		ctx := context.Background()
		start := time.Now()
		for i := 0; i < topics; i += 100 {
			var names []string
			for j := i; j < i+100; j++ {
				names = append(names, fmt.Sprintf("t%04d", j))
			}
			resps, err := adm.CreateTopics(ctx, partitions, 1, nil, names...)
			if err != nil {
				b.Fatal(err)
			}
			if err := resps.Error(); err != nil {
				b.Fatal(err)
			}
		}
		created := time.Since(start)
		ready := func(id int32) bool { return allLed(c.nodes[id].addr, topics*partitions) }
		poll.Until(b, 120*time.Second, "every node answering with all partitions led", func() bool {
			return ready(1) && ready(2) && ready(3)
		})
		cl.Close()
		b.ReportMetric(created.Seconds(), "create-s")
		b.ReportMetric(float64(time.Since(start).Milliseconds())/1000, "create-and-led-everywhere-s")

		var logBytes int64
		filepath.Walk(filepath.Join(c.nodes[1].dir, "__cluster_metadata-0"), func(_ string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				logBytes += fi.Size()
			}
			return nil
		})
		b.ReportMetric(float64(logBytes)/(1<<20), "metadata-log-MB")
		for id := int32(1); id <= 3; id++ {
			rss := procStatusKB(c.nodes[id].cmd.Process.Pid, "VmRSS")
			b.ReportMetric(float64(rss)/1024, fmt.Sprintf("node%d-rss-MB", id))
		}

		c.nodes[3].stop()
		restarted := time.Now()
		c.nodes[3].restart()
		poll.Until(b, 120*time.Second, "node 3 answering with all partitions led", func() bool { return ready(3) })
		b.ReportMetric(time.Since(restarted).Seconds(), "restart-s")
		b.ReportMetric(float64(procStatusKB(c.nodes[3].cmd.Process.Pid, "VmRSS"))/1024, "node3-restarted-rss-MB")
	}
}

// allLed reports whether the node at addr itself answers Metadata for
// want partitions, each with a leader.
func allLed(addr string, want int) bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The seed's own answer: kgo keeps its first seed as broker MinInt32.
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.Broker(math.MinInt32))
	if err != nil {
		return false
	}
	n := 0
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Leader >= 0 && p.ErrorCode == 0 {
				n++
			}
		}
	}
	return n >= want
}
