package storage

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-io/strata/internal/vfs"
)

func TestAbortedTxnIndex(t *testing.T) {
	dir := tempLogDir(t, "txn-0")
	cfg := testConfig()
	l := openTestLog(t, vfs.Default, dir, cfg, LogOptions{})
	for range 40 {
		mustAppend(t, l, makeBatch(t, spec{records: 5, valueSize: 100}), leader(0))
	}
	if l.NumSegments() < 3 {
		t.Fatalf("%d segments, want several", l.NumSegments())
	}
	entries := []AbortedTxn{
		{ProducerID: 1, FirstOffset: 3, LastOffset: 10, LastStableOffset: 11},
		{ProducerID: 2, FirstOffset: 12, LastOffset: 60, LastStableOffset: 50},
		{ProducerID: 3, FirstOffset: 50, LastOffset: 70, LastStableOffset: 71},
		{ProducerID: 4, FirstOffset: 150, LastOffset: 190, LastStableOffset: 191},
	}
	for _, a := range entries {
		if err := l.TxnIndex().Append(a); err != nil {
			t.Fatal(err)
		}
	}
	// Appending the same marker again (a replayed log) adds nothing.
	if err := l.TxnIndex().Append(entries[1]); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log, from, upTo int64, want ...AbortedTxn) {
		t.Helper()
		if got := l.TxnIndex().Aborted(from, upTo); !slices.Equal(got, want) {
			t.Fatalf("AbortedTxns(%d, %d) = %+v, want %+v", from, upTo, got, want)
		}
	}
	check(l, 0, 200, entries...)
	check(l, 11, 40, entries[1])
	check(l, 11, 55, entries[1], entries[2])
	check(l, 71, 100)
	check(l, 0, 3)
	check(l, 0, 4, entries[0])

	// Kafka's file format: 34-byte entries, in the file of the segment
	// holding the marker.
	files := 0
	for _, base := range l.SegmentBaseOffsets() {
		data, err := vfs.ReadFile(vfs.Default, filepath.Join(dir, segmentName(base)+txnIndexSuffix))
		if err != nil {
			continue
		}
		files++
		for _, a := range decodeTxnIndex(data) {
			if a.LastOffset < base {
				t.Fatalf("entry %+v in the index of segment %d", a, base)
			}
		}
		if len(data)%abortedTxnSize != 0 {
			t.Fatalf("index of %d holds %d bytes", base, len(data))
		}
	}
	if files < 2 {
		t.Fatalf("%d index files", files)
	}

	// Reopened, the same; truncated, the entries at and past the
	// truncation go, on disk too.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, vfs.Default, dir, cfg, LogOptions{})
	check(l, 0, 200, entries...)
	if err := l.TruncateTo(65); err != nil {
		t.Fatal(err)
	}
	check(l, 0, 200, entries[:2]...)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, vfs.Default, dir, cfg, LogOptions{})
	defer l.Close()
	check(l, 0, 200, entries[:2]...)
	if err := l.TruncateFullyAndStartAt(100); err != nil {
		t.Fatal(err)
	}
	check(l, 0, 200)
}
