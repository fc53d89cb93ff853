package quorum

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/vfs"
)

var (
	seeds    = flag.Int("quorum.seeds", 3, "seeds of TestSimulation to run (long mode: many)")
	simSteps = flag.Int("quorum.steps", 12, "fault steps per seed of TestSimulation")
)

func quiet() *slog.Logger {
	if os.Getenv("STRATA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// faultNet sits between the voters' dialers and real loopback TCP: it can
// cut any pair of nodes apart (refusing dials and closing their
// connections) and delays writes by a few milliseconds at random.
type faultNet struct {
	mu    sync.Mutex
	cut   map[[2]int32]bool
	conns map[[2]int32][]net.Conn
	rng   *rand.Rand
}

func newFaultNet(seed uint64) *faultNet {
	return &faultNet{cut: map[[2]int32]bool{}, conns: map[[2]int32][]net.Conn{}, rng: rand.New(rand.NewPCG(seed, 7))}
}

func pair(a, b int32) [2]int32 {
	if a > b {
		a, b = b, a
	}
	return [2]int32{a, b}
}

func (f *faultNet) dialer(from int32, ids map[string]int32) func(network, addr string, timeout time.Duration) (net.Conn, error) {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		to := ids[addr]
		f.mu.Lock()
		cut := f.cut[pair(from, to)]
		f.mu.Unlock()
		if cut {
			return nil, errors.New("faultnet: partitioned")
		}
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.cut[pair(from, to)] {
			c.Close()
			return nil, errors.New("faultnet: partitioned")
		}
		f.conns[pair(from, to)] = append(f.conns[pair(from, to)], c)
		return &slowConn{Conn: c, delay: time.Duration(f.rng.IntN(3)) * time.Millisecond}, nil
	}
}

// partition cuts a from b.
func (f *faultNet) partition(a, b int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut[pair(a, b)] = true
	for _, c := range f.conns[pair(a, b)] {
		c.Close()
	}
	delete(f.conns, pair(a, b))
}

func (f *faultNet) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = map[[2]int32]bool{}
}

// cuts returns the pairs cut now; restore puts them back.
func (f *faultNet) cuts() map[[2]int32]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.cut)
}

func (f *faultNet) restore(cut map[[2]int32]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = cut
}

type slowConn struct {
	net.Conn
	delay time.Duration
}

func (c *slowConn) Write(p []byte) (int, error) {
	if c.delay > 0 {
		time.Sleep(c.delay) // network latency, not a wait for a condition
	}
	return c.Conn.Write(p)
}

// simNode is one voter and a state machine of strings: every entry's data
// applied in order, and snapshots that hold the whole list.
type simNode struct {
	id   int32
	fs   *vfs.MemFS
	logs *storage.Manager
	node *Node
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	applied []string // data of applied entries, in order
	index   uint64   // index of the last applied entry
}

type simCluster struct {
	t       *testing.T
	net     *faultNet
	voters  map[int32]string
	ids     map[string]int32
	ln      map[int32]net.Listener
	nodes   map[int32]*simNode
	nodesMu sync.Mutex

	leadersMu sync.Mutex
	leaders   map[uint64]int32 // term → leader, as any node saw it
	errs      []string
}

func newSimCluster(t *testing.T, n int, seed uint64) *simCluster {
	c := &simCluster{t: t, net: newFaultNet(seed), voters: map[int32]string{}, ids: map[string]int32{},
		ln: map[int32]net.Listener{}, nodes: map[int32]*simNode{}, leaders: map[uint64]int32{}}
	for i := 1; i <= n; i++ {
		id := int32(i)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.ln[id] = ln
		c.voters[id] = ln.Addr().String()
		c.ids[ln.Addr().String()] = id
		go c.accept(id, ln)
	}
	for id := range c.voters {
		c.start(id, vfs.NewMem())
	}
	t.Cleanup(func() {
		for id := range c.voters {
			c.stopNode(id)
			c.ln[id].Close()
		}
	})
	return c
}

// accept hands a listener's Raft connections to whichever node runs now.
func (c *simCluster) accept(id int32, ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			r := bufio.NewReader(conn)
			var magic [8]byte
			if _, err := io.ReadFull(r, magic[:]); err != nil || magic != Magic {
				conn.Close()
				return
			}
			c.nodesMu.Lock()
			sn := c.nodes[id]
			c.nodesMu.Unlock()
			if sn == nil {
				conn.Close()
				return
			}
			sn.node.ServeConn(conn, r)
		}()
	}
}

