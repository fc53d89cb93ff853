package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

func TestOffsetForTimestamp(t *testing.T) {
	for codec := record.CodecNone; codec <= record.CodecZstd; codec++ {
		l := openTestLog(t, vfs.NewMem(), "/d/t-0", testConfig(), LogOptions{})
		// Records with non-monotonic timestamps across batches and within
		// them; the answer is the first offset whose timestamp >= target.
		rng := rand.New(rand.NewPCG(uint64(codec), 9))
		type rec struct{ off, ts int64 }
		var recs []rec
		off := int64(0)
		for i := range 120 {
			n := 1 + rng.IntN(6)
			ts := int64(1000 + i*20 - rng.IntN(40))
			step := int64(rng.IntN(7)) - 2
			mustAppend(t, l, makeBatch(t, spec{records: n, valueSize: 40, ts: ts, tsStep: step, codec: codec}), leader(0))
			for j := range n {
				recs = append(recs, rec{off, ts + int64(j)*step})
				off++
			}
		}
		for target := int64(900); target < 3500; target += 7 {
			wantOff, wantTS, wantOK := int64(-1), int64(-1), false
			for _, r := range recs {
				if r.ts >= target {
					wantOff, wantTS, wantOK = r.off, r.ts, true
					break
				}
			}
			off, ts, ok := l.OffsetForTimestamp(target)
			if off != wantOff || ts != wantTS || ok != wantOK {
				t.Fatalf("codec %d: OffsetForTimestamp(%d) = %d, %d, %v; want %d, %d, %v", codec, target, off, ts, ok, wantOff, wantTS, wantOK)
			}
		}
		maxTS, maxOff := int64(-1), int64(-1)
		for _, r := range recs {
			if r.ts > maxTS {
				maxTS, maxOff = r.ts, r.off
			}
		}
		if ts, o := l.MaxTimestamp(); ts != maxTS || o != maxOff {
			t.Fatalf("codec %d: MaxTimestamp = %d at %d, want %d at %d", codec, ts, o, maxTS, maxOff)
		}
		l.Close()
	}
}

func TestRetentionByTime(t *testing.T) {
	cfg := testConfig()
	cfg.RetentionMs = 1000
	clock := &fixedClock{time.UnixMilli(100_000)}
	l := openTestLog(t, vfs.NewMem(), "/d/t-0", cfg, LogOptions{Now: clock.now})
	defer l.Close()
	// Batches stamped 10ms apart from 50s; segments roll every ~4 KiB.
	for i := range 200 {
		mustAppend(t, l, makeBatch(t, spec{records: 2, valueSize: 100, ts: 50_000 + int64(i)*10}), leader(0))
	}
	segs := l.SegmentBaseOffsets()
	if len(segs) < 5 {
		t.Fatalf("%d segments", len(segs))
	}
	// Nothing expired at 50s+1s.
	if n, err := l.EnforceRetention(time.UnixMilli(50_000)); n != 0 || err != nil {
		t.Fatalf("deleted %d, %v", n, err)
	}
	// At t, a segment goes once its max timestamp is older than t-1000.
	now := time.UnixMilli(50_000 + 1000 + 1000) // batches up to 50,999ms expired
	n, err := l.EnforceRetention(now)
	if err != nil || n == 0 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	start := l.LogStartOffset()
	if start != l.SegmentBaseOffsets()[0] {
		t.Fatalf("log start %d, first segment %d", start, l.SegmentBaseOffsets()[0])
	}
	// Every remaining batch but those of the first segment is newer than
	// the cutoff, and the first remaining segment holds one that is not
	// expired.
	res, _ := l.Read(start, math.MaxInt32, math.MaxInt64, true)
	data, _ := res.Region.ReadAll(nil)
	var maxTS int64
	record.Batches(data, func(h record.Header, _ []byte) bool { maxTS = max(maxTS, h.MaxTimestamp); return true })
	if now.UnixMilli()-maxTS > cfg.RetentionMs {
		t.Fatalf("first remaining segment expired: max ts %d", maxTS)
	}
	if _, err := l.Read(start-1, 100, math.MaxInt64, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below start: %v", err)
	}
	// Far in the future everything but the active segment goes.
	if _, err := l.EnforceRetention(time.UnixMilli(1 << 50)); err != nil {
		t.Fatal(err)
	}
	if l.NumSegments() != 1 || l.LogStartOffset() != l.SegmentBaseOffsets()[0] {
		t.Fatalf("%d segments left", l.NumSegments())
	}
}

