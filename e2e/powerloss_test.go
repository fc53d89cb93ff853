package e2e

import (
	"bytes"
	"context"
	byteorder "encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/testutil/powerfs"
	"github.com/strata-io/strata/internal/verify"
)

// The power-loss schedules (issue 26, item 2): three strata serve
// processes, each with its log.dirs (the metadata log too) on a power-cut
// file system (internal/testutil/powerfs), RF 3 and min.insync.replicas 2,
// the verify workload running; some nodes (all of them at once, the leader
// of a partition, the active controller) are killed with SIGKILL and lose
// power, so whatever they had not fsynced is gone; they restart and the
// workload reads everything back. One schedule kills every node and
// restarts it on the same page cache first, so that the nodes run on
// records they recovered but never synced when the power goes.
//
// Bounded by default: the coordinated cut, once per mode (about 15 s
// each). Every schedule, many times, by flag:
//
//	go test ./e2e -run TestPowerLoss -v -powerloss.runs 10 \
//	    -powerloss.schedules all,kill-then-all,leader,controller
var (
	powerLossRuns      = flag.Int("powerloss.runs", 1, "runs of each schedule and mode of TestPowerLoss")
	powerLossSchedules = flag.String("powerloss.schedules", "all", "comma-separated schedules of TestPowerLoss: all, kill-then-all, leader, controller")
)

// powerCluster is a cluster of three combined nodes, each on its own
// power-cut file system.
type powerCluster struct {
	*cluster
	disks map[int32]*powerfs.FS
	// dataDirs are the nodes' log.dirs, relative to their disks' roots.
	dataDirs map[int32]string
}

func startPowerCluster(t *testing.T, sets ...string) *powerCluster {
	t.Helper()
	pc := &powerCluster{disks: map[int32]*powerfs.FS{}, dataDirs: map[int32]string{}}
	for _, id := range ids(3) {
		pc.disks[id] = powerfs.Mount(t)
	}
	attempt := map[int32]int{}
	hook := func(id int32, _ string) ([]string, []string) {
		// A fresh directory for each attempt at starting (see
		// retryOnPortClash): an attempt that lost a port leaves a
		// metadata log naming other ports.
		attempt[id]++
		pc.dataDirs[id] = fmt.Sprintf("data-%d", attempt[id])
		return nil, []string{"log.dirs=" + filepath.Join(pc.disks[id].Dir(), pc.dataDirs[id])}
	}
	roles := []string{"broker,controller", "broker,controller", "broker,controller"}
	pc.cluster = startClusterWith(t, roles, hook, sets...)
	pc.waitBrokers(ids(3)...)
	return pc
}

// cutPower kills the victims with SIGKILL at once, then cuts the power of
// their disks: what they had not fsynced is lost. With tear, the last
// write to the active segment of tornPartition is torn on every victim
// that had not synced it; cutPower returns those victims. The victims stay
// down.
func (pc *powerCluster) cutPower(victims []int32, tear bool) (torn []int32) {
	pc.t.Helper()
	pc.kill(victims)
	for _, id := range victims {
		d := pc.disks[id]
		before := d.Stats()
		var faults []powerfs.Fault
		if tear {
			if seg := pc.activeSegment(id, tornPartition); seg != "" && d.Unsynced(seg) {
				faults = append(faults, powerfs.Tear(seg))
				torn = append(torn, id)
			}
		}
		if err := d.Cut(faults...); err != nil {
			pc.t.Fatalf("cutting node %d's power: %v", id, err)
		}
		pc.t.Logf("node %d lost power: %d files with unsynced writes, %d directory operations not durable; torn: %v", id, before.DirtyFiles, before.PendingDirOps, faults != nil)
	}
	return torn
}

// kill kills the victims with SIGKILL at once and waits for them to die.
func (pc *powerCluster) kill(victims []int32) {
	var wg sync.WaitGroup
	for _, id := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pc.nodes[id].kill()
		}()
	}
	wg.Wait()
}

// tornPartition is the partition whose last write a coordinated cut tears.
const tornPartition = "powerloss-0"

