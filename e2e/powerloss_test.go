package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/powerfs"
	"github.com/strata-io/strata/internal/verify"
)

// The power-loss schedule (issue 26, item 2): three strata serve processes,
// each with its log.dirs (the metadata log too) on a power-cut file system
// (internal/testutil/powerfs), RF 3 and min.insync.replicas 2, the verify
// workload running; every node is killed with SIGKILL and loses power at
// once, so whatever none of them had fsynced is gone; the nodes restart and
// the workload reads everything back. Bounded by default (one cut per
// mode); long by flag:
//
//	go test ./e2e -run TestPowerLoss -v -powerloss.runs 10
var powerLossRuns = flag.Int("powerloss.runs", 1, "runs of each mode of TestPowerLoss")

// powerCluster is a cluster of three combined nodes, each on its own
// power-cut file system.
type powerCluster struct {
	*cluster
	disks map[int32]*powerfs.FS
}

func startPowerCluster(t *testing.T, sets ...string) *powerCluster {
	t.Helper()
	pc := &powerCluster{disks: map[int32]*powerfs.FS{}}
	for _, id := range ids(3) {
		pc.disks[id] = powerfs.Mount(t)
	}
	attempt := map[int32]int{}
	hook := func(id int32, _ string) ([]string, []string) {
		// A fresh directory for each attempt at starting (see
		// retryOnPortClash): an attempt that lost a port leaves a
		// metadata log naming other ports.
		attempt[id]++
		return nil, []string{fmt.Sprintf("log.dirs=%s", filepath.Join(pc.disks[id].Dir(), fmt.Sprintf("data-%d", attempt[id])))}
	}
	roles := []string{"broker,controller", "broker,controller", "broker,controller"}
	pc.cluster = startClusterWith(t, roles, hook, sets...)
	pc.waitBrokers(ids(3)...)
	return pc
}

// cutPower kills every node with SIGKILL at once, then cuts the power of
// every disk: what no node had fsynced is lost. The nodes stay down.
func (pc *powerCluster) cutPower() {
	pc.t.Helper()
	var wg sync.WaitGroup
	for _, p := range pc.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.kill()
		}()
	}
	wg.Wait()
	for id, d := range pc.disks {
		before := d.Stats()
		if err := d.Cut(); err != nil {
			pc.t.Fatalf("cutting node %d's power: %v", id, err)
		}
		pc.t.Logf("node %d lost power: %d files with unsynced writes, %d directory operations not durable", id, before.DirtyFiles, before.PendingDirOps)
	}
}

// powerLossRun is one run's outcome.
type powerLossRun struct {
	mode string
	res  *verify.Result
	loss loss
}

// TestPowerLoss runs a coordinated power cut in the durable mode
// (log.flush.interval.messages=1: every acknowledged record is on the
// disks of at least min.insync.replicas replicas), where no acknowledged
// record may be lost and the verify workload's verdict must be valid, and
// in the default mode (no fsync before acknowledging, durability from
// replication, as Kafka), where it prints what was lost per 100,000
// acknowledged records.
func TestPowerLoss(t *testing.T) {
	if err := powerfs.Available(); err != nil {
		t.Skipf("power-cut file system not available: %v", err)
	}
	modes := []struct {
		name string
		sets []string
	}{
		{"durable", []string{"log.flush.interval.messages=1"}},
		{"default", nil},
	}
	var mu sync.Mutex
	var runs []powerLossRun
	for _, m := range modes {
		for run := range *powerLossRuns {
			t.Run(fmt.Sprintf("%s/%d", m.name, run), func(t *testing.T) {
				r := runPowerLoss(t, m.name == "durable", m.sets...)
				r.mode = m.name
				mu.Lock()
				runs = append(runs, r)
				mu.Unlock()
			})
		}
	}
	t.Logf("power loss: %d coordinated cuts per mode\n%s", *powerLossRuns, powerLossTable(runs))
}

