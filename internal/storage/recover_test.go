package storage

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// checkPrefix checks that the log holds exactly the first n stored batches
// and every one validates.
func checkPrefix(t *testing.T, l *Log, stored [][]byte, n int) {
	t.Helper()
	got := readAllBatches(t, l)
	if len(got) != n {
		t.Fatalf("log holds %d batches, want %d", len(got), n)
	}
	for i, b := range got {
		if _, err := record.Validate(b, 0); err != nil {
			t.Fatalf("batch %d visible but corrupt: %v", i, err)
		}
		if !bytes.Equal(b, stored[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
	want := int64(0)
	if n > 0 {
		h, _ := record.ParseHeader(stored[n-1])
		want = h.NextOffset()
	}
	if l.LogEndOffset() != want {
		t.Fatalf("log end %d, want %d", l.LogEndOffset(), want)
	}
}

// A crash at every byte of the last batch's write: the write reaches the
// file short, the process dies, and recovery yields the batches before it
// and nothing corrupt. Real files, with the short write injected.
func TestCrashAtEveryByteOfLastWrite(t *testing.T) {
	root := t.TempDir()
	var stored [][]byte
	rng := rand.New(rand.NewPCG(11, 11))
	for range 6 {
		stored = append(stored, makeBatch(t, spec{records: 1 + rng.IntN(3), valueSize: 300, ts: 1000}))
	}
	last := makeBatch(t, spec{records: 2, valueSize: 20, ts: 2000})
	for k := 0; k <= len(last); k++ {
		dir := filepath.Join(root, "c", "t-"+strconv.Itoa(k))
		efs := vfs.NewErrorFS(vfs.Default)
		l := openTestLog(t, efs, dir, testConfig(), LogOptions{})
		var kept [][]byte
		for _, b := range stored {
			b = bytes.Clone(b)
			mustAppend(t, l, b, leader(1))
			kept = append(kept, b)
		}
		b := bytes.Clone(last)
		if k < len(last) {
			efs.Add(vfs.Fault{Op: vfs.OpWrite, Path: ".log", ShortWrite: k})
			if _, err := l.Append(b, leader(1)); !errors.Is(err, ErrLogOffline) || !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("k=%d: append with short write: %v", k, err)
			}
			if _, err := l.Append(makeBatch(t, spec{}), leader(1)); !errors.Is(err, ErrLogOffline) {
				t.Fatalf("k=%d: append after failure: %v", k, err)
			}
		} else {
			mustAppend(t, l, b, leader(1))
			kept = append(kept, b)
		}
		// The process dies: no Close, no clean marker. Reopen from disk.
		r := openTestLog(t, vfs.Default, dir, testConfig(), LogOptions{RecoveryPoint: l.RecoveryPoint()})
		checkPrefix(t, r, kept, len(kept))
		mustAppend(t, r, makeBatch(t, spec{}), leader(2))
		r.Close()
		l.Close()
	}
}

// A flipped bit anywhere the CRC covers, or in the length, drops the batch
// and what follows it.
func TestCorruptLastBatchIsTruncated(t *testing.T) {
	fs := newMem(t, "/d")
	l := openTestLog(t, fs, "/d/t-0", testConfig(), LogOptions{})
	var stored [][]byte
	for i := range 5 {
		b := makeBatch(t, spec{records: 3, valueSize: 20, ts: int64(i)})
		mustAppend(t, l, b, leader(0))
		stored = append(stored, b)
	}
	l.Flush(l.LogEndOffset())
	lastPos := l.Size() - int64(len(stored[4]))
	l.Close()
	logPath := "/d/t-0/00000000000000000000.log"
	orig, _ := vfs.ReadFile(fs, logPath)
	for i := 8; i < len(stored[4]); i++ {
		if i >= 12 && i < 17 {
			continue // the leader epoch: not covered by the CRC, by design
		}
		c := fs.CrashClone()
		data := bytes.Clone(orig)
		data[lastPos+int64(i)] ^= 0x10
		f, _ := c.OpenReadWrite(logPath)
		f.WriteAt(data, 0)
		f.Close()
		r := openTestLog(t, c, "/d/t-0", testConfig(), LogOptions{})
		checkPrefix(t, r, stored, 4)
		r.Close()
	}
}

// Indexes found missing, short, overlong or garbled are rebuilt, even after
// a clean shutdown, and the rebuilt ones equal what appends wrote.
func TestBadIndexesAreRebuilt(t *testing.T) {
	dir := tempLogDir(t, "t-0")
	l := openTestLog(t, vfs.Default, dir, testConfig(), LogOptions{})
	stored := buildLog(t, l, 200, rand.New(rand.NewPCG(12, 12)))
	l.Flush(l.LogEndOffset())
	end := l.LogEndOffset()
	l.Close()
	idx := filepath.Join(dir, "00000000000000000000.index")
	tidx := filepath.Join(dir, "00000000000000000000.timeindex")
	goodIdx, goodT := readFile(t, idx), readFile(t, tidx)
	if len(goodIdx) == 0 || len(goodT) == 0 {
		t.Fatal("test needs index entries in the first segment")
	}
	damage := map[string]func(){
		"missing":       func() { os.Remove(idx) },
		"odd length":    func() { os.WriteFile(idx, goodIdx[:len(goodIdx)-3], 0o644) },
		"zero tail":     func() { os.WriteFile(idx, append(bytes.Clone(goodIdx), make([]byte, 64)...), 0o644) },
		"past the log":  func() { os.WriteFile(idx, concat(goodIdx, be(4, 1<<20, 4, 1<<30)), 0o644) },
		"decreasing":    func() { os.WriteFile(idx, concat(goodIdx[8:16], goodIdx[:8]), 0o644) },
		"time garbage":  func() { os.WriteFile(tidx, bytes.Repeat([]byte{0xff}, 24), 0o644) },
		"time missing":  func() { os.Remove(tidx) },
		"time odd size": func() { os.WriteFile(tidx, goodT[:5], 0o644) },
	}
	for name, fn := range damage {
		fn()
		l := openTestLog(t, vfs.Default, dir, testConfig(), LogOptions{CleanShutdown: true, RecoveryPoint: end})
		checkEveryOffset(t, l, stored)
		l.Close()
		if got := readFile(t, idx); !bytes.Equal(got, goodIdx) {
			t.Fatalf("%s: rebuilt index differs: %d bytes, want %d: %x vs %x", name, len(got), len(goodIdx), got[:min(32, len(got))], goodIdx[:32])
		}
		if got := readFile(t, tidx); !bytes.Equal(got, goodT) {
			t.Fatalf("%s: rebuilt time index differs: %d bytes, want %d: %x vs %x", name, len(got), len(goodT), got[:min(36, len(got))], goodT[:36])
		}
	}
}

// countingFS counts log syncs and makes each take a while, as a disk does.
type countingFS struct {
	vfs.FS
	syncs   atomic.Int64
	latency time.Duration
}

type countingFile struct {
	vfs.File
	fs   *countingFS
	name string
}

func (c *countingFS) Create(name string) (vfs.File, error) {
	f, err := c.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &countingFile{f, c, name}, nil
}

func (f *countingFile) Sync() error {
	if filepath.Ext(f.name) == ".log" {
		f.fs.syncs.Add(1)
		time.Sleep(f.fs.latency) // the simulated disk's fsync latency, not a test wait
	}
	return f.File.Sync()
}

func TestGroupCommitSharesFsyncs(t *testing.T) {
	cfs := &countingFS{FS: vfs.NewMem(), latency: 2 * time.Millisecond}
	l := openTestLog(t, cfs, "/d/t-0", testConfig(), LogOptions{})
	defer l.Close()
	const writers, each = 8, 25
	var appendMu sync.Mutex
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				appendMu.Lock()
				info, err := l.Append(makeBatch(t, spec{records: 1, seed: byte(w*each + i)}), leader(0))
				appendMu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Flush(info.LastOffset + 1); err != nil {
					t.Error(err)
					return
				}
				if l.RecoveryPoint() <= info.LastOffset {
					t.Errorf("Flush returned before offset %d was durable", info.LastOffset)
				}
			}
		}()
	}
	wg.Wait()
	if n := cfs.syncs.Load(); n > writers*each/2 {
		t.Fatalf("%d fsyncs for %d flushes: no group commit", n, writers*each)
	}
	t.Logf("%d fsyncs for %d flushes", cfs.syncs.Load(), writers*each)
}