func TestRetentionBySize(t *testing.T) {
	cfg := testConfig()
	cfg.RetentionBytes = 10_000
	l := openTestLog(t, vfs.NewMem(), "/d/t-0", cfg, LogOptions{})
	defer l.Close()
	for range 300 {
		mustAppend(t, l, makeBatch(t, spec{records: 1, valueSize: 150}), leader(0))
	}
	before := l.Size()
	// Bounded by a high watermark in the first segment, nothing goes.
	l.retentionBound.Store(l.SegmentBaseOffsets()[1] - 1)
	if n, err := l.EnforceRetention(time.Now()); n != 0 || err != nil {
		t.Fatalf("deleted %d past the bound, %v", n, err)
	}
	l.retentionBound.Store(math.MaxInt64)
	n, err := l.EnforceRetention(time.Now())
	if err != nil || n == 0 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	// Kafka's rule: delete the oldest segment while the log stays at or
	// above the limit without it; so what remains is over the limit by
	// less than its first segment.
	first := l.segmentList()[0].size.Load()
	if l.Size() < cfg.RetentionBytes || l.Size()-first >= cfg.RetentionBytes {
		t.Fatalf("size %d of %d, first segment %d, limit %d", l.Size(), before, first, cfg.RetentionBytes)
	}
}

func TestDeleteRecordsBefore(t *testing.T) {
	fs := vfs.NewMem()
	l := openTestLog(t, fs, "/d/t-0", testConfig(), LogOptions{})
	defer l.Close()
	buildLog(t, l, 100, rand.New(rand.NewPCG(5, 5)))
	l.AssignEpoch(7, l.LogEndOffset())
	for _, o := range []int64{0, 50, 120} {
		if err := l.Snapshots().Write(o, []byte{byte(o)}); err != nil {
			t.Fatal(err)
		}
	}
	segs := l.SegmentBaseOffsets()
	target := segs[3] + 1
	got, err := l.DeleteRecordsBefore(target)
	if err != nil || got != target || l.LogStartOffset() != target {
		t.Fatalf("DeleteRecordsBefore = %d, %v", got, err)
	}
	if first := l.SegmentBaseOffsets()[0]; first != segs[3] {
		t.Fatalf("first segment %d, want %d", first, segs[3])
	}
	if _, err := l.Read(target-1, 100, math.MaxInt64, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatal("read below the new start succeeded")
	}
	if res, err := l.Read(target, 100, math.MaxInt64, true); err != nil || res.FirstBatchOffset > target {
		t.Fatalf("read at start: %+v %v", res, err)
	}
	if e := l.Epochs(); e[0].StartOffset != target {
		t.Fatalf("epochs %v", e)
	}
	// Snapshots below the start are pruned, the latest kept.
	var wantSnaps []int64
	for _, o := range []int64{0, 50, 120} {
		if o >= target || o == 120 {
			wantSnaps = append(wantSnaps, o)
		}
	}
	if got := l.Snapshots().Offsets(); fmt.Sprint(got) != fmt.Sprint(wantSnaps) {
		t.Fatalf("snapshots %v, want %v (log start %d)", got, wantSnaps, target)
	}
	if _, err := l.DeleteRecordsBefore(l.LogEndOffset() + 1); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatal("delete past the end succeeded")
	}
	if got, _ := l.DeleteRecordsBefore(1); got != target {
		t.Fatal("delete below the start moved it")
	}
}

func TestTruncateAcrossSegments(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs vfs.FS, dir string) {
		l := openTestLog(t, fs, dir, testConfig(), LogOptions{})
		defer l.Close()
		rng := rand.New(rand.NewPCG(6, 6))
		var stored [][]byte
		for i := range 150 {
			b := makeBatch(t, spec{records: 1 + rng.IntN(3), valueSize: 100, ts: int64(1000 + i)})
			mustAppend(t, l, b, leader(int32(i/30)))
			stored = append(stored, b)
		}
		for _, o := range []int64{10, 100, 200, l.LogEndOffset()} {
			l.Snapshots().Write(o, []byte("s"))
		}
		// Truncate into the middle of a batch in an early segment.
		h, _ := record.ParseHeader(stored[60])
		target := h.BaseOffset + int64(h.LastOffsetDelta)/2 + min(int64(h.LastOffsetDelta), 1)
		if err := l.TruncateTo(target); err != nil {
			t.Fatal(err)
		}
		want := h.BaseOffset
		if target == h.BaseOffset {
			want = h.BaseOffset
		}
		if l.LogEndOffset() != want {
			t.Fatalf("end %d after truncating to %d, want %d", l.LogEndOffset(), target, want)
		}
		got := readAllBatches(t, l)
		if len(got) != 60 || !bytes.Equal(got[59], stored[59]) {
			t.Fatalf("%d batches after truncation", len(got))
		}
		if e := l.Epochs(); len(e) != 2 || e[1] != (EpochEntry{1, 30}) && e[1].Epoch != 1 {
			t.Fatalf("epochs %v", e)
		}
		for _, o := range l.Snapshots().Offsets() {
			if o > want {
				t.Fatalf("snapshot %d above the end survived", o)
			}
		}
		if ts, _ := l.MaxTimestamp(); ts != 1059 {
			t.Fatalf("max timestamp %d after truncation", ts)
		}
		// Appending continues at the new end, in the truncated segment,
		// which is active again with room in its indexes.
		for i := range 40 {
			b := makeBatch(t, spec{records: 2, valueSize: 100, ts: int64(5000 + i)})
			info := mustAppend(t, l, b, leader(9))
			if i == 0 && info.FirstOffset != want {
				t.Fatalf("append after truncation at %d", info.FirstOffset)
			}
		}
		// The truncation survived a restart (recovery from scratch).
		end := l.LogEndOffset()
		l.Close()
		l = openTestLog(t, fs, dir, testConfig(), LogOptions{})
		defer l.Close()
		if l.LogEndOffset() != end {
			t.Fatalf("end %d after reopen, want %d", l.LogEndOffset(), end)
		}
		if err := l.TruncateTo(0); err != nil || l.LogEndOffset() != 0 || l.Size() != 0 {
			t.Fatalf("truncate to 0: %v, end %d", err, l.LogEndOffset())
		}
	})
}