func (c *simCluster) start(id int32, fs *vfs.MemFS) {
	t := c.t
	logs, err := storage.OpenManager(fs, "/data", storage.ManagerOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	wal, err := logs.GetOrCreate("__cluster_metadata", 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	node, err := Open(Config{
		NodeID: id, Voters: c.voters, WAL: wal, FS: fs,
		TickInterval: 10 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		SnapshotKeep: 5, Logger: quiet().With("node", id), Dial: c.net.dialer(id, c.ids),
	})
	if err != nil {
		t.Fatal(err)
	}
	sn := &simNode{id: id, fs: fs, logs: logs, node: node, stop: make(chan struct{}), done: make(chan struct{})}
	snap, _ := node.Loaded()
	sn.loadSnapshot(t, snap)
	node.Start()
	go c.applyLoop(sn)
	c.nodesMu.Lock()
	c.nodes[id] = sn
	c.nodesMu.Unlock()
}

func (sn *simNode) loadSnapshot(t *testing.T, s Snapshot) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	sn.applied, sn.index = nil, s.Index
	if len(s.Data) > 0 {
		if err := json.Unmarshal(s.Data, &sn.applied); err != nil {
			t.Errorf("node %d: snapshot at %d: %v", sn.id, s.Index, err)
		}
	}
}

func (c *simCluster) applyLoop(sn *simNode) {
	defer close(sn.done)
	for {
		select {
		case <-sn.stop:
			return
		case a := <-sn.node.Apply():
			if a.Leader >= 0 {
				c.leadersMu.Lock()
				if l, ok := c.leaders[a.Term]; ok && l != a.Leader {
					c.errs = append(c.errs, fmt.Sprintf("term %d has two leaders: %d and %d", a.Term, l, a.Leader))
				}
				c.leaders[a.Term] = a.Leader
				c.leadersMu.Unlock()
			}
			if a.Snapshot != nil {
				sn.loadSnapshot(c.t, *a.Snapshot)
			}
			sn.mu.Lock()
			for _, e := range a.Entries {
				if e.Index != sn.index+1 {
					c.leadersMu.Lock()
					c.errs = append(c.errs, fmt.Sprintf("node %d applied entry %d after %d", sn.id, e.Index, sn.index))
					c.leadersMu.Unlock()
				}
				sn.index = e.Index
				if len(e.Data) > 0 {
					sn.applied = append(sn.applied, string(e.Data))
				}
			}
			// Snapshot now and then, so that compaction and snapshot
			// installation run.
			if len(a.Entries) > 0 && sn.index%7 == 0 {
				data, _ := json.Marshal(sn.applied)
				sn.node.Snapshot(Snapshot{Index: sn.index, Data: data})
			}
			sn.mu.Unlock()
		}
	}
}

// stopNode closes a node cleanly.
func (c *simCluster) stopNode(id int32) {
	c.nodesMu.Lock()
	sn := c.nodes[id]
	delete(c.nodes, id)
	c.nodesMu.Unlock()
	if sn == nil {
		return
	}
	close(sn.stop)
	<-sn.done
	sn.node.Close()
	sn.logs.Close()
}

// crash takes what a power loss would leave of a node's disk (only synced
// data), stops the node, and starts it again on that. The node is cut off
// first, so that nothing it says after the instant of the crash reaches
// anyone: a real crash stops everything at once.
func (c *simCluster) crash(id int32) {
	c.nodesMu.Lock()
	sn := c.nodes[id]
	c.nodesMu.Unlock()
	cut := c.net.cuts()
	for o := range c.voters {
		if o != id {
			c.net.partition(id, o)
		}
	}
	survived := sn.fs.CrashClone()
	c.stopNode(id)
	c.start(id, survived)
	c.net.restore(cut)
}

func (c *simCluster) restart(id int32) {
	c.nodesMu.Lock()
	fs := c.nodes[id].fs
	c.nodesMu.Unlock()
	c.stopNode(id)
	c.start(id, fs)
}

// leader returns a running node that leads, or nil.
func (c *simCluster) leader() *simNode {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	for _, sn := range c.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := sn.node.Status(ctx)
		cancel()
		if err == nil && st.Leader == sn.id {
			return sn
		}
	}
	return nil
}

// propose proposes value to the current leader and reports whether it was
// applied there within a second: an acknowledged write.
func (c *simCluster) propose(value string) bool {
	sn := c.leader()
	if sn == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := sn.node.Propose(ctx, []byte(value)); err != nil {
		return false
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		sn.mu.Lock()
		ok := slices.Contains(sn.applied, value)
		sn.mu.Unlock()
		if ok {
			return true
		}
		time.Sleep(2 * time.Millisecond) // polling the state machine
	}
	return false
}

// TestSimulation runs a three-voter quorum over real loopback TCP through
// a fault layer, with a seeded schedule of partitions, isolations, clean
// restarts and power-loss crashes (only synced data survives) while a
// client proposes. After healing: at most one leader per term, every
// acknowledged entry is applied exactly once on every node, and every node
// applied the same entries in the same order.
func TestSimulation(t *testing.T) {
	for seed := range uint64(*seeds) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { simulate(t, seed) })
	}
}

