package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/testutil/tcpproxy"
	"github.com/strata-io/strata/internal/verify"
)

// The fault schedule (issue 13, items 2 and 3): every fault kind runs
// against a fresh three-node cluster of strata serve processes while the
// verify workload (idempotent acks=all producers, assigned and group
// consumers, a final read) runs against it, and the checker's verdict must
// be valid. Bounded by default (each kind once, one fault each); long by
// flag:
//
//	go test ./e2e -run TestFaults -v -faults.runs 10 -faults.duration 1m
//
// runs each kind ten times, each run injecting its fault again and again
// for a minute of workload, and prints a table at the end.
var (
	faultRuns     = flag.Int("faults.runs", 1, "runs of each fault kind (TestFaults)")
	faultDuration = flag.Duration("faults.duration", 0, "how long each run injects its fault, again and again; 0: once")
	faultKinds    = flag.String("faults.kinds", "", "comma-separated fault kinds to run (TestFaults; default all)")
	faultHistory  = flag.String("faults.history", "", "a directory to write each invalid run's history to, as JSON")
)

// faultCluster is a cluster of three combined nodes whose controller
// traffic goes through a proxy per ordered pair of nodes (meshCluster),
// and whose replication traffic goes through a proxy per node: node y
// advertises its inter-broker listener at repl[y], which forwards to its
// client port, so that cutting repl[y] cuts every follower off from y
// while clients and the controller still reach it.
type faultCluster struct {
	*meshCluster
	repl map[int32]*tcpproxy.Proxy
}

func startFaultCluster(t *testing.T, sets ...string) *faultCluster {
	t.Helper()
	// A port freePort found free may be taken before the node binds it
	// (by another listener on port 0, here or in another test): then
	// start again on fresh ports.
	var f *faultCluster
	retryOnPortClash(t, func() (map[int32]*process, bool) {
		var clash bool
		f, clash = tryStartFaultCluster(t, sets...)
		return f.nodes, !clash
	})
	f.waitBrokers(ids(len(f.nodes))...)
	return f
}

// tryStartFaultCluster starts the nodes and waits until every node lists
// three brokers (clash false) or a node failed to bind a port (clash true).
func tryStartFaultCluster(t *testing.T, sets ...string) (f *faultCluster, clash bool) {
	t.Helper()
	const n = 3
	f = &faultCluster{
		meshCluster: &meshCluster{cluster: &cluster{t: t, nodes: map[int32]*process{}}, proxies: map[int32]map[int32]*tcpproxy.Proxy{}, admin: map[int32]string{}},
		repl:        map[int32]*tcpproxy.Proxy{},
	}
	t.Cleanup(func() {
		if t.Failed() {
			for id, p := range f.nodes {
				t.Logf("node %d's log:\n%s", id, p.logs)
			}
		}
	})
	client, ctrl := map[int32]string{}, map[int32]string{}
	for id := int32(1); id <= n; id++ {
		client[id], ctrl[id] = "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
		p, err := tcpproxy.Listen(client[id])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		f.repl[id] = p
	}
	for x := int32(1); x <= n; x++ {
		f.proxies[x] = map[int32]*tcpproxy.Proxy{}
		for y := int32(1); y <= n; y++ {
			if x == y {
				continue
			}
			p, err := tcpproxy.Listen(ctrl[y])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			f.proxies[x][y] = p
		}
	}
	for x := int32(1); x <= n; x++ {
		var voters []string
		for y := int32(1); y <= n; y++ {
			addr := ctrl[y]
			if x != y {
				addr = f.proxies[x][y].Addr()
			}
			voters = append(voters, fmt.Sprintf("%d@%s", y, addr))
		}
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("node-%d", x))
		p := &process{t: t, dir: dir, addr: client[x]}
		p.args = append([]string{"serve",
			"--set", "node.id=" + fmt.Sprint(x),
			"--set", "log.dirs=" + dir,
			// REPLICATION is advertised at the proxy, which forwards
			// to the client listener, for other brokers only; like
			// every listener it is also bound, on a port of its own.
			"--set", "listeners=PLAINTEXT://" + client[x] + ",CONTROLLER://" + ctrl[x] + ",REPLICATION://127.0.0.1:0",
			"--set", "advertised.listeners=PLAINTEXT://" + client[x] + ",REPLICATION://" + f.repl[x].Addr(),
			"--set", "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
			"--set", "inter.broker.listener.name=REPLICATION",
			"--set", "controller.quorum.voters=" + strings.Join(voters, ","),
			"--set", "strata.admin.listener=",
		}, flagsFor(sets)...)
		// Not start, which waits for the port: a node that lost a port
		// to a clash exits, and the loop below starts again.
		p.launch("")
		t.Cleanup(p.kill)
		f.nodes[x] = p
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range f.nodes {
			if portClash(p) {
				return f, true
			}
		}
		if ok, _ := f.brokersListed(ids(n)...); ok {
			return f, false
		}
		<-time.After(100 * time.Millisecond)
	}
	return f, false // waitBrokers fails, with what it sees
}

