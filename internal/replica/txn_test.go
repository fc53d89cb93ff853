package replica

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
)

// txnBatch is batch with the transactional attribute.
func txnBatch(n int, pid int64, seq int32) []byte {
	b := batch(n, pid, seq)
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|record.AttrTransactional)
	binary.BigEndian.PutUint32(b[17:], record.Checksum(b))
	return b
}

func TestTransactionsOnTheLeader(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	p := newLeader(t, l, Settings{MinInsyncReplicas: 1})
	mustAppend := func(b []byte) {
		t.Helper()
		if _, err := p.AppendAsLeader(b, -1); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(batch(2, -1, 0))   // 0-1
	mustAppend(txnBatch(3, 7, 0)) // 2-4, producer 7's transaction
	mustAppend(txnBatch(2, 8, 0)) // 5-6, producer 8's
	if lso := p.LastStableOffset(); lso != 2 {
		t.Fatalf("last stable offset %d, want 2", lso)
	}
	// read_committed stops at the last stable offset.
	res, err := p.Read(ReadRequest{Offset: 0, CurrentLeaderEpoch: -1, MaxBytes: 1 << 20, ReadCommitted: true})
	if err != nil || res.Limit != 2 || res.LastStableOffset != 2 || res.HighWatermark != 7 {
		t.Fatalf("read_committed: %+v %v", res, err)
	}
	m, err := p.AppendMarker(7, 0, false, 4) // 7: abort 7's
	if err != nil || m.Offset != 7 {
		t.Fatalf("marker: %+v %v", m, err)
	}
	// A marker from an older coordinator than producer 7's last one.
	if _, err := p.AppendMarker(7, 0, true, 3); !errors.Is(err, producer.ErrCoordinatorFenced) {
		t.Fatalf("marker from an old coordinator: %v", err)
	}
	if _, err := p.AppendMarker(8, 0, true, 4); err != nil { // 8: commit 8's
		t.Fatal(err)
	}
	if lso := p.LastStableOffset(); lso != 9 {
		t.Fatalf("last stable offset %d, want 9", lso)
	}
	want := []storage.AbortedTxn{{ProducerID: 7, FirstOffset: 2, LastOffset: 7, LastStableOffset: 5}}
	res, err = p.Read(ReadRequest{Offset: 0, CurrentLeaderEpoch: -1, MaxBytes: 1 << 20, ReadCommitted: true})
	if err != nil || !slices.Equal(res.AbortedTxns, want) {
		t.Fatalf("aborted transactions %+v (%v), want %+v", res.AbortedTxns, err, want)
	}
	// The producer's next batch opens a new transaction.
	mustAppend(txnBatch(1, 7, 3)) // 9
	if lso := p.LastStableOffset(); lso != 9 {
		t.Fatalf("last stable offset %d, want 9", lso)
	}

	// Crash recovery: the index files and the snapshots are lost; opening
	// the log replays the markers and indexes the abort again.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "orders-0"))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".txnindex") || strings.HasSuffix(e.Name(), ".snapshot") {
			if err := os.Remove(filepath.Join(dir, "orders-0", e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	l = openLog(t, dir)
	defer l.Close()
	p = newLeader(t, l, Settings{MinInsyncReplicas: 1})
	if got := l.TxnIndex().Aborted(0, 100); !slices.Equal(got, want) {
		t.Fatalf("after recovery: %+v, want %+v", got, want)
	}
	if lso := p.LastStableOffset(); lso != 9 {
		t.Fatalf("last stable offset %d after recovery, want 9 (producer 7's open transaction)", lso)
	}
}