func simulate(t *testing.T, seed uint64) {
	c := newSimCluster(t, 3, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var acked []string
	stopProposing := make(chan struct{})
	proposerDone := make(chan struct{})
	go func() {
		defer close(proposerDone)
		for i := 0; ; i++ {
			select {
			case <-stopProposing:
				return
			default:
			}
			v := fmt.Sprintf("v%d", i)
			if c.propose(v) {
				acked = append(acked, v)
			}
		}
	}()
	var timeline []string
	for step := 0; step < *simSteps; step++ {
		id := int32(rng.IntN(3) + 1)
		switch k := rng.IntN(5); k {
		case 0:
			other := id%3 + 1
			c.net.partition(id, other)
			timeline = append(timeline, fmt.Sprintf("cut %d-%d", id, other))
		case 1:
			for o := int32(1); o <= 3; o++ {
				if o != id {
					c.net.partition(id, o)
				}
			}
			timeline = append(timeline, fmt.Sprintf("isolate %d", id))
		case 2:
			c.restart(id)
			timeline = append(timeline, fmt.Sprintf("restart %d", id))
		case 3:
			c.crash(id)
			timeline = append(timeline, fmt.Sprintf("crash %d", id))
		case 4:
			c.net.heal()
			timeline = append(timeline, "heal")
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond) // let the fault act
	}
	c.net.heal()
	timeline = append(timeline, "heal")
	// A few writes after healing, so that every node has something to
	// catch up on.
	poll.Until(t, 30*time.Second, "a write after healing", func() bool { return c.propose("final") })
	close(stopProposing)
	<-proposerDone
	acked = append(acked, "final")

	// Every node converges on the same entries.
	poll.Until(t, 30*time.Second, "the nodes to converge", func() bool {
		var ref []string
		for id := int32(1); id <= 3; id++ {
			c.nodesMu.Lock()
			sn := c.nodes[id]
			c.nodesMu.Unlock()
			sn.mu.Lock()
			got := slices.Clone(sn.applied)
			sn.mu.Unlock()
			if id == 1 {
				ref = got
			} else if !slices.Equal(ref, got) {
				return false
			}
		}
		return slices.Contains(ref, "final")
	})
	c.nodesMu.Lock()
	final := slices.Clone(c.nodes[1].applied)
	c.nodesMu.Unlock()
	count := map[string]int{}
	for _, v := range final {
		count[v]++
	}
	for _, v := range acked {
		if count[v] != 1 {
			t.Errorf("acknowledged %s applied %d times", v, count[v])
		}
	}
	for v, n := range count {
		if n > 1 {
			t.Errorf("%s applied %d times", v, n)
		}
	}
	c.leadersMu.Lock()
	for _, e := range c.errs {
		t.Error(e)
	}
	c.leadersMu.Unlock()
	t.Logf("seed %d: %d acknowledged, %d applied; faults: %v", seed, len(acked), len(final), timeline)
}

// TestRestartReadsLargeEntries restarts a single voter whose log holds
// entries larger than one read of the log: each must come back whole (a
// decoded entry once aliased a read buffer the next read reused, and
// entries past the first read came back as garbage).
func TestRestartReadsLargeEntries(t *testing.T) {
	fs := vfs.NewMem()
	open := func() (*storage.Manager, *Node) {
		logs, err := storage.OpenManager(fs, "/data", storage.ManagerOptions{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		wal, err := logs.GetOrCreate("__cluster_metadata", 0, storage.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		n, err := Open(Config{NodeID: 1, Voters: map[int32]string{1: ""}, WAL: wal, FS: fs, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		n.Start()
		return logs, n
	}
	value := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 300<<10) }
	logs, n := open()
	ctx := context.Background()
	applied := 0
	for i := range 10 {
		if err := n.Propose(ctx, value(i)); err != nil {
			t.Fatal(err)
		}
		for applied <= i {
			a := <-n.Apply()
			for _, e := range a.Entries {
				if len(e.Data) > 0 {
					applied++
				}
			}
		}
	}
	n.Close()
	logs.Close()

	logs, n = open()
	defer logs.Close()
	defer n.Close()
	var got [][]byte
	for len(got) < 10 {
		select {
		case a := <-n.Apply():
			for _, e := range a.Entries {
				if len(e.Data) > 0 {
					got = append(got, e.Data)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 10 entries replayed", len(got))
		}
	}
	for i, d := range got {
		if !bytes.Equal(d, value(i)) {
			t.Fatalf("entry %d came back changed (%d bytes, starts %q)", i, len(d), d[:min(8, len(d))])
		}
	}
}