func TestTruncateFullyAndStartAt(t *testing.T) {
	fs := vfs.NewMem()
	l := openTestLog(t, fs, "/d/t-0", testConfig(), LogOptions{})
	defer l.Close()
	buildLog(t, l, 50, rand.New(rand.NewPCG(7, 7)))
	l.Snapshots().Write(5, nil)
	if err := l.TruncateFullyAndStartAt(1000); err != nil {
		t.Fatal(err)
	}
	if l.LogStartOffset() != 1000 || l.LogEndOffset() != 1000 || l.RecoveryPoint() != 1000 || l.NumSegments() != 1 ||
		len(l.Epochs()) != 0 || len(l.Snapshots().Offsets()) != 0 {
		t.Fatalf("start %d end %d segs %d", l.LogStartOffset(), l.LogEndOffset(), l.NumSegments())
	}
	if info := mustAppend(t, l, makeBatch(t, spec{}), leader(1)); info.FirstOffset != 1000 {
		t.Fatalf("appended at %d", info.FirstOffset)
	}
	names, _ := fs.List("/d/t-0")
	for _, n := range names {
		if n != "00000000000000001000.log" && n != "00000000000000001000.index" &&
			n != "00000000000000001000.timeindex" && n != LeaderEpochCheckpointFile {
			t.Fatalf("left behind %s", n)
		}
	}
}

// Regions handed out before a deletion stay readable until
// file.delete.delay.ms has passed; then the files go.
func TestDeletedSegmentsOutliveRegions(t *testing.T) {
	cfg := testConfig()
	cfg.FileDeleteDelayMs = 50
	dir := tempLogDir(t, "t-0")
	l := openTestLog(t, vfs.Default, dir, cfg, LogOptions{})
	defer l.Close()
	buildLog(t, l, 100, rand.New(rand.NewPCG(8, 8)))
	res, err := l.Read(0, 1000, math.MaxInt64, true)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := res.Region.ReadAll(nil)
	if _, err := l.DeleteRecordsBefore(l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	if l.deletes.len() == 0 {
		t.Fatal("no delayed deletions")
	}
	if !vfs.Exists(vfs.Default, filepath.Join(dir, "00000000000000000000.log.deleted")) {
		t.Fatal("deleted segment not renamed")
	}
	got, err := res.Region.ReadAll(nil)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("region unreadable after deletion: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for l.deletes.len() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("delayed deletions never ran")
		}
		time.Sleep(time.Millisecond)
	}
	if vfs.Exists(vfs.Default, filepath.Join(dir, "00000000000000000000.log.deleted")) {
		t.Fatal("deleted segment file not removed")
	}
}

// Readers racing appends, retention and truncation never panic; while
// deleted files outlive them, and with no truncation in place (whose races
// Kafka shares: a region may come up short), they see only out-of-range
// errors.
func TestReadsRaceMutations(t *testing.T) {
	for _, delay := range []int64{0, 60000} {
		cfg := testConfig()
		cfg.RetentionBytes = 20000
		cfg.FileDeleteDelayMs = delay
		l := openTestLog(t, vfs.Default, tempLogDir(t, "t-0"), cfg, LogOptions{})
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var reads atomic.Int64
		for r := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(r), 1))
				for {
					select {
					case <-stop:
						return
					default:
					}
					start, end := l.LogStartOffset(), l.LogEndOffset()
					off := start + rng.Int64N(end-start+1)
					res, err := l.Read(off, 2000, math.MaxInt64, true)
					if err == nil {
						_, err = res.Region.ReadAll(nil)
					}
					if err != nil && !errors.Is(err, ErrOffsetOutOfRange) && delay > 0 {
						t.Errorf("read at %d: %v", off, err)
						return
					}
					l.OffsetForTimestamp(rng.Int64N(3000))
					reads.Add(1)
				}
			}()
		}
		for i := range 600 {
			mustAppend(t, l, makeBatch(t, spec{records: 2, valueSize: 100, ts: int64(i)}), leader(0))
			switch i % 50 {
			case 10:
				l.EnforceRetention(time.Now())
			case 30:
				if delay == 0 {
					l.TruncateTo(l.LogEndOffset() - 5)
				}
			}
		}
		close(stop)
		wg.Wait()
		l.Close()
		if reads.Load() == 0 {
			t.Fatal("no reads ran")
		}
	}
}
