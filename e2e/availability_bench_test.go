package e2e

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// availabilityKills is how many times BenchmarkAvailability stops a
// partition leader in each case (issue 12: p99 over 20).
var availabilityKills = flag.Int("availability.kills", 20, "leader stops per BenchmarkAvailability case")

// ackTimes records when each acknowledgement arrived.
type ackTimes struct {
	mu    sync.Mutex
	times []time.Time
}

func (a *ackTimes) add(t time.Time) {
	a.mu.Lock()
	a.times = append(a.times, t)
	a.mu.Unlock()
}

// longestGapSince returns the longest gap between consecutive
// acknowledgements from the last one before since on, when it ended, and
// the last acknowledgement.
func (a *ackTimes) longestGapSince(since time.Time) (gap time.Duration, end, last time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, _ := slices.BinarySearchFunc(a.times, since, func(t, since time.Time) int { return t.Compare(since) })
	i = max(i-1, 0)
	for j := i + 1; j < len(a.times); j++ {
		if d := a.times[j].Sub(a.times[j-1]); d > gap {
			gap, end = d, a.times[j]
		}
	}
	if len(a.times) > 0 {
		last = a.times[len(a.times)-1]
	}
	return gap, end, last
}

// BenchmarkAvailability measures the longest gap in a producer's
// acknowledgements when the leader of its partition stops: SIGKILL with
// the default broker.session.timeout.ms (9 s, heartbeats every 2 s), SIGKILL
// with broker.session.timeout.ms=3000 (heartbeats every 1 s), and a
// controlled shutdown (SIGTERM), on three real processes, RF 3,
// min.insync.replicas=2. The producer is franz-go's idempotent acks=all
// producer at 1,000 records a second, retrying every 10-100 ms and
// refreshing metadata at most every 100 ms (as Kafka's Java producer's
// retry.backoff.ms=100; franz-go's own 5 s metadata age would measure
// franz-go). Each stopped leader is restarted and the partition is back in
// sync before the next stop; automatic leader rebalancing is off, so that
// it moves no leader during a measurement. It reports the p50, p99 and
// largest gap over -availability.kills stops (20). Run it with
//
//	go test ./e2e -run '^$' -bench BenchmarkAvailability -benchtime=1x
func BenchmarkAvailability(b *testing.B) {
	for _, bc := range []struct {
		name  string
		clean bool
		sets  []string
	}{
		{"kill-default-timeouts", false, nil},
		{"kill-session-3000ms", false, []string{"broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=1000"}},
		{"controlled-shutdown", true, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				gaps := measureAvailability(b, bc.clean, *availabilityKills, bc.sets...)
				slices.Sort(gaps)
				b.ReportMetric(float64(quantile(gaps, 0.5).Milliseconds()), "p50-gap-ms")
				b.ReportMetric(float64(quantile(gaps, 0.99).Milliseconds()), "p99-gap-ms")
				b.ReportMetric(float64(gaps[len(gaps)-1].Milliseconds()), "max-gap-ms")
				b.Logf("%s: gaps %v", bc.name, gaps)
			}
		})
	}
}

// measureAvailability stops the leader of a one-partition topic kills
// times under a steady producer and returns the longest gap in its
// acknowledgements after each stop.
func measureAvailability(b *testing.B, clean bool, kills int, sets ...string) []time.Duration {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	c := startCluster(b, 3, append([]string{"auto.leader.rebalance.enable=false", "offsets.topic.replication.factor=3"}, sets...)...)
	c.createReplicated(1, "availability", 1)
	c.waitInSync(1, "availability", 1)
	cl := client(b, c.nodes[1].addr, kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic("availability"),
		kgo.ProducerLinger(0), kgo.MetadataMinAge(100*time.Millisecond),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			return min(time.Duration(tries)*10*time.Millisecond, 100*time.Millisecond)
		}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acks := &ackTimes{}
	var failed sync.Map
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cl.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Store(err.Error(), true)
					return
				}
				acks.add(time.Now())
			})
		}
	}()
	defer func() { cancel(); <-produced }()
	poll.Until(b, 30*time.Second, "the first acknowledgements", func() bool {
		_, _, last := acks.longestGapSince(time.Time{})
		return !last.IsZero()
	})
	var gaps []time.Duration
	for k := range kills {
		via := c.alive(-1)
		leader, _, err := c.partitionState(via, "availability", 0)
		if err != nil || leader < 0 {
			b.Fatalf("no leader before stop %d: %v", k, err)
		}
		wasController := c.controller(via) == leader
		stopAt := time.Now()
		if clean {
			c.nodes[leader].stop()
		} else {
			c.nodes[leader].kill()
		}
		// Acknowledgements resumed, and have flowed for a second since
		// the longest gap.
		var gap time.Duration
		poll.UntilStatus(b, 120*time.Second, "acknowledgements to resume", func() (bool, string) {
			g, end, last := acks.longestGapSince(stopAt)
			gap = g
			return !end.IsZero() && end.After(stopAt) && last.Sub(end) >= time.Second, fmt.Sprintf("longest gap %v", g)
		})
		gaps = append(gaps, gap)
		b.Logf("stop %d at %s: node %d (active controller: %v), longest gap %v", k+1, stopAt.UTC().Format("15:04:05.000"), leader, wasController, gap.Round(time.Millisecond))
		c.nodes[leader].restart()
		c.waitInSync(c.alive(leader), "availability", 1)
	}
	failed.Range(func(k, _ any) bool {
		b.Errorf("a produce failed: %v", k)
		return true
	})
	return gaps
}
