package storage

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/strata-io/strata/internal/vfs"
)

// recordingHandler keeps the records logged at or above a level.
type recordingHandler struct {
	level slog.Level
	mu    *sync.Mutex
	recs  *[]slog.Record
	attrs []slog.Attr
}

func newRecorder(level slog.Level) (*slog.Logger, func() []slog.Record) {
	h := &recordingHandler{level: level, mu: &sync.Mutex{}, recs: &[]slog.Record{}}
	return slog.New(h), func() []slog.Record {
		h.mu.Lock()
		defer h.mu.Unlock()
		return append([]slog.Record(nil), *h.recs...)
	}
}

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	*h.recs = append(*h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}
func (h *recordingHandler) WithGroup(string) slog.Handler { return h }

func recordAttr(r slog.Record, key string) string {
	var v string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// A power loss of a Manager holding many empty logs and a few written ones:
// recovery reads nothing of the empty logs and of what the checkpoint says
// was flushed, keeps the unflushed log's durable prefix without calling it
// corrupt, and finds the two real corruptions (a torn tail, a garbled
// index), which it repairs and reports in one summary warning, counted by
// cause, and nowhere else.
func TestManagerCrashRecoversOnlyWhatNeedsIt(t *testing.T) {
	const empties = 300
	fs := vfs.NewMem()
	cfg := testConfig()
	m, err := OpenManager(fs, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(empties) {
		if _, err := m.GetOrCreate("empty", p, cfg); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(16, 16))
	written := map[string][][]byte{}
	ends := map[string]int64{}
	flushedSegments := map[string][]int64{}
	for _, name := range []string{"flushed", "unflushed", "torn", "badindex"} {
		l, err := m.GetOrCreate(name, 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		written[name] = buildLog(t, l, 120, rng) // several segments
		if err := l.Flush(l.LogEndOffset()); err != nil {
			t.Fatal(err)
		}
		ends[name] = l.LogEndOffset()
		flushedSegments[name] = l.SegmentBaseOffsets()
		if l.NumSegments() < 3 {
			t.Fatalf("%s: %d segments; the test needs rolled ones", name, l.NumSegments())
		}
	}
	if err := m.CheckpointRecoveryPoints(); err != nil {
		t.Fatal(err)
	}
	// Appended after the last flush: lost by the power loss.
	for _, name := range []string{"unflushed", "torn"} {
		l, _ := m.Log(name, 0)
		for i := range 5 {
			mustAppend(t, l, makeBatch(t, spec{records: 2, valueSize: 40, ts: int64(10_000 + i)}), leader(1))
		}
	}
	crashed := fs.CrashClone()
	m.Close()

	// The disk kept half of a batch past the torn log's flushed end, and
	// garbled the first segment's index of another log.
	tornSegs := flushedSegments["torn"]
	tornPath := filepath.Join("/data", "torn-0", segmentName(tornSegs[len(tornSegs)-1])+logSuffix)
	half := makeBatch(t, spec{records: 3, valueSize: 50})
	f, err := crashed.OpenReadWrite(tornPath)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if _, err := f.WriteAt(half[:len(half)/2], st.Size()); err != nil {
		t.Fatal(err)
	}
	f.Close()
	badIndex := filepath.Join("/data", "badindex-0", segmentName(0)+indexSuffix)
	idx, err := vfs.ReadFile(crashed, badIndex)
	if err != nil || len(idx) < 16 {
		t.Fatalf("index of badindex-0: %d bytes, %v", len(idx), err)
	}
	f, _ = crashed.OpenReadWrite(badIndex)
	f.WriteAt(concat(idx[len(idx)-8:], idx[8:len(idx)-8], idx[:8]), 0) // first and last swapped
	f.Close()

	logger, records := newRecorder(slog.LevelDebug)
	rm, err := OpenManager(crashed, "/data", ManagerOptions{Logger: logger, Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()

	for p := range int32(empties) {
		l, ok := rm.Log("empty", p)
		if !ok {
			t.Fatalf("empty-%d lost", p)
		}
		if st := l.recovery; st.segmentsScanned != 0 || st.bytesScanned != 0 || st.indexesRebuilt != 0 || st.corrupt() {
			t.Fatalf("empty-%d: %+v", p, st)
		}
		if n := openFiles(l.segmentList()); n != 1 {
			t.Fatalf("empty-%d keeps %d files open, want its .log only", p, n)
		}
	}
	for name, stored := range written {
		l, _ := rm.Log(name, 0)
		if l.LogEndOffset() != ends[name] {
			t.Fatalf("%s: log end %d, want the flushed %d", name, l.LogEndOffset(), ends[name])
		}
		checkEveryOffset(t, l, stored)
		st := l.recovery
		segs := l.NumSegments()
		active := l.segmentList()[segs-1]
		switch name {
		case "flushed", "unflushed":
			// Only the active segment, which holds the recovery point,
			// is read; the rolled ones are trusted.
			if st.corrupt() || st.indexesRebuilt != 0 || st.segmentsScanned > 1 || st.bytesScanned > active.size.Load() {
				t.Fatalf("%s: %+v (active segment %d bytes)", name, st, active.size.Load())
			}
		case "torn":
			if !st.tornTail || st.corruptIndex || st.indexesRebuilt != 0 || st.bytesTruncated != int64(len(half)/2) {
				t.Fatalf("torn: %+v", st)
			}
		case "badindex":
			if !st.corruptIndex || st.tornTail || st.indexesRebuilt != 1 {
				t.Fatalf("badindex: %+v", st)
			}
		}
	}

	var warnings []slog.Record
	for _, r := range records() {
		if r.Level >= slog.LevelWarn {
			warnings = append(warnings, r)
		}
	}
	if len(warnings) != 1 {
		for _, w := range warnings {
			t.Logf("%s %s", w.Level, w.Message)
		}
		t.Fatalf("%d warnings, want the one summary", len(warnings))
	}
	w := warnings[0]
	for key, want := range map[string]string{"logs": fmt.Sprint(empties + 4), "corrupt_logs": "2", "torn_tail": "1", "corrupt_index": "1"} {
		if got := recordAttr(w, key); got != want {
			t.Errorf("summary %s=%q, want %q (%s)", key, got, want, w.Message)
		}
	}
	if ex := recordAttr(w, "examples"); !strings.Contains(ex, "torn-0 (torn_tail)") || !strings.Contains(ex, "badindex-0 (corrupt_index)") {
		t.Errorf("summary examples %q", ex)
	}
}

// A SIGKILL leaves the files as the page cache holds them: the active
// segment's index preallocated, its entries followed by zeros. Recovery
// resumes at the last entry instead of reading the segment, rebuilds
// nothing and warns of nothing; empty logs cost one open file and no index
// reads. Real files, copied while the broker's Manager is still open (what
// a kill leaves), with the index's unused tail at a size that would show.
func TestKilledManagerResumesFromIndexes(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	cfg.SegmentIndexBytes = 1 << 20
	m, err := OpenManager(vfs.Default, filepath.Join(dir, "live"), ManagerOptions{Logger: quietLogger(), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(50) {
		if _, err := m.GetOrCreate("empty", p, cfg); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(17, 17))
	stored := map[int32][][]byte{}
	for p := range int32(2) {
		l, err := m.GetOrCreate("data", p, cfg)
		if err != nil {
			t.Fatal(err)
		}
		stored[p] = buildLog(t, l, 300, rng)
		if l.NumSegments() != 1 {
			t.Fatalf("%d segments; the test wants the active one only", l.NumSegments())
		}
		if p == 0 {
			// Everything flushed: the recovery point is the log end.
			if err := l.Flush(l.LogEndOffset()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := m.CheckpointRecoveryPoints(); err != nil {
		t.Fatal(err)
	}
	killed := filepath.Join(dir, "killed")
	copyTree(t, filepath.Join(dir, "live"), killed)
	if st, err := os.Stat(filepath.Join(killed, "data-0", segmentName(0)+indexSuffix)); err != nil || st.Size() != 1<<20 {
		t.Fatalf("the killed broker's active index: %v, %v; want it preallocated", st, err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	logger, records := newRecorder(slog.LevelInfo)
	rm, err := OpenManager(vfs.Default, killed, ManagerOptions{Logger: logger, Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	for _, r := range records() {
		if r.Level >= slog.LevelWarn {
			t.Errorf("warning after a kill: %s", r.Message)
		}
	}
	for p := range int32(2) {
		l, _ := rm.Log("data", p)
		checkEveryOffset(t, l, stored[p])
		st := l.recovery
		// From the last index entry to the end: at most the index
		// interval and the batch that crossed it.
		if st.corrupt() || st.indexesRebuilt != 0 || st.bytesScanned == 0 || st.bytesScanned > int64(cfg.IndexIntervalBytes)+4096 {
			t.Fatalf("data-%d: %+v; want a scan of the unindexed tail only", p, st)
		}
		if want := stored[p]; p == 0 && l.RecoveryPoint() != l.LogEndOffset() || p == 1 && l.RecoveryPoint() != 0 {
			t.Fatalf("data-%d: recovery point %d, log end %d (%d batches)", p, l.RecoveryPoint(), l.LogEndOffset(), len(want))
		}
	}
	for p := range int32(50) {
		l, _ := rm.Log("empty", p)
		if st := l.recovery; st.bytesScanned != 0 || st.segmentsScanned != 0 || openFiles(l.segmentList()) != 1 {
			t.Fatalf("empty-%d: %+v, %d open files", p, st, openFiles(l.segmentList()))
		}
	}
	// The recovered logs take appends, and a clean close trims the index.
	l, _ := rm.Log("data", 1)
	mustAppend(t, l, makeBatch(t, spec{records: 2}), leader(2))
	if err := rm.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(killed, "data-1", segmentName(0)+indexSuffix)); st.Size() >= 1<<20 || st.Size()%offsetIndexEntrySize != 0 {
		t.Fatalf("index after a clean close: %d bytes", st.Size())
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, src)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