func TestFsyncFailureTakesLogOffline(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l := openTestLog(t, efs, "/d/t-0", testConfig(), LogOptions{})
	defer l.Close()
	mustAppend(t, l, makeBatch(t, spec{}), leader(0))
	if err := l.Flush(1); err != nil {
		t.Fatal(err)
	}
	efs.Add(vfs.Fault{Op: vfs.OpSync, Path: ".log", Count: 1})
	mustAppend(t, l, makeBatch(t, spec{}), leader(0))
	err := l.Flush(2)
	if !errors.Is(err, ErrLogOffline) || !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Flush: %v", err)
	}
	if l.RecoveryPoint() != 1 {
		t.Fatalf("recovery point advanced to %d past a failed fsync", l.RecoveryPoint())
	}
	// The fault is spent, but the log never pretends: it stays offline.
	if err := l.Flush(2); !errors.Is(err, ErrLogOffline) {
		t.Fatalf("second Flush: %v", err)
	}
	if _, err := l.Append(makeBatch(t, spec{}), leader(0)); !errors.Is(err, ErrLogOffline) {
		t.Fatalf("Append: %v", err)
	}
	if err := l.TruncateTo(0); !errors.Is(err, ErrLogOffline) {
		t.Fatalf("TruncateTo: %v", err)
	}
	// Reads of what is there still work.
	if _, err := l.Read(0, 100, 2, true); err != nil {
		t.Fatal(err)
	}
}

