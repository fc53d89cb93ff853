package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// errDead is what a dieFS returns once its process has died.
var errDead = errors.New("process died")

// dieFS is a file system whose process dies at a chosen change: that
// change and every one after it fail, as if the process had been killed
// right before it. Reads still work. Changes are creations, removals,
// renames, writes, truncations and syncs (of files and directories).
type dieFS struct {
	vfs.FS
	mu    sync.Mutex
	armed bool
	left  int
	dead  bool
	ops   []string
}

// arm makes the process die at the n-th change from now.
func (d *dieFS) arm(n int) {
	d.mu.Lock()
	d.armed, d.left, d.ops = true, n, nil
	d.mu.Unlock()
}

func (d *dieFS) step(op, path string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return errDead
	}
	if !d.armed {
		return nil
	}
	if d.left == 0 {
		d.dead = true
		return fmt.Errorf("%s %s: %w", op, path, errDead)
	}
	d.left--
	d.ops = append(d.ops, op+" "+path)
	return nil
}

func (d *dieFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &dieFile{File: f, fs: d, name: name}, nil
}

func (d *dieFS) Create(name string) (vfs.File, error) {
	if err := d.step("create", name); err != nil {
		return nil, err
	}
	return d.wrapper(name)(d.FS.Create(name))
}

func (d *dieFS) Open(name string) (vfs.File, error) { return d.wrapper(name)(d.FS.Open(name)) }

func (d *dieFS) OpenReadWrite(name string) (vfs.File, error) {
	if !vfs.Exists(d.FS, name) {
		if err := d.step("create", name); err != nil {
			return nil, err
		}
	}
	return d.wrapper(name)(d.FS.OpenReadWrite(name))
}

func (d *dieFS) OpenDir(name string) (vfs.File, error) { return d.wrapper(name)(d.FS.OpenDir(name)) }

func (d *dieFS) Remove(name string) error {
	if err := d.step("remove", name); err != nil {
		return err
	}
	return d.FS.Remove(name)
}

func (d *dieFS) RemoveAll(name string) error {
	if err := d.step("removeall", name); err != nil {
		return err
	}
	return d.FS.RemoveAll(name)
}

func (d *dieFS) Rename(oldname, newname string) error {
	if err := d.step("rename", oldname+" -> "+newname); err != nil {
		return err
	}
	return d.FS.Rename(oldname, newname)
}

// wrap adapts a (File, error) pair; a method value keeps the call sites
// short.
func (d *dieFS) wrapper(name string) func(vfs.File, error) (vfs.File, error) {
	return func(f vfs.File, err error) (vfs.File, error) { return d.wrap(name, f, err) }
}

type dieFile struct {
	vfs.File
	fs   *dieFS
	name string
}

