package storage

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/vfs"
)

func TestManagerLifecycle(t *testing.T) {
	fs := vfs.Default
	dir := t.TempDir()
	cfg := testConfig()
	opts := ManagerOptions{Logger: quietLogger(), Default: cfg, RecoveryThreads: 3}
	m, err := OpenManager(fs, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	tps := []TopicPartition{{"orders", 0}, {"orders", 1}, {"my-topic-with-dashes", 7}, {"a.b_c", 0}}
	for i, tp := range tps {
		l, err := m.GetOrCreate(tp.Topic, tp.Partition, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 * (i + 1) {
			mustAppend(t, l, makeBatch(t, spec{records: 2, valueSize: 100}), leader(0))
		}
	}
	if again, _ := m.GetOrCreate("orders", 1, cfg); again.LogEndOffset() != 80 {
		t.Fatal("GetOrCreate did not return the existing log")
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", strings.Repeat("x", 250)} {
		if _, err := m.GetOrCreate(bad, 0, cfg); err == nil {
			t.Errorf("created topic %q", bad)
		}
	}
	// Leftovers a crash may leave in the data dir.
	fs.MkdirAll(filepath.Join(dir, "gone-0.0123456789abcdef0123456789abcdef-delete"), 0o755)
	fs.MkdirAll(filepath.Join(dir, "moving-0-future"), 0o755)
	fs.MkdirAll(filepath.Join(dir, "lost+found"), 0o755)
	vfs.WriteFileAtomic(fs, filepath.Join(dir, "junk.tmp"), nil)
	f, _ := fs.Create(filepath.Join(dir, "junk.tmp"))
	f.Close()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	m, err = OpenManager(fs, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(m.Logs()); got != len(tps) {
		t.Fatalf("%d logs after reopen", got)
	}
	for i, tp := range tps {
		l, ok := m.Log(tp.Topic, tp.Partition)
		if !ok || l.LogEndOffset() != int64(40*(i+1)) {
			t.Fatalf("%v after reopen: %v", tp, ok)
		}
	}
	for _, name := range []string{"gone-0.0123456789abcdef0123456789abcdef-delete", "junk.tmp"} {
		if vfs.Exists(fs, filepath.Join(dir, name)) {
			t.Errorf("%s survived opening", name)
		}
	}
	if !vfs.Exists(fs, filepath.Join(dir, "moving-0-future")) {
		t.Error("future dir removed")
	}

	// Delete renames at once and removes after the delay.
	l, _ := m.Log("orders", 1)
	cfgDelay := l.Config()
	cfgDelay.FileDeleteDelayMs = 30
	l.SetConfig(cfgDelay)
	if err := m.Delete("orders", 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Log("orders", 1); ok {
		t.Fatal("deleted log still listed")
	}
	if vfs.Exists(fs, filepath.Join(dir, "orders-1")) || !strings.HasSuffix(l.Dir(), "-delete") {
		t.Fatalf("deleted log at %s", l.Dir())
	}
	if _, err := l.Append(makeBatch(t, spec{}), leader(0)); err == nil {
		t.Fatal("append to a deleted log succeeded")
	}
	// A new log of the same name starts empty.
	nl, err := m.GetOrCreate("orders", 1, cfg)
	if err != nil || nl.LogEndOffset() != 0 {
		t.Fatalf("recreated: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for vfs.Exists(fs, l.Dir()) {
		if time.Now().After(deadline) {
			t.Fatal("deleted directory never removed")
		}
		time.Sleep(time.Millisecond)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// After a crash (no clean marker), logs recover from their checkpointed
// recovery points, and the checkpoint's log start offsets hold.
func TestManagerRecoversAfterCrash(t *testing.T) {
	fs := newMem(t, "/data")
	cfg := testConfig()
	m, err := OpenManager(fs, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	var ends []int64
	for p := range int32(4) {
		l, err := m.GetOrCreate("t", p, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			mustAppend(t, l, makeBatch(t, spec{records: 3, valueSize: 60, ts: int64(i)}), leader(1))
		}
		if p == 2 {
			if _, err := l.DeleteRecordsBefore(40); err != nil {
				t.Fatal(err)
			}
		}
		l.Flush(l.LogEndOffset())
		ends = append(ends, l.LogEndOffset())
		// Unflushed appends after the flush may or may not survive.
		mustAppend(t, l, makeBatch(t, spec{records: 1}), leader(1))
	}
	if err := m.CheckpointRecoveryPoints(); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone()
	m.Close()
	rm, err := OpenManager(crashed, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	for p := range int32(4) {
		l, ok := rm.Log("t", p)
		if !ok {
			t.Fatalf("partition %d lost", p)
		}
		if l.LogEndOffset() != ends[p] {
			t.Fatalf("partition %d: end %d, want %d", p, l.LogEndOffset(), ends[p])
		}
		if want := map[bool]int64{true: 40, false: 0}[p == 2]; l.LogStartOffset() != want {
			t.Fatalf("partition %d: log start %d, want %d", p, l.LogStartOffset(), want)
		}
	}
}

func TestManagerBackgroundLoop(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig()
	cfg.FlushMs = 1
	cfg.RetentionMs = 1
	m, err := OpenManager(fs, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg,
		RetentionCheckInterval: 5 * time.Millisecond, FlushCheckInterval: time.Millisecond, CheckpointInterval: 5 * time.Millisecond,
		HighWatermarkCheckpointInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := m.GetOrCreate("t", 0, cfg)
	for i := range 100 {
		mustAppend(t, l, makeBatch(t, spec{records: 1, valueSize: 200, ts: int64(i)}), leader(0))
	}
	l.SetHighWatermark(l.LogEndOffset())
	m.Start()
	deadline := time.Now().Add(10 * time.Second)
	for l.NumSegments() > 1 || l.RecoveryPoint() < l.LogEndOffset() ||
		!vfs.Exists(fs, "/data/"+RecoveryPointCheckpointFile) || !vfs.Exists(fs, "/data/"+HighWatermarkCheckpointFile) {
		if time.Now().After(deadline) {
			t.Fatalf("background loop idle: %d segments, recovery point %d of %d", l.NumSegments(), l.RecoveryPoint(), l.LogEndOffset())
		}
		time.Sleep(time.Millisecond)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := vfs.ReadFile(fs, "/data/"+RecoveryPointCheckpointFile)
	if want := fmt.Sprintf("0\n1\nt 0 %d\n", l.LogEndOffset()); string(data) != want {
		t.Fatalf("checkpoint %q, want %q", data, want)
	}
}

// The high watermarks survive a crash through
// replication-offset-checkpoint, bounded by what the log recovered; a log
// whose high watermark was never set has none, and a clean Close writes
// the latest.
func TestManagerHighWatermarkCheckpoint(t *testing.T) {
	fs := newMem(t, "/data")
	cfg := testConfig()
	m, err := OpenManager(fs, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	logs := make([]*Log, 3)
	for p := range logs {
		l, err := m.GetOrCreate("t", int32(p), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			mustAppend(t, l, makeBatch(t, spec{records: 2, ts: int64(i)}), leader(1))
		}
		logs[p] = l
	}
	if _, ok := logs[0].HighWatermark(); ok {
		t.Fatal("a new log has a high watermark before its replica set one")
	}
	// t-0 is committed up to 12 of its 20 flushed records; t-1 to 20, of
	// which only 14 were flushed; t-2's replica never set one.
	logs[0].SetHighWatermark(12)
	logs[1].SetHighWatermark(20)
	for _, l := range logs {
		l.Flush(l.LogEndOffset())
	}
	logs[1].TruncateTo(14) // what a crash before the flush would leave
	mustAppend(t, logs[1], makeBatch(t, spec{records: 6, ts: 20}), leader(1))
	if err := m.CheckpointHighWatermarks(); err != nil {
		t.Fatal(err)
	}
	data, _ := vfs.ReadFile(fs, "/data/"+HighWatermarkCheckpointFile)
	if want := "0\n2\nt 0 12\nt 1 20\n"; string(data) != want {
		t.Fatalf("checkpoint %q, want %q", data, want)
	}
	logs[0].SetHighWatermark(16) // after the checkpoint: lost in the crash

	crashed := fs.CrashClone()
	m.Close()
	rm, err := OpenManager(crashed, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range []struct {
		hw int64
		ok bool
	}{{12, true}, {14, true}, {0, false}} {
		l, _ := rm.Log("t", int32(p))
		if hw, ok := l.HighWatermark(); hw != want.hw || ok != want.ok {
			t.Fatalf("t-%d after the crash: high watermark %d (%v), want %d (%v); log end %d", p, hw, ok, want.hw, want.ok, l.LogEndOffset())
		}
	}
	l, _ := rm.Log("t", 0)
	l.SetHighWatermark(18)
	if err := rm.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ = vfs.ReadFile(crashed, "/data/"+HighWatermarkCheckpointFile)
	if want := "0\n2\nt 0 18\nt 1 14\n"; string(data) != want {
		t.Fatalf("checkpoint after a clean close %q, want %q", data, want)
	}
}

// A partition created without an fsync of the data directory still
// survives a power loss once its data is flushed: the flush syncs the
// directory entry too. (An empty partition a crash forgets loses nothing;
// the broker creates it again from the metadata.)
func TestCreatedLogSurvivesCrashOnceFlushed(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig()
	m, err := OpenManager(fs, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.GetOrCreate("orders", 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AssignEpoch(3, 0); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, makeBatch(t, spec{records: 5, valueSize: 10}), leader(3))
	if err := l.Flush(l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone()
	m.Close()
	m2, err := OpenManager(crashed, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	l2, ok := m2.Log("orders", 0)
	if !ok {
		t.Fatal("the partition's directory is gone after the crash")
	}
	if l2.LogEndOffset() != 5 {
		t.Fatalf("after the crash: log end %d; want 5", l2.LogEndOffset())
	}
	if epoch, ok := l2.LatestEpoch(); !ok || epoch != 3 {
		t.Fatalf("leader epoch after the crash: %d %v, want 3", epoch, ok)
	}
}

// TestCleanShutdownBrokerEpoch: a clean Close leaves the broker epoch in
// the clean-shutdown marker, which the next opening reports once; a
// directory opened after a crash (no marker) reports -1.
func TestCleanShutdownBrokerEpoch(t *testing.T) {
	dir := t.TempDir()
	opts := ManagerOptions{Logger: quietLogger(), Default: testConfig()}
	open := func() *Manager {
		t.Helper()
		m, err := OpenManager(vfs.Default, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := open()
	if e := m.CleanShutdownBrokerEpoch(); e != -1 {
		t.Fatalf("a new directory reports broker epoch %d", e)
	}
	m.SetBrokerEpoch(42)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = open()
	if e := m.CleanShutdownBrokerEpoch(); e != 42 {
		t.Fatalf("after a clean close with epoch 42: %d", e)
	}
	// Not closed: the next opening finds no marker.
	m.closeLogs()
	m = open()
	defer m.Close()
	if e := m.CleanShutdownBrokerEpoch(); e != -1 {
		t.Fatalf("after a crash: %d", e)
	}
}

// lockedBuffer collects a logger's output from any goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Deleting a log, on real files, logs no warning: closing the renamed log
// must not reach for a file under the directory it had before the rename
// (an index's lazily opened file, whose path still named it, did). Logs
// empty, with a few records (an index without entries), and with rolled
// segments, deleted at once and after file.delete.delay.ms.
func TestManagerDeleteLogsNoWarning(t *testing.T) {
	dir := t.TempDir()
	var out lockedBuffer
	cfg := testConfig()
	m, err := OpenManager(vfs.Default, dir, ManagerOptions{Logger: slog.New(slog.NewTextHandler(&out, nil)), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, batches := range []int{0, 1, 3, 60} {
		for _, delay := range []int64{0, 1} {
			c := cfg
			c.FileDeleteDelayMs = delay
			topic := fmt.Sprintf("t%d-%d", i, delay)
			l, err := m.GetOrCreate(topic, 0, c)
			if err != nil {
				t.Fatal(err)
			}
			for range batches {
				mustAppend(t, l, makeBatch(t, spec{records: 2, valueSize: 100}), leader(0))
			}
			if err := m.Delete(topic, 0); err != nil {
				t.Fatal(err)
			}
			deleted := l.Dir()
			poll.Until(t, 10*time.Second, deleted+" removed", func() bool { return !vfs.Exists(vfs.Default, deleted) })
		}
	}
	if s := out.String(); strings.Contains(s, "level=WARN") || strings.Contains(s, "level=ERROR") {
		t.Fatalf("deleting logs logged:\n%s", s)
	}
}