// Power loss at random moments, with Flush acknowledging offsets: what
// survives is a prefix of what was appended, and it includes every offset
// a Flush acknowledged before the power went.
func TestPowerLossKeepsAcknowledgedFlushes(t *testing.T) {
	for _, torn := range []bool{false, true} {
		fs := vfs.NewMem()
		cfg := testConfig()
		m, err := OpenManager(fs, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg})
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.GetOrCreate("t", 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(13, 13))
		var stored [][]byte
		var acked atomic.Int64
		var appendMu sync.Mutex
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					appendMu.Lock()
					b := makeBatch(t, spec{records: 1 + i%3, valueSize: 50 + w*40, ts: int64(i)})
					info, err := l.Append(b, leader(int32(i/50)))
					if err == nil {
						stored = append(stored, b)
					}
					appendMu.Unlock()
					if err != nil {
						t.Error(err)
						return
					}
					if i%3 == 0 {
						if err := l.Flush(info.LastOffset + 1); err != nil {
							t.Error(err)
							return
						}
						for a := acked.Load(); a < info.LastOffset+1 && !acked.CompareAndSwap(a, info.LastOffset+1); a = acked.Load() {
						}
					}
					if i%40 == 0 {
						m.CheckpointRecoveryPoints()
					}
				}
			}()
		}
		for crash := range 15 {
			deadline := time.Now().Add(20 * time.Second)
			for acked.Load() < int64(20*(crash+1)) {
				if time.Now().After(deadline) {
					t.Fatal("writers made no progress")
				}
				time.Sleep(100 * time.Microsecond)
			}
			mustSurvive := acked.Load()
			var c *vfs.MemFS
			if torn {
				c = fs.CrashCloneTorn(rng)
			} else {
				c = fs.CrashClone()
			}
			rm, err := OpenManager(c, "/data", ManagerOptions{Logger: quietLogger(), Default: cfg})
			if err != nil {
				t.Fatalf("crash %d: %v", crash, err)
			}
			rl, ok := rm.Log("t", 0)
			if !ok {
				t.Fatalf("crash %d: log lost", crash)
			}
			if rl.LogEndOffset() < mustSurvive {
				t.Fatalf("crash %d (torn %v): log end %d, but %d was acknowledged", crash, torn, rl.LogEndOffset(), mustSurvive)
			}
			got := readAllBatches(t, rl)
			appendMu.Lock()
			for i, b := range got {
				if i >= len(stored) || !bytes.Equal(b, stored[i]) {
					appendMu.Unlock()
					t.Fatalf("crash %d: recovered batch %d is not what was appended", crash, i)
				}
			}
			appendMu.Unlock()
			rm.Close()
		}
		close(stop)
		wg.Wait()
		m.Close()
	}
}

// A power loss can keep a later segment while losing the end of an earlier
// one at a batch boundary; recovery must not then skip offsets. A
// legitimate gap (a follower's jump past what a segment can index) stays.
func TestLostSegmentTailDropsLaterSegments(t *testing.T) {
	dir := tempLogDir(t, "t-0")
	l := openTestLog(t, vfs.Default, dir, testConfig(), LogOptions{})
	var stored [][]byte
	for i := range 60 {
		b := makeBatch(t, spec{records: 2, valueSize: 150, ts: int64(i)})
		mustAppend(t, l, b, leader(0))
		stored = append(stored, b)
	}
	segs := l.SegmentBaseOffsets()
	l.Close()
	// Cut the last batch of the second segment: a clean batch boundary.
	second := filepath.Join(dir, segmentName(segs[1])+logSuffix)
	inFirstTwo := 0
	for _, b := range stored {
		if h, _ := record.ParseHeader(b); h.BaseOffset < segs[2] {
			inFirstTwo++
		}
	}
	kept := inFirstTwo - 1
	if err := os.Truncate(second, int64(len(readFile(t, second))-len(stored[kept]))); err != nil {
		t.Fatal(err)
	}
	r := openTestLog(t, vfs.Default, dir, testConfig(), LogOptions{})
	checkPrefix(t, r, stored, kept)
	if r.NumSegments() != 2 {
		t.Fatalf("%d segments after recovery", r.NumSegments())
	}
	r.Close()

	// A follower's jump of 2^40 offsets rolls to a segment at the jump,
	// and survives recovery.
	dir2 := tempLogDir(t, "u-0")
	l = openTestLog(t, vfs.Default, dir2, testConfig(), LogOptions{})
	follower := AppendOptions{LogAppendTime: -1}
	mustAppend(t, l, makeBatch(t, spec{base: 0, records: 3}), follower)
	mustAppend(t, l, makeBatch(t, spec{base: 1 << 40}), follower)
	l.Close()
	r = openTestLog(t, vfs.Default, dir2, testConfig(), LogOptions{})
	defer r.Close()
	if r.LogEndOffset() != 1<<40+1 || r.NumSegments() != 2 {
		t.Fatalf("jump lost: end %d, %d segments", r.LogEndOffset(), r.NumSegments())
	}
}
