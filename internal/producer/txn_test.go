package producer

import (
	"errors"
	"testing"

	"github.com/strata-io/strata/internal/record"
)

// marker builds the header of a marker batch at offset for pid.
func marker(pid int64, epoch int16, offset int64) record.Header {
	h := batch(pid, epoch, -1, 1)
	h.Attributes = record.AttrTransactional | record.AttrControl
	h.BaseOffset = offset
	return h
}

func TestTransactionsOnAPartition(t *testing.T) {
	l := newTestLog()
	if got := l.state.FirstUnstableOffset(); got != -1 {
		t.Fatalf("first unstable offset of an empty state %d", got)
	}
	mustProduce := func(want int64, hs ...record.Header) {
		t.Helper()
		base, _, err := l.produce(hs...)
		if err != nil || base != want {
			t.Fatalf("produce: base %d err %v, want %d", base, err, want)
		}
	}
	mustProduce(0, plain(2))
	mustProduce(2, txnal(batch(7, 0, 0, 3)))
	mustProduce(5, txnal(batch(8, 0, 0, 1)))
	mustProduce(6, txnal(batch(7, 0, 3, 1)))
	if got := l.state.FirstUnstableOffset(); got != 2 {
		t.Fatalf("first unstable offset %d, want 2", got)
	}
	// The coordinator's markers: producer 7 commits, 8 aborts.
	if err := l.state.CheckMarker(7, 0, 3); err != nil {
		t.Fatal(err)
	}
	done := l.state.EndTxn(marker(7, 0, 7), record.Marker{Commit: true, CoordinatorEpoch: 3})
	if done != (CompletedTxn{ProducerID: 7, FirstOffset: 2, LastOffset: 7}) {
		t.Fatalf("completed %+v", done)
	}
	if got := l.state.FirstUnstableOffset(); got != 5 {
		t.Fatalf("first unstable offset %d, want 5", got)
	}
	// A marker from an older coordinator, or for an older epoch, is fenced.
	if err := l.state.CheckMarker(7, 0, 2); !errors.Is(err, ErrCoordinatorFenced) {
		t.Fatalf("old coordinator: %v", err)
	}
	// A fencing abort bumps the epoch: the zombie's next batch is refused.
	done = l.state.EndTxn(marker(8, 1, 8), record.Marker{CoordinatorEpoch: 3})
	if done != (CompletedTxn{ProducerID: 8, FirstOffset: 5, LastOffset: 8, Aborted: true}) {
		t.Fatalf("completed %+v", done)
	}
	if _, _, err := l.produce(txnal(batch(8, 0, 1, 1))); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("zombie batch: %v", err)
	}
	if err := l.state.CheckMarker(8, 0, 3); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("old epoch marker: %v", err)
	}
	if got := l.state.FirstUnstableOffset(); got != -1 {
		t.Fatalf("first unstable offset %d after both ended", got)
	}
	// The open transaction survives a snapshot.
	l.leo = 9 // the two markers
	mustProduce(9, txnal(batch(7, 0, 4, 1)))
	restored := NewPartitionState()
	if err := restored.LoadSnapshot(l.state.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if got := restored.FirstUnstableOffset(); got != 9 {
		t.Fatalf("first unstable offset after a snapshot %d, want 9", got)
	}
}
