package storage

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/vfs"
)

// benchBatch is 16 records of 1 KiB values: a 16 KiB batch.
func benchBatch(b testing.TB) []byte {
	return makeBatch(b, spec{records: 16, valueSize: 1000, ts: time.Now().UnixMilli()})
}

func benchLog(b *testing.B, cfg Config) *Log {
	b.Helper()
	l := openTestLog(b, vfs.Default, filepath.Join(b.TempDir(), "bench-0"), cfg, LogOptions{})
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkAppend appends 16 KiB batches of 1 KiB records, no fsync, to a
// log on real files: compare with BenchmarkRawWrite.
func BenchmarkAppend(b *testing.B) {
	l := benchLog(b, DefaultConfig())
	batch := benchBatch(b)
	opts := leader(1)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := l.Append(batch, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawWrite is the baseline: plain sequential write(2) of the same
// bytes to a file in the same kind of directory.
func BenchmarkRawWrite(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	batch := benchBatch(b)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.Write(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// benchConcurrent runs 8 appenders, each appending (serialized, as the
// broker serializes a partition's appends) and then, with fsync, waiting for
// Flush of its own offset.
func benchConcurrent(b *testing.B, appenders int, fsync bool) {
	l := benchLog(b, DefaultConfig())
	batches := make([][]byte, appenders)
	for i := range batches {
		batches[i] = benchBatch(b)
	}
	b.SetBytes(int64(len(batches[0])))
	var appendMu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				appendMu.Lock()
				info, err := l.Append(batches[w], leader(1))
				appendMu.Unlock()
				if err != nil {
					b.Error(err)
					return
				}
				if fsync {
					if err := l.Flush(info.LastOffset + 1); err != nil {
						b.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if rounds := l.commit.fsyncRounds.Load(); rounds > 0 {
		b.ReportMetric(float64(b.N)/float64(rounds), "appends/fsync")
	}
}

// BenchmarkAppendFsyncGroupCommit: 8 appenders each Append then Flush.
func BenchmarkAppendFsyncGroupCommit(b *testing.B) { benchConcurrent(b, 8, true) }

// BenchmarkAppendFsyncGroupCommit64 shows how group commit scales when
// more appenders share each fsync.
func BenchmarkAppendFsyncGroupCommit64(b *testing.B) { benchConcurrent(b, 64, true) }

// BenchmarkAppendConcurrentNoFsync is its baseline: the same appenders
// without Flush.
func BenchmarkAppendConcurrentNoFsync(b *testing.B) { benchConcurrent(b, 8, false) }

// BenchmarkOffsetLookup reads one batch at a random offset from logs of
// 10^5 and 10^7 records (10-record batches, default segment and index
// sizes): the cost should not grow with the log.
func BenchmarkOffsetLookup(b *testing.B) {
	for _, records := range []int{1e5, 1e7} {
		b.Run(strconv.Itoa(records), func(b *testing.B) {
			l := benchLog(b, DefaultConfig())
			batch := makeBatch(b, spec{records: 10, valueSize: 10, ts: 1})
			for range records / 10 {
				if _, err := l.Append(batch, leader(1)); err != nil {
					b.Fatal(err)
				}
			}
			leo := l.LogEndOffset()
			rng := rand.New(rand.NewPCG(1, 2))
			offsets := make([]int64, 4096)
			for i := range offsets {
				offsets[i] = rng.Int64N(leo)
			}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				res, err := l.Read(offsets[i%len(offsets)], 1, math.MaxInt64, true)
				if err != nil || res.Region.Len == 0 {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkRecovery opens a 256 MiB log (four 64 MiB segments of 16 KiB
// batches) with no clean marker, a recovery point of 0 and no index files:
// every batch is read and CRC-checked and every index rebuilt (with its
// indexes, recovery would read only what they do not cover). The data is
// in the page cache (it was just written), so this measures the scan, not
// the disk; BenchmarkRecoveryCold (Linux) evicts it first.
func BenchmarkRecovery(b *testing.B) { benchRecovery(b, nil) }

func benchRecovery(b *testing.B, evict func(b *testing.B, dir string)) {
	cfg := DefaultConfig()
	cfg.SegmentBytes = 64 << 20
	dir := filepath.Join(b.TempDir(), "bench-0")
	l := openTestLog(b, vfs.Default, dir, cfg, LogOptions{})
	batch := benchBatch(b)
	for l.Size() < 256<<20 {
		if _, err := l.Append(batch, leader(1)); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Flush(l.LogEndOffset()); err != nil {
		b.Fatal(err)
	}
	size, end := l.Size(), l.LogEndOffset()
	l.Close()
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		indexes, _ := filepath.Glob(filepath.Join(dir, "*index"))
		for _, name := range indexes {
			if err := os.Remove(name); err != nil {
				b.Fatal(err)
			}
		}
		if evict != nil {
			evict(b, dir)
		}
		b.StartTimer()
		r := openTestLog(b, vfs.Default, dir, cfg, LogOptions{})
		if r.LogEndOffset() != end {
			b.Fatalf("recovered to %d, want %d", r.LogEndOffset(), end)
		}
		b.StopTimer()
		r.Close()
		b.StartTimer()
	}
}

// TestAppendHeap appends STRATA_HEAP_TEST_GIB GiB (10 for the figure in
// BENCHMARKS.md) of 16 KiB batches and checks the Go heap stays under 64
// MiB: the page cache is the cache. Retention keeps the disk use to 2 GiB.
// Skipped unless the variable is set.
func TestAppendHeap(t *testing.T) {
	gib, _ := strconv.Atoi(os.Getenv("STRATA_HEAP_TEST_GIB"))
	if gib <= 0 {
		t.Skip("set STRATA_HEAP_TEST_GIB to run")
	}
	cfg := DefaultConfig()
	cfg.RetentionBytes = 2 << 30
	cfg.FileDeleteDelayMs = 0
	l := openTestLog(t, vfs.Default, filepath.Join(t.TempDir(), "heap-0"), cfg, LogOptions{})
	defer l.Close()
	batch := benchBatch(t)
	total := int64(gib) << 30
	var ms runtime.MemStats
	var peak uint64
	start := time.Now()
	for written := int64(0); written < total; written += int64(len(batch)) {
		if _, err := l.Append(batch, leader(1)); err != nil {
			t.Fatal(err)
		}
		if written%(256<<20) < int64(len(batch)) {
			if _, err := l.EnforceRetention(time.Now()); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	runtime.ReadMemStats(&ms)
	peak = max(peak, ms.HeapInuse)
	t.Logf("appended %d GiB in %v (%.0f MB/s); peak HeapInuse %.1f MiB, HeapSys %.1f MiB, %d segments at the end, %d GCs",
		gib, time.Since(start).Round(time.Millisecond), float64(total)/time.Since(start).Seconds()/1e6,
		float64(peak)/(1<<20), float64(ms.HeapSys)/(1<<20), l.NumSegments(), ms.NumGC)
	if peak >= 64<<20 {
		t.Fatalf("heap reached %d MiB", peak>>20)
	}
}