func (f *dieFile) Write(p []byte) (int, error) {
	if err := f.fs.step("write", f.name); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *dieFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.step("write", f.name); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *dieFile) Sync() error {
	if err := f.fs.step("sync", f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *dieFile) Truncate(size int64) error {
	if err := f.fs.step("truncate", f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// recordsIn returns the records with offsets in [from, to).
func recordsIn(rs []rec, from, to int64) []rec {
	var out []rec
	for _, r := range rs {
		if r.offset >= from && r.offset < to {
			out = append(out, r)
		}
	}
	return out
}

func sameRecords(a, b []rec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// leftovers returns the files of an interrupted cleaning or deletion in
// dir.
func leftovers(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, cleanedSuffix) || strings.HasSuffix(n, swapSuffix) || strings.HasSuffix(n, deletedSuffix) {
			out = append(out, n)
		}
	}
	return out
}

// TestCleanCrashAtEveryStep kills the process at every change a cleaning
// makes to the file system, and separately loses power there, in a first
// cleaning (one segment per run) and in the one after it (runs of several
// segments merged into one). The reopened log holds, for each run the
// uninterrupted cleaning rewrote, exactly the old records or exactly the
// new ones; it keeps no leftover file; and cleaning it again gives the
// records an uninterrupted cleaning gives.
func TestCleanCrashAtEveryStep(t *testing.T) {
	cfg := compactConfig()
	const dir = "/data/t-0"
	start := newMem(t, "/data")
	l := openTestLog(t, start, dir, cfg, LogOptions{})
	rng := rand.New(rand.NewPCG(3, 3))
	writeUpdates(t, l, batchOpts{ts: 1000, codec: record.CodecSnappy}, 12, 20, 2, rng)
	if err := l.Flush(l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	leo, segments := l.LogEndOffset(), l.NumSegments()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(5000)

	// cleaned returns the state after an uninterrupted cleaning of fs's
	// durable state: the file system and its records and segments.
	cleaned := func(fs *vfs.MemFS) (*vfs.MemFS, []rec, []int64) {
		out := fs.CrashClone()
		l := openTestLog(t, out, dir, cfg, LogOptions{RecoveryPoint: leo})
		cleanOK(t, l, now)
		if err := l.Flush(leo); err != nil {
			t.Fatal(err)
		}
		recs, bases := readRecords(t, l), l.SegmentBaseOffsets()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return out, recs, bases
	}
	afterFirst, firstRecs, _ := cleaned(start)
	_, secondRecs, secondBases := cleaned(afterFirst)
	if !sameRecords(firstRecs, secondRecs) || len(secondBases) >= segments || segments < 6 {
		t.Fatalf("the second cleaning should only merge: %d records then %d, segments %v", len(firstRecs), len(secondRecs), secondBases)
	}

	for _, phase := range []struct {
		name string
		from *vfs.MemFS
	}{{"first", start}, {"merging", afterFirst}} {
		t.Run(phase.name, func(t *testing.T) {
			opened := openTestLog(t, phase.from.CrashClone(), dir, cfg, LogOptions{RecoveryPoint: leo})
			before := readRecords(t, opened)
			opened.Close()
			_, after, bases := cleaned(phase.from)
			check := func(t *testing.T, fs vfs.FS, step int, how string, rp int64) {
				t.Helper()
				r := openTestLog(t, fs, dir, cfg, LogOptions{RecoveryPoint: rp})
				defer r.Close()
				got := readRecords(t, r)
				if r.LogEndOffset() != leo {
					t.Fatalf("step %d, %s: log end %d, want %d", step, how, r.LogEndOffset(), leo)
				}
				if left := leftovers(t, fs, dir); len(left) > 0 {
					t.Fatalf("step %d, %s: leftover files %v", step, how, left)
				}
				for i := 0; i+1 < len(bases); i++ {
					g := recordsIn(got, bases[i], bases[i+1])
					if !sameRecords(g, recordsIn(before, bases[i], bases[i+1])) && !sameRecords(g, recordsIn(after, bases[i], bases[i+1])) {
						t.Fatalf("step %d, %s: offsets [%d, %d) hold neither the old nor the new records:\n%v",
							step, how, bases[i], bases[i+1], g)
					}
				}
				cleanOK(t, r, now)
				if again := readRecords(t, r); !sameRecords(again, after) {
					t.Fatalf("step %d, %s: cleaning again gave %d records, want %d", step, how, len(again), len(after))
				}
			}
			for step := 0; ; step++ {
				mem := phase.from.CrashClone()
				die := &dieFS{FS: mem}
				l := openTestLog(t, die, dir, cfg, LogOptions{RecoveryPoint: leo})
				die.arm(step)
				_, err := l.Clean(context.Background(), CleanOptions{Now: now})
				if !die.dead {
					if err != nil {
						t.Fatal(err)
					}
					if step < 10 {
						t.Fatalf("the cleaning made only %d changes", step)
					}
					t.Logf("%d segments, %d steps", segments, step)
					return
				}
				if err == nil {
					t.Fatalf("step %d: the process died (%v) but Clean succeeded", step, die.ops)
				}
				check(t, mem.CrashClone(), step, "power loss", leo)
				check(t, mem.CrashClone(), step, "power loss, full recovery", 0)
				check(t, mem, step, "process crash, full recovery", 0)
			}
		})
	}
}

// hookFS runs hook once, just before the first rename of a file whose
// name ends in from: by default a cleaned log file, when a cleaning is
// about to commit its first run; with logSuffix+swapSuffix, when the first
// run has been swapped into the segment list.
type hookFS struct {
	vfs.FS
	from string
	hook func()
}

func (h *hookFS) Rename(oldname, newname string) error {
	from := h.from
	if from == "" {
		from = logSuffix + cleanedSuffix
	}
	if strings.HasSuffix(oldname, from) && h.hook != nil {
		hook := h.hook
		h.hook = nil
		hook()
	}
	return h.FS.Rename(oldname, newname)
}

// TestCleanAbortsWhenTheLogChanges truncates the log, or deletes its first
// segments, while a cleaning is about to swap its first run in: the
// cleaning gives up without resurrecting anything or leaving files behind,
// and the log is what the change made it.
func TestCleanAbortsWhenTheLogChanges(t *testing.T) {
	for _, change := range []string{"truncate", "delete records"} {
		t.Run(change, func(t *testing.T) {
			mem := newMem(t, "/d")
			hfs := &hookFS{FS: mem}
			l := openTestLog(t, hfs, "/d/t-0", compactConfig(), LogOptions{})
			defer l.Close()
			rng := rand.New(rand.NewPCG(7, 7))
			written := writeUpdates(t, l, batchOpts{ts: 1000}, 12, 10, 2, rng)
			bases := l.SegmentBaseOffsets()
			var want []rec
			hfs.hook = func() {
				switch change {
				case "truncate":
					if err := l.TruncateTo(bases[1] + 1); err != nil {
						t.Error(err)
					}
					want = recordsIn(written, 0, l.LogEndOffset())
				case "delete records":
					if _, err := l.DeleteRecordsBefore(bases[2]); err != nil {
						t.Error(err)
					}
					want = recordsIn(written, bases[2], l.LogEndOffset())
				}
			}
			_, err := l.Clean(context.Background(), CleanOptions{Now: time.UnixMilli(5000)})
			if !errors.Is(err, errCleanAborted) {
				t.Fatalf("cleaning over a %s: %v", change, err)
			}
			if got := readRecords(t, l); !sameRecords(got, want) {
				t.Fatalf("after a %s during a cleaning: %d records, want %d", change, len(got), len(want))
			}
			if left := leftovers(t, mem, "/d/t-0"); len(left) > 0 {
				t.Fatalf("leftover files %v", left)
			}
			if l.CleanerCheckpoint() != 0 || l.cleaner.uncleanable.Load() {
				t.Fatalf("checkpoint %d, uncleanable %v after an aborted cleaning", l.CleanerCheckpoint(), l.cleaner.uncleanable.Load())
			}
			// The next cleaning works on what is left.
			res := cleanOK(t, l, time.UnixMilli(5000))
			checkCompacted(t, readRecords(t, l), want, res.CleanedTo, false)
		})
	}
}

// TestCleanCancelledAfterASwapFinishes cancels a cleaning right after it
// swapped in its first rewritten run, as the Manager's Close does when it
// stops the cleaner (the interleaving that made TestManagerCleansCompactedLogs
// flaky): that run was deduplicated against the whole offset map, so the
// cleaning must not stop there with the checkpoint left behind, which would
// leave records above the checkpoint removed. It finishes, and the log is
// compacted exactly up to the checkpoint it records.
func TestCleanCancelledAfterASwapFinishes(t *testing.T) {
	mem := newMem(t, "/d")
	hfs := &hookFS{FS: mem, from: logSuffix + swapSuffix}
	l := openTestLog(t, hfs, "/d/t-0", compactConfig(), LogOptions{})
	defer l.Close()
	rng := rand.New(rand.NewPCG(9, 9))
	now := time.UnixMilli(5000)
	written := writeUpdates(t, l, batchOpts{ts: 1000}, 20, 6, 2, rng)
	hfs.hook = nil
	first := cleanOK(t, l, now).CleanedTo
	written = append(written, writeUpdates(t, l, batchOpts{ts: 1000}, 20, 6, 2, rng)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hfs.hook = cancel
	res, err := l.Clean(ctx, CleanOptions{Now: now})
	if err != nil {
		t.Fatalf("cleaning cancelled after its first swap: %v", err)
	}
	if hfs.hook != nil {
		t.Fatal("the cleaning swapped nothing in")
	}
	if res.SegmentsAfter < 2 {
		t.Fatalf("the cleaning rewrote %d runs; the test needs two or more", res.SegmentsAfter)
	}
	if cp := l.CleanerCheckpoint(); cp != res.CleanedTo || cp <= first {
		t.Fatalf("checkpoint %d after the cancelled cleaning to %d (the previous one reached %d)", cp, res.CleanedTo, first)
	}
	checkCompacted(t, readRecords(t, l), written, l.CleanerCheckpoint(), false)

	// Cancelled before anything was swapped in, a cleaning still stops.
	written = append(written, writeUpdates(t, l, batchOpts{ts: 1000}, 20, 6, 2, rng)...)
	before := l.CleanerCheckpoint()
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := l.Clean(ctx, CleanOptions{Now: now}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cleaning cancelled before its first swap: %v", err)
	}
	if l.CleanerCheckpoint() != before {
		t.Fatalf("checkpoint moved from %d to %d by a cleaning that stopped", before, l.CleanerCheckpoint())
	}
	checkCompacted(t, readRecords(t, l), written, before, false)
}

// TestOpenRemovesAnUnreadableSwap: a .swap log is synced before its
// rename, so one without a valid batch is a disk's corruption; opening
// the log removes it (and its indexes) and keeps the old segments.
func TestOpenRemovesAnUnreadableSwap(t *testing.T) {
	mem := newMem(t, "/d")
	cfg := compactConfig()
	l := openTestLog(t, mem, "/d/t-0", cfg, LogOptions{})
	rng := rand.New(rand.NewPCG(8, 8))
	writeUpdates(t, l, batchOpts{ts: 1000}, 12, 5, 2, rng)
	before := readRecords(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	stem := "/d/t-0/" + segmentName(0)
	for _, name := range []string{stem + logSuffix + swapSuffix, stem + indexSuffix + swapSuffix, stem + timeIndexSuffix + cleanedSuffix} {
		if err := vfs.WriteFileAtomic(mem, name, []byte("garbage, not a batch")); err != nil {
			t.Fatal(err)
		}
	}
	r := openTestLog(t, mem, "/d/t-0", cfg, LogOptions{CleanShutdown: true})
	defer r.Close()
	if got := readRecords(t, r); !sameRecords(got, before) {
		t.Fatalf("%d records after opening, want %d", len(got), len(before))
	}
	if left := leftovers(t, mem, "/d/t-0"); len(left) > 0 {
		t.Fatalf("leftover files %v", left)
	}
}