// activeSegment is the path of the partition's newest segment on node id,
// relative to its disk's root; "" if it has none.
func (pc *powerCluster) activeSegment(id int32, partition string) string {
	rel := filepath.Join(pc.dataDirs[id], partition)
	segs, _ := filepath.Glob(filepath.Join(pc.disks[id].BackingDir(), rel, "*.log"))
	if len(segs) == 0 {
		return ""
	}
	slices.Sort(segs)
	return filepath.Join(rel, filepath.Base(segs[len(segs)-1]))
}

// A powerSchedule picks the nodes that lose power.
type powerSchedule struct {
	name string
	// victims returns them, and says who they are for the timeline.
	victims func(f *faultCluster, topic string) ([]int32, string)
	// coordinated is set when every node loses power.
	coordinated bool
	// tear tears the last unsynced write of a partition's active segment.
	tear bool
	// killFirst kills the victims with SIGKILL and restarts them, on
	// the same page cache, before the cut: what they recovered from it
	// was never synced.
	killFirst bool
}

func everyNode(*faultCluster, string) ([]int32, string) { return ids(3), "every node" }

var powerSchedules = []powerSchedule{
	{name: "all", victims: everyNode, coordinated: true, tear: true},
	{name: "kill-then-all", victims: everyNode, coordinated: true, killFirst: true},
	{name: "leader", victims: func(f *faultCluster, topic string) ([]int32, string) {
		l := f.leader(topic)
		return []int32{l}, fmt.Sprintf("node %d, leader of partition 0", l)
	}},
	{name: "controller", victims: func(f *faultCluster, topic string) ([]int32, string) {
		c := f.controller(f.alive()[0])
		return []int32{c}, fmt.Sprintf("node %d, the active controller (Raft leader)", c)
	}},
}

// powerLossRun is one run's outcome.
type powerLossRun struct {
	schedule, mode string
	res            *verify.Result
	loss           loss
}

// TestPowerLoss runs each schedule asked for (every node, every node after
// a restart on unsynced records, the leader of partition 0, the active
// controller loses power) in the durable mode
// (log.flush.interval.messages=1: every acknowledged record is on the disks
// of at least min.insync.replicas replicas) and in the default mode (no
// fsync before acknowledging, durability from replication, as Kafka). No
// acknowledged record may be lost in the durable mode, nor in the default
// mode when one node loses power; for a coordinated loss in the default
// mode the test prints what was lost per 100,000 acknowledged records.
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
	for _, sched := range powerSchedules {
		if !slices.Contains(strings.Split(*powerLossSchedules, ","), sched.name) {
			continue
		}
		for _, m := range modes {
			for run := range *powerLossRuns {
				t.Run(fmt.Sprintf("%s/%s/%d", sched.name, m.name, run), func(t *testing.T) {
					// Only a coordinated loss may lose what the
					// default mode acknowledged.
					mayLose := m.name == "default" && sched.coordinated
					r := runPowerLoss(t, sched, mayLose, m.sets...)
					r.schedule, r.mode = sched.name, m.name
					mu.Lock()
					runs = append(runs, r)
					mu.Unlock()
				})
			}
		}
	}
	t.Logf("power loss: %d runs per schedule and mode\n%s", *powerLossRuns, powerLossTable(runs))
}

