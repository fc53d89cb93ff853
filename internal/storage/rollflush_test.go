package storage

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/vfs"
)

// batchesBelow returns the batches of l whose base offset is below end.
func batchesBelow(t *testing.T, l *Log, end int64) [][]byte {
	t.Helper()
	var out [][]byte
	for _, b := range readAllBatches(t, l) {
		h, err := record.ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.BaseOffset < end {
			out = append(out, b)
		}
	}
	return out
}

// sameSize fails unless path has the same size in both file systems: a
// file the crash kept whole.
func sameSize(t *testing.T, before, after vfs.FS, path string) {
	t.Helper()
	want, err := before.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := after.Stat(path)
	if err != nil {
		t.Fatalf("after the crash: %v", err)
	}
	if got.Size() != want.Size() {
		t.Fatalf("%s: %d bytes after the crash, %d before", filepath.Base(path), got.Size(), want.Size())
	}
}

// TestFlushRolledSurvivesPowerLoss: FlushRolled makes every segment before
// the active one durable (log, .index, .timeindex, .txnindex, directory
// entries) and moves the recovery point to the active segment, which it
// leaves unsynced. After a power loss (only synced bytes and directory
// entries survive, and with torn tails a random prefix of the rest),
// nothing below the recovery point is lost, and recovery opened at it
// checks the active segment only.
func TestFlushRolledSurvivesPowerLoss(t *testing.T) {
	dir := "/data/roll-0"
	fs := newMem(t, dir)
	cfg := testConfig()
	l := openTestLog(t, fs, dir, cfg, LogOptions{})
	fillSegments(t, l, 4)
	bases := l.SegmentBaseOffsets()
	aborted := AbortedTxn{ProducerID: 1, FirstOffset: bases[1], LastOffset: bases[1] + 4, LastStableOffset: bases[1] + 5}
	if err := l.TxnIndex().Append(aborted); err != nil {
		t.Fatal(err)
	}
	active := bases[len(bases)-1]
	if err := l.FlushRolled(); err != nil {
		t.Fatal(err)
	}
	rp := l.RecoveryPoint()
	if rp != active {
		t.Fatalf("recovery point %d after FlushRolled, want the active segment's base offset %d", rp, active)
	}
	// More in the active segment, never synced.
	for l.LogEndOffset() < active+10 {
		mustAppend(t, l, makeBatch(t, spec{records: 5, valueSize: 10}), leader(0))
	}
	if l.NumSegments() != len(bases) {
		t.Fatal("the test's appends rolled")
	}
	want := batchesBelow(t, l, rp)

	check := func(name string, crashed *vfs.MemFS, torn bool) {
		t.Run(name, func(t *testing.T) {
			for _, base := range bases[:len(bases)-1] {
				s := segmentName(base)
				for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
					sameSize(t, fs, crashed, filepath.Join(dir, s+suffix))
				}
			}
			sameSize(t, fs, crashed, l.txns.path(bases[1]))
			r := openTestLog(t, crashed, dir, cfg, LogOptions{RecoveryPoint: rp})
			defer r.Close()
			if got := r.recovery.recoveredFrom; got != active {
				t.Errorf("recovery started at segment %d, want the active one, %d", got, active)
			}
			// A torn tail of the active segment is what tearing makes;
			// anything else is corruption below the recovery point.
			st := r.recovery
			if st.segmentsScanned > 1 || st.corruptIndex || st.lostSegments || st.unreadableActive || !torn && st.tornTail {
				t.Errorf("recovery scanned %d segments, found corruption %v", st.segmentsScanned, st.causes())
			}
			if !torn && r.LogEndOffset() != active {
				t.Errorf("log end %d: the active segment's unsynced appends survived (FlushRolled synced it?), want %d",
					r.LogEndOffset(), active)
			}
			if r.LogEndOffset() < rp {
				t.Fatalf("log end %d below the recovery point %d", r.LogEndOffset(), rp)
			}
			if got := batchesBelow(t, r, rp); !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("%d batches below the recovery point after the crash, want %d identical ones", len(got), len(want))
			}
			if got := r.TxnIndex().Aborted(0, r.LogEndOffset()); !slices.Equal(got, []AbortedTxn{aborted}) {
				t.Fatalf("aborted transactions %+v, want %+v", got, aborted)
			}
			if got := r.TxnIndex().SuspectFrom(); got != active {
				t.Errorf("TxnIndexSuspectFrom = %d, want %d", got, active)
			}
		})
	}
	check("power loss", fs.CrashClone(), false)
	for seed := range uint64(5) {
		check(fmt.Sprintf("torn tails, seed %d", seed), fs.CrashCloneTorn(rand.New(rand.NewPCG(seed, 1))), true)
	}
	l.Close()
}