// brokersListed reports whether every node in want lists exactly want.
func (f *faultCluster) brokersListed(want ...int32) (bool, string) {
	for _, id := range want {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m, err := f.cluster.admin(id).BrokerMetadata(ctx)
		cancel()
		if err != nil {
			return false, err.Error()
		}
		got := m.Brokers.NodeIDs()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return false, fmt.Sprintf("node %d lists %v", id, got)
		}
	}
	return true, ""
}

// alive returns the nodes whose process runs and is not stopped.
func (f *faultCluster) alive(except ...int32) []int32 {
	var out []int32
	for _, id := range ids(len(f.nodes)) {
		p := f.nodes[id]
		if p.cmd != nil && p.cmd.ProcessState == nil && !slices.Contains(except, id) {
			out = append(out, id)
		}
	}
	return out
}

// leader returns partition 0's leader as the highest leader epoch among the
// running nodes' metadata says; -1 when none knows one.
func (f *faultCluster) leader(topic string) int32 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	leader, epoch := int32(-1), int32(-1)
	for _, id := range f.alive() {
		m, err := f.cluster.admin(id).Metadata(ctx, topic)
		if err != nil {
			continue
		}
		if p, ok := m.Topics[topic].Partitions[0]; ok && p.LeaderEpoch > epoch && p.Err == nil {
			leader, epoch = p.Leader, p.LeaderEpoch
		}
	}
	return leader
}

// healthy waits until every node runs, is registered and unfenced, and
// the topic's partitions all have leaders.
func (f *faultCluster) healthy(topic string) {
	f.t.Helper()
	f.waitBrokers(ids(len(f.nodes))...)
	poll.UntilStatus(f.t, 60*time.Second, "every partition led", func() (bool, string) {
		for _, l := range f.leaders(1, topic) {
			if l < 0 {
				return false, fmt.Sprint(f.leaders(1, topic))
			}
		}
		return len(f.leaders(1, topic)) > 0, "no partitions"
	})
}

func (f *faultCluster) signal(id int32, sig syscall.Signal) {
	if err := f.nodes[id].cmd.Process.Signal(sig); err != nil {
		f.t.Fatalf("signal %v to node %d: %v", sig, id, err)
	}
}

// timeline is a run's faults, as offsets from the run's start.
type timeline struct {
	start  time.Time
	mu     sync.Mutex
	events []string
}

func (tl *timeline) add(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, fmt.Sprintf("%8.3fs  %s", time.Since(tl.start).Seconds(), fmt.Sprintf(format, args...)))
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.events, "\n")
}

// faultKind injects one fault and undoes it; inject returns once the
// cluster is back to three healthy nodes.
type faultKind struct {
	name   string
	inject func(f *faultCluster, tl *timeline, topic string)
}

// sessionTimeout is the fault cluster's broker.session.timeout.ms.
const sessionTimeout = 3 * time.Second

