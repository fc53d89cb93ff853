package replica

import (
	"log/slog"
	"testing"

	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// consumerView is what a consumer of p sees: the high watermark, the
// latest offset ListOffsets answers, and the bytes a fetch at from reads.
func consumerView(t *testing.T, p *Partition, epoch int32, from int64) (hw, latest int64, read int64) {
	t.Helper()
	res, err := p.Read(ReadRequest{Offset: from, CurrentLeaderEpoch: epoch, MaxBytes: 1 << 20, MinOneBatch: true})
	if err != nil {
		t.Fatalf("consumer fetch at %d: %v", from, err)
	}
	off, err := p.OffsetForTime(epoch, LatestTimestamp, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	return res.HighWatermark, off.Offset, res.Region.Len
}

// TestNewLeaderHidesUncommittedRecords elects a follower that holds records
// its old leader never committed: the new leader keeps its own high
// watermark, serves nothing past it, and commits the rest only once the
// rest of the ISR has fetched it, as Kafka's Partition.makeLeader does.
func TestNewLeaderHidesUncommittedRecords(t *testing.T) {
	a, b, c := newNode(t, 1, 1), newNode(t, 2, 1), newNode(t, 3, 1)
	all := []int32{1, 2, 3}
	if err := a.p.BecomeLeader(state(1, 1, 0, all, all)); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, all, all))
	c.p.BecomeFollower(state(1, 1, 0, all, all))
	if _, err := a.p.AppendAsLeader(batch(4, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		fetchOnce(t, a, b)
		fetchOnce(t, a, c)
	}
	fetchOnce(t, a, b)
	// Six records only b fetches: a's high watermark stays at 4, c's log
	// at 4.
	if _, err := a.p.AppendAsLeader(batch(6, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	fetchOnce(t, a, b)
	if a.p.HighWatermark() != 4 || b.p.HighWatermark() != 4 || b.log.LogEndOffset() != 10 || c.log.LogEndOffset() != 4 {
		t.Fatalf("before the election: a's high watermark %d, b's %d ending at %d, c ending at %d",
			a.p.HighWatermark(), b.p.HighWatermark(), b.log.LogEndOffset(), c.log.LogEndOffset())
	}

	// a is gone; b is elected from the ISR {2, 3}.
	bc := []int32{2, 3}
	if err := b.p.BecomeLeader(state(2, 2, 1, all, bc)); err != nil {
		t.Fatal(err)
	}
	c.p.BecomeFollower(state(2, 2, 1, all, bc))
	if hw, latest, n := consumerView(t, b.p, 2, 4); hw != 4 || latest != 4 || n != 0 {
		t.Fatalf("new leader before c fetched: high watermark %d, latest %d, %d bytes read past 4", hw, latest, n)
	}
	fetchOnce(t, b, c) // c gets 4..9; b knows c is at 4
	if hw, latest, n := consumerView(t, b.p, 2, 4); hw != 4 || latest != 4 || n != 0 {
		t.Fatalf("new leader after c's first fetch: high watermark %d, latest %d, %d bytes read past 4", hw, latest, n)
	}
	fetchOnce(t, b, c) // c at 10: the whole ISR has it
	if hw, latest, n := consumerView(t, b.p, 2, 4); hw != 10 || latest != 10 || n == 0 {
		t.Fatalf("new leader once the ISR caught up: high watermark %d, latest %d, %d bytes read past 4", hw, latest, n)
	}
}

// memNode is a broker's replica of orders-0 in a storage.Manager on a
// crashable file system, so it can be crashed and restarted.
type memNode struct {
	node
	fs *vfs.MemFS
	m  *storage.Manager
}

func openMemNode(t *testing.T, id int32, fs *vfs.MemFS) *memNode {
	t.Helper()
	return openMemNodeWith(t, id, fs, fs, Settings{MinInsyncReplicas: 1, Log: storage.DefaultConfig()})
}

// openMemNodeWith opens the node's replica in a Manager on fs, which is
// mem or wraps it, with settings s.
func openMemNodeWith(t *testing.T, id int32, mem *vfs.MemFS, fs vfs.FS, s Settings) *memNode {
	t.Helper()
	m, err := storage.OpenManager(fs, "/data", storage.ManagerOptions{Logger: slog.New(slog.DiscardHandler), Default: s.Log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	l, err := m.GetOrCreate("orders", 0, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.NodeID = id
	p, err := New("orders", 0, l, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &memNode{node: node{id: id, log: l, p: p}, fs: mem, m: m}
}

// crash flushes the log (so the records survive), then returns the node
// as it restarts after losing power: only durable files remain.
func (n *memNode) crash(t *testing.T) *memNode {
	t.Helper()
	if err := n.log.Flush(n.log.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	return n.powerLoss(t, Settings{MinInsyncReplicas: 1, Log: storage.DefaultConfig()})
}

// powerLoss returns the node as it restarts, with settings s, after
// losing power: only what was synced remains.
func (n *memNode) powerLoss(t *testing.T, s Settings) *memNode {
	t.Helper()
	crashed := n.fs.CrashClone()
	n.m.Close()
	return openMemNodeWith(t, n.id, crashed, crashed, s)
}

// TestRestartedLeaderStartsFromCheckpointedHighWatermark restarts, after a
// crash, a leader whose log holds records past its last checkpointed high
// watermark: they stay invisible until its follower has them again, where
// before the high-watermark checkpoint a restarted replica showed its
// whole log. The sole replica of a partition still shows all it recovered.
func TestRestartedLeaderStartsFromCheckpointedHighWatermark(t *testing.T) {
	a, b := openMemNode(t, 1, vfs.NewMem()), openMemNode(t, 2, vfs.NewMem())
	both := []int32{1, 2}
	if err := a.p.BecomeLeader(state(1, 1, 0, both, both)); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, both, both))
	if _, err := a.p.AppendAsLeader(batch(10, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	fetchOnce(t, &a.node, &b.node)
	fetchOnce(t, &a.node, &b.node)
	if a.p.HighWatermark() != 10 {
		t.Fatalf("high watermark %d, want 10", a.p.HighWatermark())
	}
	if err := a.m.CheckpointHighWatermarks(); err != nil {
		t.Fatal(err)
	}
	// Five more records reach b, which a does not yet know when both
	// machines lose power.
	if _, err := a.p.AppendAsLeader(batch(5, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	fetchOnce(t, &a.node, &b.node)
	a, b = a.crash(t), b.crash(t)
	if a.log.LogEndOffset() != 15 || a.p.HighWatermark() != 10 {
		t.Fatalf("restarted: log end %d, high watermark %d; want 15 and the checkpointed 10", a.log.LogEndOffset(), a.p.HighWatermark())
	}

	if err := a.p.BecomeLeader(state(1, 2, 1, both, both)); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 2, 1, both, both))
	if hw, latest, n := consumerView(t, a.p, 2, 10); hw != 10 || latest != 10 || n != 0 {
		t.Fatalf("restarted leader: high watermark %d, latest %d, %d bytes read past 10", hw, latest, n)
	}
	fetchOnce(t, &a.node, &b.node) // b reports 15
	if hw, latest, _ := consumerView(t, a.p, 2, 10); hw != 15 || latest != 15 {
		t.Fatalf("once the follower reported its log end: high watermark %d, latest %d", hw, latest)
	}

	// The sole replica: all it recovered is visible at once.
	if err := a.m.CheckpointHighWatermarks(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.p.AppendAsLeader(batch(3, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	solo := a.crash(t)
	if solo.p.HighWatermark() != 15 {
		t.Fatalf("restarted sole replica before leading: high watermark %d, want the checkpointed 15", solo.p.HighWatermark())
	}
	if err := solo.p.BecomeLeader(state(1, 3, 2, []int32{1}, []int32{1})); err != nil {
		t.Fatal(err)
	}
	if hw, latest, _ := consumerView(t, solo.p, 3, 15); hw != 18 || latest != 18 {
		t.Fatalf("restarted sole replica: high watermark %d, latest %d, want its log end 18", hw, latest)
	}
}
