package strata_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata"
	"github.com/strata-io/strata/internal/testutil/poll"
)

func startCluster(t testing.TB, settings map[string]string) *strata.Cluster {
	t.Helper()
	var logger *slog.Logger
	if os.Getenv("STRATA_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	c, err := strata.StartCluster(strata.ClusterOptions{Nodes: 3, Dir: t.TempDir(), Settings: settings, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// isr returns a partition's leader and in-sync replicas as the metadata of
// the cluster's running nodes says.
func isr(t *testing.T, cl *kgo.Client, topic string) (int32, []int32) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		return -1, nil
	}
	p := m.Topics[topic].Partitions[0]
	return p.Leader, p.ISR
}

// TestClusterPartitionKillRestart: a leader cut off from both other nodes
// loses its leadership, acks=all produces go on through the new leader, and
// after healing the old leader catches up into the ISR; a killed follower
// does not hold acks=all produces up (the controller fences it) and,
// restarted on its data and addresses, recovers and rejoins the ISR; with
// the leader then killed, every acknowledged record is read back exactly
// once.
func TestClusterPartitionKillRestart(t *testing.T) {
	c := startCluster(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	two := "2"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 3, map[string]*string{"min.insync.replicas": &two}, "t"); err != nil {
		t.Fatal(err)
	}
	sent := 0
	start := time.Now()
	produce := func(n int) {
		t.Helper()
		t.Logf("%v: producing %d", time.Since(start).Round(time.Millisecond), n)
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(sent))}).FirstErr(); err != nil {
				t.Fatalf("producing record %d: %v", sent, err)
			}
			sent++
		}
	}
	produce(50)
	leader, err := c.Leader(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Isolate(leader); err != nil {
		t.Fatal(err)
	}
	poll.UntilStatus(t, 60*time.Second, "a new leader away from the isolated node", func() (bool, string) {
		l, err := c.Leader(ctx, "t", 0)
		return err == nil && l >= 0 && l != leader, fmt.Sprint(l, err)
	})
	produce(50)
	t.Logf("%v: heal", time.Since(start).Round(time.Millisecond))
	c.Heal()
	poll.UntilStatus(t, 60*time.Second, "the healed node back in the ISR", func() (bool, string) {
		_, in := isr(t, cl, "t")
		return len(in) == 3, fmt.Sprint(in)
	})

	// Kill a follower, produce without it, restart it, and wait for it to
	// catch up.
	l, _ := c.Leader(ctx, "t", 0)
	victim := l%3 + 1
	t.Logf("%v: kill %d", time.Since(start).Round(time.Millisecond), victim)
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	produce(50)
	t.Logf("%v: restart", time.Since(start).Round(time.Millisecond))
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	poll.UntilStatus(t, 60*time.Second, "the restarted node back in the ISR", func() (bool, string) {
		_, in := isr(t, cl, "t")
		return len(in) == 3, fmt.Sprint(in)
	})
	// Kill the leader: the restarted node or the third leads, and every
	// record is there.
	l, _ = c.Leader(ctx, "t", 0)
	if err := c.Kill(l); err != nil {
		t.Fatal(err)
	}
	produce(50)
	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	seen := map[string]int{}
	for len(seen) < sent && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	for i := range sent {
		if seen[strconv.Itoa(i)] != 1 {
			t.Errorf("record %d read %d times", i, seen[strconv.Itoa(i)])
		}
	}
}

// BenchmarkStartCluster measures starting a three-node cluster until every
// broker is registered and unfenced, and what it holds once started: the
// Go heap in use and the process's resident set (the test binary's, with
// the cluster in it).
func BenchmarkStartCluster(b *testing.B) {
	var heap, rss float64
	for b.Loop() {
		dir := b.TempDir()
		c, err := strata.StartCluster(strata.ClusterOptions{Nodes: 3, Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = max(heap, float64(ms.HeapInuse)/(1<<20))
		rss = max(rss, residentMB())
		c.Close()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.ReportMetric(heap, "heap-MB")
	b.ReportMetric(rss, "rss-MB")
}

// residentMB is the process's resident set size (VmRSS) in MiB; 0 where
// /proc is not there.
func residentMB() float64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}