var faultKinds_ = []faultKind{
	{"kill-leader", func(f *faultCluster, tl *timeline, topic string) {
		l := f.leader(topic)
		tl.add("SIGKILL node %d, leader of partition 0", l)
		f.nodes[l].kill()
		hold(sessionTimeout + time.Second)
		tl.add("restart node %d", l)
		f.nodes[l].restart()
	}},
	{"kill-controller", func(f *faultCluster, tl *timeline, topic string) {
		c := f.controller(f.alive()[0])
		tl.add("SIGKILL node %d, the active controller", c)
		f.nodes[c].kill()
		hold(sessionTimeout + time.Second)
		tl.add("restart node %d", c)
		f.nodes[c].restart()
	}},
	{"pause-leader", func(f *faultCluster, tl *timeline, topic string) {
		l := f.leader(topic)
		tl.add("SIGSTOP node %d, leader of partition 0, for %v (session timeout %v)", l, sessionTimeout+2*time.Second, sessionTimeout)
		f.signal(l, syscall.SIGSTOP)
		hold(sessionTimeout + 2*time.Second)
		tl.add("SIGCONT node %d (partition 0 now led by %d)", l, f.leaderExcept(topic, l))
		f.signal(l, syscall.SIGCONT)
	}},
	{"partition-leader", func(f *faultCluster, tl *timeline, topic string) {
		l := f.leader(topic)
		tl.add("cut node %d, leader of partition 0, off from its followers (their fetches from it fail); the controller still reaches it", l)
		f.repl[l].Cut()
		// Past replica.lag.time.max.ms and the leader's next ISR check:
		// the ISR shrinks to the leader alone, which then refuses
		// acks=all (min.insync.replicas=2).
		hold(7 * time.Second)
		tl.add("heal (partition 0 led by %d)", f.leader(topic))
		f.repl[l].Heal()
	}},
	{"partition-controller", func(f *faultCluster, tl *timeline, topic string) {
		c := f.controller(f.alive()[0])
		tl.add("cut node %d, the active controller, off from the other voters (Raft and controller requests)", c)
		f.isolate(c)
		hold(sessionTimeout + 2*time.Second)
		tl.add("heal (active controller %d)", f.controller(f.alive(c)[0]))
		f.heal()
	}},
	{"rolling-restart", func(f *faultCluster, tl *timeline, topic string) {
		for _, id := range ids(len(f.nodes)) {
			tl.add("SIGTERM node %d", id)
			f.nodes[id].stop()
			tl.add("node %d stopped; restart", id)
			f.nodes[id].restart()
			f.healthy(topic)
			tl.add("node %d back", id)
		}
	}},
	{"kill-all", func(f *faultCluster, tl *timeline, topic string) {
		tl.add("SIGKILL every node at once")
		var wg sync.WaitGroup
		for _, id := range ids(len(f.nodes)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.nodes[id].kill()
			}()
		}
		wg.Wait()
		hold(time.Second)
		tl.add("restart every node")
		for _, id := range ids(len(f.nodes)) {
			f.nodes[id].restart()
		}
	}},
}

// hold waits out a fault's duration: the fault itself is the point, there
// is no condition to poll.
func hold(d time.Duration) { <-time.After(d) }

// leaderExcept waits up to 10 s for partition 0 to be led by a node other
// than old, and returns it (or what it is then).
func (f *faultCluster) leaderExcept(topic string, old int32) int32 {
	var l int32 = -1
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l = leaderOf(f, topic, old)
		if l >= 0 && l != old {
			return l
		}
		<-time.After(100 * time.Millisecond)
	}
	return l
}

func leaderOf(f *faultCluster, topic string, except int32) int32 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, id := range f.alive(except) {
		m, err := f.cluster.admin(id).Metadata(ctx, topic)
		if err == nil {
			if p, ok := m.Topics[topic].Partitions[0]; ok {
				return p.Leader
			}
		}
	}
	return -1
}

// readyWriter takes the workload's progress lines and closes ready at the
// first that contains match.
type readyWriter struct {
	match string
	once  sync.Once
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.match)) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

// faultRun is one run's outcome, for the table.
type faultRun struct {
	kind       string
	injections int
	res        *verify.Result
}

// TestFaults runs the schedule. Any anomaly, or a run that acknowledged
// nothing, fails it.
func TestFaults(t *testing.T) {
	var kinds []faultKind
	for _, k := range faultKinds_ {
		if *faultKinds == "" || slices.Contains(strings.Split(*faultKinds, ","), k.name) {
			kinds = append(kinds, k)
		}
	}
	var mu sync.Mutex
	var runs []faultRun
	for _, k := range kinds {
		for run := range *faultRuns {
			t.Run(fmt.Sprintf("%s/%d", k.name, run), func(t *testing.T) {
				r := runFault(t, k)
				mu.Lock()
				runs = append(runs, r)
				mu.Unlock()
			})
		}
	}
	t.Logf("fault schedule: %d runs per kind, -faults.duration %v\n%s", *faultRuns, *faultDuration, faultTable(runs))
}