func runPowerLoss(t *testing.T, durable bool, sets ...string) powerLossRun {
	pc := startPowerCluster(t, append([]string{
		"broker.session.timeout.ms=" + fmt.Sprint(sessionTimeout.Milliseconds()), "broker.heartbeat.interval.ms=500",
		"replica.lag.time.max.ms=3000", "controller.quorum.election.timeout.ms=1000",
		"group.initial.rebalance.delay.ms=0",
	}, sets...)...)
	topic := "powerloss"
	var seeds []string
	for _, id := range ids(3) {
		seeds = append(seeds, pc.nodes[id].addr)
	}
	cfg := verify.Config{
		Brokers: seeds, Topic: topic, Partitions: 3, ReplicationFactor: 3,
		Producers: 2, AssignedConsumers: 1, GroupConsumers: 2,
		Duration: time.Hour, // ended by the schedule
		Rate:     300, Idempotent: true, Acks: kgo.AllISRAcks(),
		DeliveryTimeout: 60 * time.Second, DrainTimeout: 30 * time.Second, RequestTimeout: 10 * time.Second,
		KeepTopic: true,
	}
	ready := &readyWriter{match: "replication factor", ready: make(chan struct{})}
	cfg.Progress = ready
	produce, stop := context.WithCancel(context.Background())
	defer stop()
	type outcome struct {
		h   *verify.History
		res *verify.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		h, res, err := verify.Verify(produce, cfg)
		done <- outcome{h, res, err}
	}()
	tl := &timeline{start: time.Now()}
	select {
	case <-ready.ready:
	case o := <-done:
		t.Fatalf("the workload ended before it started: %v", o.err)
	case <-time.After(60 * time.Second):
		t.Fatal("the workload did not start within 60s")
	}
	started := time.Now() // the history's times count from here (and its first line)
	tl.add("workload running on %s", topic)
	hold(3 * time.Second)
	tl.add("SIGKILL every node and cut the power of every disk")
	pc.cutPower()
	tl.add("restart every node")
	for _, id := range ids(3) {
		pc.nodes[id].restart()
	}
	fc := &faultCluster{meshCluster: &meshCluster{cluster: pc.cluster}}
	fc.healthy(topic)
	backAt := time.Since(started)
	tl.add("cluster healthy again")
	hold(2 * time.Second)
	tl.add("stop producing; drain and final read")
	stop()
	o := <-done
	tl.add("workload done")
	if o.err != nil {
		t.Fatalf("workload: %v\ntimeline:\n%s", o.err, tl)
	}
	var report bytes.Buffer
	o.res.WriteText(&report)
	l := lossOf(o.h, backAt)
	t.Logf("timeline:\n%s\n\nverdict:\n%s\n%s", tl, report.String(), l)
	if o.res.Stats.Acknowledged == 0 || l.ackedBefore == 0 {
		t.Fatalf("%d acknowledged, %d of them before the cut: the run tested nothing", o.res.Stats.Acknowledged, l.ackedBefore)
	}
	if !l.finalReached {
		t.Errorf("the final read did not reach the end of every partition: %+v", o.h.Final)
	}
	if n := o.res.Count(verify.UnexpectedValue); n > 0 {
		t.Errorf("%d values read that no producer sent (a torn or corrupt batch served?)", n)
	}
	// Once the cluster is back, nothing acknowledged may be lost, in any
	// mode: every replica lost power, none lost it again.
	if l.lostAfter > 0 {
		t.Errorf("%d records acknowledged after the restart lost", l.lostAfter)
	}
	if durable {
		if l.lost() > 0 || !o.res.Valid {
			t.Errorf("durable mode: %d acknowledged records missing from the final read; verdict %s (%d acknowledged)", l.lost(), o.res.Summary(), o.res.Stats.Acknowledged)
		}
	}
	return powerLossRun{res: o.res, loss: l}
}

// loss is what a run lost: acknowledged records missing from the final
// read (whether or not a consumer read them before the cut, which the
// checker's lost-write does not count: it shows as inconsistent offsets).
type loss struct {
	acked, ackedBefore, lostBefore, lostAfter int
	finalReached                              bool
}

func (l loss) lost() int { return l.lostBefore + l.lostAfter }

func (l loss) String() string {
	return fmt.Sprintf("acknowledged %d (%d before the cut); missing from the final read: %d (%d acknowledged before the cut, %d after the cluster was back): %s per 100,000 acknowledged, %s per 100,000 acknowledged before the cut",
		l.acked, l.ackedBefore, l.lost(), l.lostBefore, l.lostAfter, per100k(l.lost(), l.acked), per100k(l.lostBefore, l.ackedBefore))
}

// lossOf counts acknowledged records the final read did not read, by when
// they were acknowledged: before the cut, or after the cluster was back
// (backAt after the run's start).
func lossOf(h *verify.History, backAt time.Duration) loss {
	l := loss{finalReached: len(h.Final) > 0}
	for _, f := range h.Final {
		l.finalReached = l.finalReached && f.Reached
	}
	read := map[string]bool{}
	for _, c := range h.Consumers {
		if c.Kind != verify.KindFinal {
			continue
		}
		for _, e := range c.Events {
			if e.Type == verify.EventPoll {
				read[e.Value] = true
			}
		}
	}
	for _, s := range h.Sends {
		if !s.Acked {
			continue
		}
		l.acked++
		after := s.AnswerNanos > int64(backAt)
		if !after {
			l.ackedBefore++
		}
		if read[s.Value] {
			continue
		}
		if after {
			l.lostAfter++
		} else {
			l.lostBefore++
		}
	}
	return l
}

func per100k(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(n)*100000/float64(of))
}

// powerLossTable sums the runs per mode.
func powerLossTable(runs []powerLossRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %4s %12s %10s %6s %16s %24s %s\n", "MODE", "RUNS", "ACKNOWLEDGED", "BEFORE-CUT", "LOST", "LOST PER 100,000", "LOST PER 100,000 BEFORE", "CHECKER (ALL RUNS)")
	for _, mode := range []string{"durable", "default"} {
		var n int
		var sum loss
		counts := map[verify.Kind]int{}
		for _, r := range runs {
			if r.mode != mode || r.res == nil {
				continue
			}
			n++
			sum.acked += r.loss.acked
			sum.ackedBefore += r.loss.ackedBefore
			sum.lostBefore += r.loss.lostBefore
			sum.lostAfter += r.loss.lostAfter
			for _, a := range r.res.Anomalies {
				counts[a.Kind] += a.Count
			}
		}
		var checker []string
		for _, k := range []verify.Kind{verify.LostWrite, verify.Duplicate, verify.InconsistentOffset, verify.NonmonotonicSend, verify.NonmonotonicPoll, verify.PollSkip, verify.UnexpectedValue} {
			if counts[k] > 0 {
				checker = append(checker, fmt.Sprintf("%d %s", counts[k], k))
			}
		}
		if len(checker) == 0 {
			checker = []string{"valid"}
		}
		fmt.Fprintf(&b, "%-8s %4d %12d %10d %6d %16s %24s %s\n", mode, n, sum.acked, sum.ackedBefore, sum.lost(), per100k(sum.lost(), sum.acked), per100k(sum.lostBefore, sum.ackedBefore), strings.Join(checker, ", "))
	}
	return b.String()
}
