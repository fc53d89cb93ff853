package storage

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-io/strata/internal/vfs"
)

// fillSegments appends batches until the log has at least n segments.
func fillSegments(t *testing.T, l *Log, n int) {
	t.Helper()
	for l.NumSegments() < n {
		mustAppend(t, l, makeBatch(t, spec{records: 5, valueSize: 100}), leader(0))
	}
}

// TestFlushSyncsTxnIndex: a .txnindex entry below the recovery point
// survives a power loss (only synced data and synced directory entries
// do), because Flush syncs the files written to and their directory, and
// an entry whose marker a flush already passed is synced at once. Recovery
// trusts the entries of the segments before the recovery point.
func TestFlushSyncsTxnIndex(t *testing.T) {
	dir := "/data/txn-0"
	fs := newMem(t, dir)
	cfg := testConfig()
	l := openTestLog(t, fs, dir, cfg, LogOptions{})
	fillSegments(t, l, 3)
	bases := l.SegmentBaseOffsets()
	first := AbortedTxn{ProducerID: 1, FirstOffset: 2, LastOffset: bases[1] - 1, LastStableOffset: bases[1]}
	if err := l.TxnIndex().Append(first); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	// The recovery point is past this marker already.
	second := AbortedTxn{ProducerID: 2, FirstOffset: bases[1], LastOffset: bases[1] + 4, LastStableOffset: bases[1] + 5}
	if err := l.TxnIndex().Append(second); err != nil {
		t.Fatal(err)
	}
	rp := l.RecoveryPoint()
	crashed := fs.CrashClone()
	l.Close()

	l = openTestLog(t, crashed, dir, cfg, LogOptions{RecoveryPoint: rp})
	defer l.Close()
	if got, want := l.TxnIndex().Aborted(0, l.LogEndOffset()), []AbortedTxn{first, second}; !slices.Equal(got, want) {
		t.Fatalf("after a power loss: %+v, want %+v", got, want)
	}
	if got, want := l.TxnIndex().SuspectFrom(), bases[len(bases)-1]; got != want {
		t.Fatalf("TxnIndexSuspectFrom = %d, want %d (the segment holding the recovery point)", got, want)
	}
}

// TestTxnIndexSuspectFrom: where the replica must rebuild the index from.
func TestTxnIndexSuspectFrom(t *testing.T) {
	dir := tempLogDir(t, "txn-0")
	cfg := testConfig()
	l := openTestLog(t, vfs.Default, dir, cfg, LogOptions{})
	fillSegments(t, l, 4)
	bases := l.SegmentBaseOffsets()
	a := AbortedTxn{ProducerID: 1, FirstOffset: 1, LastOffset: 3, LastStableOffset: 4}
	if err := l.TxnIndex().Append(a); err != nil {
		t.Fatal(err)
	}
	leo := l.LogEndOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts LogOptions
		tear bool
		want int64
	}{
		{"clean shutdown", LogOptions{CleanShutdown: true}, false, leo},
		{"crash, recovery point in the third segment", LogOptions{RecoveryPoint: bases[2] + 1}, false, bases[2]},
		{"crash, nothing flushed", LogOptions{}, false, 0},
		{"clean shutdown, torn index of the first segment", LogOptions{CleanShutdown: true}, true, 0},
	} {
		if c.tear {
			path := filepath.Join(dir, segmentName(0)+txnIndexSuffix)
			f, err := vfs.Default.OpenReadWrite(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0, 0, 1, 2}, abortedTxnSize); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		l := openTestLog(t, vfs.Default, dir, cfg, c.opts)
		if got := l.TxnIndex().SuspectFrom(); got != c.want {
			t.Errorf("%s: TxnIndexSuspectFrom = %d, want %d", c.name, got, c.want)
		}
		if got := l.TxnIndex().Aborted(0, leo); !slices.Equal(got, []AbortedTxn{a}) {
			t.Errorf("%s: entries %+v, want %+v", c.name, got, a)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRebuildAbortedTxns: the entries from the rebuild's start are
// replaced on disk, but for those the replay could not know.
func TestRebuildAbortedTxns(t *testing.T) {
	dir := tempLogDir(t, "txn-0")
	cfg := testConfig()
	l := openTestLog(t, vfs.Default, dir, cfg, LogOptions{})
	fillSegments(t, l, 4)
	bases := l.SegmentBaseOffsets()
	kept := AbortedTxn{ProducerID: 1, FirstOffset: 1, LastOffset: 3, LastStableOffset: 4}                    // below the rebuild
	stale := AbortedTxn{ProducerID: 2, FirstOffset: bases[1], LastOffset: bases[1] + 2, LastStableOffset: 0} // replaced
	unknown := AbortedTxn{ProducerID: 3, FirstOffset: 0, LastOffset: bases[2] + 1, LastStableOffset: 9}      // kept: the replay cannot know
	wrong := AbortedTxn{ProducerID: 4, FirstOffset: bases[2], LastOffset: bases[2] + 3, LastStableOffset: 9} // not an abort: dropped
	for _, a := range []AbortedTxn{kept, stale, unknown, wrong} {
		if err := l.TxnIndex().Append(a); err != nil {
			t.Fatal(err)
		}
	}
	fixed := stale
	fixed.LastStableOffset = stale.LastOffset + 1
	added := AbortedTxn{ProducerID: 5, FirstOffset: bases[2] + 4, LastOffset: bases[3] + 1, LastStableOffset: bases[3] + 2}
	err := l.TxnIndex().Rebuild(bases[1], []AbortedTxn{added, fixed}, func(a AbortedTxn) bool { return a.LastOffset == unknown.LastOffset })
	if err != nil {
		t.Fatal(err)
	}
	want := []AbortedTxn{kept, fixed, unknown, added}
	if got := l.TxnIndex().Aborted(0, l.LogEndOffset()); !slices.Equal(got, want) {
		t.Fatalf("rebuilt: %+v, want %+v", got, want)
	}
	if err := l.TxnIndex().Rebuild(bases[1], []AbortedTxn{{ProducerID: 6, FirstOffset: 0, LastOffset: l.LogEndOffset()}}, nil); err == nil {
		t.Fatal("an entry past the log end was taken")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, vfs.Default, dir, cfg, LogOptions{CleanShutdown: true})
	defer l.Close()
	if got := l.TxnIndex().Aborted(0, l.LogEndOffset()); !slices.Equal(got, want) {
		t.Fatalf("reopened: %+v, want %+v", got, want)
	}
	// Each entry in the file of the segment holding its marker.
	for i, base := range bases {
		data, err := vfs.ReadFile(vfs.Default, filepath.Join(dir, segmentName(base)+txnIndexSuffix))
		if err != nil {
			t.Fatalf("segment %d: %v", base, err)
		}
		for _, a := range decodeTxnIndex(data) {
			if a.LastOffset < base || (i+1 < len(bases) && a.LastOffset >= bases[i+1]) {
				t.Fatalf("entry %+v in the file of segment %d", a, base)
			}
		}
	}
}