func runFault(t *testing.T, k faultKind) faultRun {
	f := startFaultCluster(t,
		"broker.session.timeout.ms="+fmt.Sprint(sessionTimeout.Milliseconds()), "broker.heartbeat.interval.ms=500",
		"replica.lag.time.max.ms=3000", "controller.quorum.election.timeout.ms=1000",
		"group.initial.rebalance.delay.ms=0")
	topic := "faults-" + k.name
	var seeds []string
	for _, id := range ids(3) {
		seeds = append(seeds, f.nodes[id].addr)
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
	// The workload says when its topic is created and led, and it
	// starts producing.
	select {
	case <-ready.ready:
	case o := <-done:
		t.Fatalf("the workload ended before it started: %v", o.err)
	case <-time.After(60 * time.Second):
		t.Fatal("the workload did not start within 60s")
	}
	tl.add("workload running on %s", topic)
	hold(2 * time.Second)
	injections := 0
	end := time.Now().Add(*faultDuration)
	for {
		k.inject(f, tl, topic)
		f.healthy(topic)
		injections++
		tl.add("cluster healthy again")
		hold(time.Second)
		if time.Now().After(end) {
			break
		}
	}
	tl.add("stop producing; drain and final read")
	stop()
	o := <-done
	tl.add("workload done")
	if o.err != nil {
		t.Fatalf("workload: %v\nfault timeline:\n%s", o.err, tl)
	}
	var report bytes.Buffer
	o.res.WriteText(&report)
	t.Logf("%s: fault timeline:\n%s\n\nverdict:\n%s", k.name, tl, report.String())
	if !o.res.Valid || o.res.Stats.Acknowledged == 0 {
		if *faultHistory != "" {
			path := filepath.Join(*faultHistory, fmt.Sprintf("%s-%d.json", k.name, time.Now().UnixNano()))
			if b, err := json.Marshal(o.h); err == nil && os.WriteFile(path, b, 0o644) == nil {
				t.Logf("history written to %s", path)
			}
		}
		t.Errorf("%s: %s (%d acknowledged)", k.name, o.res.Summary(), o.res.Stats.Acknowledged)
	}
	return faultRun{kind: k.name, injections: injections, res: o.res}
}

// faultTable is the long mode's summary: per kind, the runs, the
// anomalies found and the longest acknowledgement gap's median and
// maximum over the runs.
func faultTable(runs []faultRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-21s %4s %10s %4s %4s %12s %5s  %-21s %-21s\n", "FAULT", "RUNS", "INJECTIONS", "LOST", "DUPS", "INCONSISTENT", "OTHER",
		"ACK-GAP P50/MAX", "PARTITION-GAP P50/MAX")
	var kinds []string
	by := map[string][]faultRun{}
	for _, r := range runs {
		if _, ok := by[r.kind]; !ok {
			kinds = append(kinds, r.kind)
		}
		by[r.kind] = append(by[r.kind], r)
	}
	p50max := func(v []float64) string {
		if len(v) == 0 {
			return "-"
		}
		slices.Sort(v)
		return fmt.Sprintf("%.0f/%.0f ms", v[len(v)/2], v[len(v)-1])
	}
	for _, k := range kinds {
		var inj, lost, dups, incons, other int
		var gaps, partGaps []float64
		for _, r := range by[k] {
			inj += r.injections
			if r.res == nil {
				continue
			}
			lost += r.res.Count(verify.LostWrite)
			dups += r.res.Count(verify.Duplicate)
			incons += r.res.Count(verify.InconsistentOffset)
			other += r.res.Total() - r.res.Count(verify.LostWrite) - r.res.Count(verify.Duplicate) - r.res.Count(verify.InconsistentOffset)
			gaps = append(gaps, r.res.Stats.LongestAckGapMillis)
			partGaps = append(partGaps, r.res.Stats.LongestPartitionAckGapMillis)
		}
		fmt.Fprintf(&b, "%-21s %4d %10d %4d %4d %12d %5d  %-21s %-21s\n", k, len(by[k]), inj, lost, dups, incons, other, p50max(gaps), p50max(partGaps))
	}
	return b.String()
}