// TestManagerFlushesRollsAndCheckpoints: under a started Manager a roll
// gets its segments flushed in the background and the recovery point
// checkpointed every CheckpointInterval, so that after a power loss the
// Manager recovers from the checkpointed point (as its log line says),
// not from the log start, and keeps everything below it.
func TestManagerFlushesRollsAndCheckpoints(t *testing.T) {
	dir := "/data"
	fs := newMem(t, dir)
	cfg := testConfig()
	m, err := OpenManager(fs, dir, ManagerOptions{Logger: quietLogger(), Default: cfg, CheckpointInterval: 5 * time.Millisecond,
		DisableCleaner: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	defer m.Close()
	l, err := m.GetOrCreate("orders", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fillSegments(t, l, 5)
	active := l.SegmentBaseOffsets()[4]
	mustAppend(t, l, makeBatch(t, spec{records: 5, valueSize: 10}), leader(0))

	// What a power loss now keeps of the checkpoint: poll until it names
	// the active segment.
	tp := TopicPartition{"orders", 0}
	var crashed *vfs.MemFS
	poll.UntilStatus(t, 20*time.Second, "the durable recovery-point checkpoint to name the active segment", func() (bool, string) {
		crashed = fs.CrashClone()
		cp, _ := ReadOffsetCheckpoint(crashed, filepath.Join(dir, RecoveryPointCheckpointFile))
		return cp[tp] == active, fmt.Sprintf("checkpoint %v (log's recovery point %d), want %d", cp[tp], l.RecoveryPoint(), active)
	})
	want := batchesBelow(t, l, active)

	var logs syncBuffer
	r, err := OpenManager(crashed, dir, ManagerOptions{Default: cfg, DisableCleaner: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rl, _ := r.Log("orders", 0)
	if got := batchesBelow(t, rl, active); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("%d batches below the checkpointed recovery point after the crash, want %d identical ones", len(got), len(want))
	}
	line := ""
	for _, s := range strings.Split(logs.String(), "\n") {
		if strings.Contains(s, "topic=orders") && strings.Contains(s, "recovery_point=") {
			line = s
		}
	}
	if wantAttr := fmt.Sprintf("recovery_point=%d recovered_from_segment=%d", active, active); !strings.Contains(line, wantAttr) {
		t.Fatalf("recovery's log line %q does not say %q", line, wantAttr)
	}
}

// syncBuffer is a bytes.Buffer for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// gatedFS holds the Sync of every .log file while its gate is closed, and
// says when one is waiting.
type gatedFS struct {
	vfs.FS
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	waiting chan string
}

// startGated starts a Manager over a gatedFS with its gate closed and
// opens orders-0 in it; release opens the gate (once, whoever calls it).
func startGated(t *testing.T) (m *Manager, l *Log, gfs *gatedFS, release func()) {
	t.Helper()
	dir := "/data"
	gfs = &gatedFS{FS: newMem(t, dir), waiting: make(chan string, 1)}
	cfg := testConfig()
	m, err := OpenManager(gfs, dir, ManagerOptions{Logger: quietLogger(), Default: cfg, DisableCleaner: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	l, err = m.GetOrCreate("orders", 0, cfg)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	gate := make(chan struct{})
	gfs.mu.Lock()
	gfs.gate = gate
	gfs.mu.Unlock()
	release = sync.OnceFunc(func() {
		gfs.mu.Lock()
		gfs.gate = nil
		gfs.mu.Unlock()
		close(gate)
	})
	return m, l, gfs, release
}

func (g *gatedFS) wrap(f vfs.File, err error, name string) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, logSuffix) {
		return f, err
	}
	return gatedFile{f, g, name}, nil
}

func (g *gatedFS) Create(name string) (vfs.File, error) {
	f, err := g.FS.Create(name)
	return g.wrap(f, err, name)
}

func (g *gatedFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := g.FS.OpenReadWrite(name)
	return g.wrap(f, err, name)
}

type gatedFile struct {
	vfs.File
	fs   *gatedFS
	name string
}

func (f gatedFile) Sync() error {
	f.fs.mu.Lock()
	gate := f.fs.gate
	f.fs.mu.Unlock()
	if gate != nil {
		select {
		case f.fs.waiting <- f.name:
		default:
		}
		<-gate
	}
	return f.File.Sync()
}

// TestRollDoesNotWaitForFsync: appends that roll return while the roll
// flusher's fsync of the rolled segment is held, and the recovery point
// reaches the active segment once it is released.
func TestRollDoesNotWaitForFsync(t *testing.T) {
	m, l, gfs, release := startGated(t)
	defer m.Close()
	defer release() // before m.Close, which syncs
	fillSegments(t, l, 2)
	select {
	case name := <-gfs.waiting:
		if !strings.HasSuffix(name, segmentName(0)+logSuffix) {
			t.Fatalf("the flusher syncs %s first, want the rolled segment 0", name)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no fsync of the rolled segment started")
	}
	// The flusher is blocked in the fsync; appends and rolls go on.
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		for l.NumSegments() < 4 {
			if _, err := l.Append(makeBatch(t, spec{records: 5, valueSize: 100}), leader(0)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-appended:
	case <-time.After(20 * time.Second):
		t.Fatal("appends that roll waited for the flusher's fsync")
	}
	if rp := l.RecoveryPoint(); rp != 0 {
		t.Fatalf("recovery point %d while the fsync is held", rp)
	}
	release()
	active := l.SegmentBaseOffsets()[3]
	poll.UntilStatus(t, 20*time.Second, "the recovery point to reach the active segment", func() (bool, string) {
		return l.RecoveryPoint() == active, fmt.Sprintf("recovery point %d, want %d", l.RecoveryPoint(), active)
	})
}

// TestWriteRollSnapshotSyncedByFlush: a roll's snapshot is written without
// an fsync; a power loss before the next flush may lose it, and after the
// flush (the roll flusher's, which WriteRollSnapshot queues even when the
// recovery point is there already) it survives, content and directory
// entry.
func TestWriteRollSnapshotSyncedByFlush(t *testing.T) {
	dir := "/data"
	fs := newMem(t, dir)
	cfg := testConfig()
	m, err := OpenManager(fs, dir, ManagerOptions{Logger: quietLogger(), Default: cfg, DisableCleaner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.GetOrCreate("orders", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fillSegments(t, l, 3)
	active := l.SegmentBaseOffsets()[2]
	data := []byte("a producer snapshot's bytes")
	if err := l.Snapshots().WriteRoll(active, data); err != nil {
		t.Fatal(err)
	}
	path := snapshotPath(l.Dir(), active)
	if got, err := vfs.ReadFile(fs, path); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %q, %v", got, err)
	}
	if got, err := vfs.ReadFile(fs.CrashClone(), path); err == nil && bytes.Equal(got, data) {
		t.Fatal("the snapshot survived a power loss before any flush: was it synced on the caller's path?")
	}
	// The roll flusher runs once started: the rolls and the snapshot were
	// queued.
	m.Start()
	var crashed *vfs.MemFS
	poll.UntilStatus(t, 20*time.Second, "the snapshot to be durable", func() (bool, string) {
		crashed = fs.CrashClone()
		got, err := vfs.ReadFile(crashed, path)
		return err == nil && bytes.Equal(got, data) && l.RecoveryPoint() == active, fmt.Sprintf("%q, %v, recovery point %d", got, err, l.RecoveryPoint())
	})
	r := openTestLog(t, crashed, filepath.Join(dir, "orders-0"), cfg, LogOptions{RecoveryPoint: active})
	if offs := r.Snapshots().Offsets(); !slices.Contains(offs, active) {
		t.Fatalf("snapshots %v after the crash, want %d", offs, active)
	}
	r.Close()
	// Already at the recovery point: a snapshot written now is synced by
	// a round of its own.
	data2 := []byte("written again")
	if err := l.Snapshots().WriteRoll(active, data2); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "the second snapshot to be durable", func() bool {
		got, err := vfs.ReadFile(fs.CrashClone(), path)
		return err == nil && bytes.Equal(got, data2)
	})
}

// TestRollFlushDoesNotHoldDeletion: while the roll flusher's fsync of a
// rolled segment's data is held, DeleteRecordsBefore (as retention and
// truncation, it removes segments under the append lock) deletes that very
// segment and returns; the flush then completes without taking the log
// offline, and the recovery point reaches the active segment.
func TestRollFlushDoesNotHoldDeletion(t *testing.T) {
	m, l, gfs, release := startGated(t)
	defer m.Close()
	defer release()
	fillSegments(t, l, 3)
	select {
	case <-gfs.waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("no fsync of a rolled segment started")
	}
	bases := l.SegmentBaseOffsets()
	deleted := make(chan error, 1)
	go func() {
		_, err := l.DeleteRecordsBefore(bases[1])
		deleted <- err
	}()
	select {
	case err := <-deleted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("DeleteRecordsBefore waited for the roll flusher's fsync")
	}
	release()
	active := bases[len(bases)-1]
	poll.UntilStatus(t, 20*time.Second, "the recovery point to reach the active segment", func() (bool, string) {
		if err := l.Offline(); err != nil {
			t.Fatal(err)
		}
		return l.RecoveryPoint() == active, fmt.Sprintf("recovery point %d, want %d", l.RecoveryPoint(), active)
	})
	if err := l.Offline(); err != nil {
		t.Fatal(err)
	}
	if got := l.LogStartOffset(); got != bases[1] {
		t.Fatalf("log start %d, want %d", got, bases[1])
	}
}