// runPowerLoss runs the workload, cuts the power of the schedule's victims
// once, restarts them and checks what the final read found.
func runPowerLoss(t *testing.T, sched powerSchedule, mayLose bool, sets ...string) powerLossRun {
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
	acked := &ackedWriter{next: ready}
	cfg.Progress = acked
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
	// Cut once enough is acknowledged, not after a fixed time: on a
	// loaded machine the first acknowledgements can take seconds.
	acked.atLeast(t, acked.total()+powerLossAckedBeforeCut)
	fc := &faultCluster{meshCluster: &meshCluster{cluster: pc.cluster}}
	victims, who := sched.victims(fc, topic)
	if sched.killFirst {
		tl.add("SIGKILL %s, and restart it on the same page cache", who)
		pc.kill(victims)
		for _, id := range victims {
			pc.nodes[id].restart()
		}
		fc.healthy(topic)
		tl.add("cluster healthy again")
		acked.atLeast(t, acked.total()+powerLossAckedBeforeCut)
	}
	tl.add("SIGKILL %s and cut its power", who)
	torn := pc.cutPower(victims, sched.tear)
	tl.add("restart %v (the last write to %s torn on %v)", victims, tornPartition, torn)
	for _, id := range victims {
		pc.nodes[id].restart()
	}
	fc.healthy(topic)
	// Recovery cut each torn segment back to its last valid batch, and
	// said so.
	for _, id := range torn {
		if logs := pc.nodes[id].logs.String(); !strings.Contains(logs, "recovering corrupt logs") || !strings.Contains(logs, tornPartition) {
			t.Errorf("node %d, whose %s's last write was torn, logged no recovery of it:\n%s", id, tornPartition, logs)
		}
	}
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
	// In every mode the replicas hold the same batches once they caught
	// up: recovery and truncation left no copy diverging.
	pc.replicasAgree(t, topic, cfg.Partitions)
	if !mayLose && (l.lost() > 0 || !o.res.Valid) {
		t.Errorf("%d acknowledged records missing from the final read; verdict %s (%d acknowledged)", l.lost(), o.res.Summary(), o.res.Stats.Acknowledged)
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

// powerLossTable sums the runs per schedule and mode, in the order run.
func powerLossTable(runs []powerLossRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-8s %4s %12s %10s %6s %16s %24s  %s\n", "SCHEDULE", "MODE", "RUNS", "ACKNOWLEDGED", "BEFORE-CUT", "LOST", "LOST PER 100,000", "LOST PER 100,000 BEFORE", "CHECKER (ALL RUNS)")
	type key struct{ schedule, mode string }
	var keys []key
	type sum struct {
		runs   int
		loss   loss
		counts map[verify.Kind]int
	}
	sums := map[key]*sum{}
	for _, r := range runs {
		k := key{r.schedule, r.mode}
		if sums[k] == nil {
			keys = append(keys, k)
			sums[k] = &sum{counts: map[verify.Kind]int{}}
		}
		s := sums[k]
		s.runs++
		s.loss.acked += r.loss.acked
		s.loss.ackedBefore += r.loss.ackedBefore
		s.loss.lostBefore += r.loss.lostBefore
		s.loss.lostAfter += r.loss.lostAfter
		if r.res != nil {
			for _, a := range r.res.Anomalies {
				s.counts[a.Kind] += a.Count
			}
		}
	}
	for _, k := range keys {
		s := sums[k]
		var checker []string
		for _, kind := range []verify.Kind{verify.LostWrite, verify.Duplicate, verify.InconsistentOffset, verify.NonmonotonicSend, verify.NonmonotonicPoll, verify.PollSkip, verify.UnexpectedValue} {
			if s.counts[kind] > 0 {
				checker = append(checker, fmt.Sprintf("%d %s", s.counts[kind], kind))
			}
		}
		if len(checker) == 0 {
			checker = []string{"valid"}
		}
		l := s.loss
		fmt.Fprintf(&b, "%-10s %-8s %4d %12d %10d %6d %16s %24s  %s\n", k.schedule, k.mode, s.runs, l.acked, l.ackedBefore, l.lost(), per100k(l.lost(), l.acked), per100k(l.lostBefore, l.ackedBefore), strings.Join(checker, ", "))
	}
	return b.String()
}

// batchHeaderBytes is how much of a record batch's header replicaBatches
// needs: base offset (8), length (4), partition leader epoch (4), magic
// (1), CRC (4), attributes (2), last offset delta (4).
const batchHeaderBytes = 27

// replicaBatches reads the batches of a partition's segments on node id
// from its disk's backing directory: a checksum of each batch's bytes by
// base offset, and the log's end (the offset after the last whole batch).
func (pc *powerCluster) replicaBatches(id int32, partition string) (map[int64]uint32, int64, error) {
	segs, err := filepath.Glob(filepath.Join(pc.disks[id].BackingDir(), pc.dataDirs[id], partition, "*.log"))
	if err != nil {
		return nil, 0, err
	}
	slices.Sort(segs)
	crcs := map[int64]uint32{}
	end := int64(0)
	for _, seg := range segs {
		data, err := os.ReadFile(seg)
		if err != nil {
			return nil, 0, err
		}
		for len(data) >= batchHeaderBytes {
			base := int64(byteorder.BigEndian.Uint64(data))
			length := int64(byteorder.BigEndian.Uint32(data[8:]))
			if length < batchHeaderBytes-12 || int64(len(data)) < 12+length {
				break // the end of what was written, or preallocated zeros
			}
			// The whole batch as stored, not its CRC field: a copy
			// corrupted after it was written keeps the field.
			crcs[base] = crc32.ChecksumIEEE(data[:12+length])
			lastDelta := int64(byteorder.BigEndian.Uint32(data[23:]))
			end = base + lastDelta + 1
			data = data[12+length:]
		}
	}
	return crcs, end, nil
}

// replicasAgree waits until every node's copy of each of the topic's
// partitions ends at the same offset, then checks that the copies hold the
// same batches, byte for byte: no replica diverged after recovery, and
// none holds a copy corrupted on its disk.
func (pc *powerCluster) replicasAgree(t *testing.T, topic string, partitions int32) {
	t.Helper()
	var counts []int
	for p := range partitions {
		partition := fmt.Sprintf("%s-%d", topic, p)
		var copies map[int32]map[int64]uint32
		poll.UntilStatus(t, 30*time.Second, "every replica of "+partition+" at the same end", func() (bool, string) {
			copies = map[int32]map[int64]uint32{}
			ends := map[int32]int64{}
			for _, id := range ids(3) {
				crcs, end, err := pc.replicaBatches(id, partition)
				if err != nil {
					return false, err.Error()
				}
				copies[id], ends[id] = crcs, end
			}
			return ends[1] == ends[2] && ends[2] == ends[3], fmt.Sprint("ends ", ends)
		})
		compared := 0
		for base, crc := range copies[1] {
			for _, id := range []int32{2, 3} {
				if other, ok := copies[id][base]; !ok || other != crc {
					t.Errorf("%s: node 1's batch at %d (checksum %08x) is not node %d's (present %v, checksum %08x)", partition, base, crc, id, ok, other)
				}
			}
			compared++
		}
		if compared == 0 || len(copies[2]) != compared || len(copies[3]) != compared {
			t.Errorf("%s: the replicas hold %d, %d and %d batches", partition, compared, len(copies[2]), len(copies[3]))
		}
		counts = append(counts, compared)
	}
	t.Logf("the replicas of each partition hold the same batches: %v", counts)
}

// powerLossAckedBeforeCut is how many more records a run has acknowledged
// before each fault (about two seconds of the workload on a quiet machine).
const powerLossAckedBeforeCut = 500

// ackedWriter reads the verify workload's progress lines for the total
// acknowledged so far, and passes each line on to next.
type ackedWriter struct {
	next  io.Writer
	acked atomic.Int64
}

var ackedTotal = regexp.MustCompile(`total: sent \d+, acked (\d+)`)

func (w *ackedWriter) Write(p []byte) (int, error) {
	if m := ackedTotal.FindSubmatch(p); m != nil {
		if n, err := strconv.ParseInt(string(m[1]), 10, 64); err == nil {
			w.acked.Store(n)
		}
	}
	return w.next.Write(p)
}

func (w *ackedWriter) total() int64 { return w.acked.Load() }

// atLeast waits until n records are acknowledged.
func (w *ackedWriter) atLeast(t *testing.T, n int64) {
	t.Helper()
	poll.UntilStatus(t, 60*time.Second, fmt.Sprintf("%d records acknowledged", n), func() (bool, string) {
		got := w.total()
		return got >= n, fmt.Sprintf("%d acknowledged", got)
	})
}
