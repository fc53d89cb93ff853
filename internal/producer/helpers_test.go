package producer

import (
	"slices"
	"testing"

	"github.com/strata-io/strata/internal/record"
)

// batch builds the header of a produced batch of n records.
func batch(pid int64, epoch int16, seq, n int32) record.Header {
	return record.Header{
		Magic:           record.CurrentMagic,
		ProducerID:      pid,
		ProducerEpoch:   epoch,
		BaseSequence:    seq,
		LastOffsetDelta: n - 1,
		NumRecords:      n,
		BaseTimestamp:   1000,
		MaxTimestamp:    1000,
	}
}

// plain builds a batch of n records without a producer id.
func plain(n int32) record.Header { return batch(-1, -1, -1, n) }

// at returns h with its max timestamp set.
func at(h record.Header, ts int64) record.Header {
	h.BaseTimestamp, h.MaxTimestamp = ts, ts
	return h
}

// testLog drives a PartitionState the way the broker's produce path does and
// keeps the headers it "appended", with their offsets, as the log would.
type testLog struct {
	state *PartitionState
	log   []record.Header
	leo   int64
	// failAppend makes the next append fail after the checks pass.
	failAppend bool
}

func newTestLog() *testLog { return &testLog{state: NewPartitionState()} }

// produce handles one request's batches for the partition and returns the
// base offset answered, whether it was a duplicate, and the error.
func (l *testLog) produce(hs ...record.Header) (base int64, dup bool, err error) {
	a := l.state.Begin()
	var first *BatchMetadata
	for _, h := range hs {
		d, err := a.Check(h)
		if err != nil {
			return -1, false, err
		}
		if d != nil && first == nil {
			first = d
		}
	}
	if first != nil {
		return first.FirstOffset, true, nil
	}
	if l.failAppend {
		l.failAppend = false
		return -1, false, errAppend
	}
	base = l.leo
	for _, h := range hs {
		h.BaseOffset = l.leo
		l.log = append(l.log, h)
		l.leo = h.NextOffset()
	}
	a.Commit(base)
	return base, false, nil
}

type appendError struct{}

func (appendError) Error() string { return "test: append failed" }

var errAppend error = appendError{}

// replay rebuilds a fresh state from the log with Update.
func (l *testLog) replay(t *testing.T) *PartitionState {
	t.Helper()
	s := NewPartitionState()
	for _, h := range l.log {
		s.Update(h)
	}
	return s
}

// equalStates fails the test unless a and b know the same producers with
// the same epochs, timestamps and cached batches.
func equalStates(t *testing.T, a, b *PartitionState) {
	t.Helper()
	if a.Len() != b.Len() {
		t.Fatalf("states know %d and %d producers", a.Len(), b.Len())
	}
	for id, ea := range a.producers {
		eb := b.producers[id]
		if eb == nil {
			t.Fatalf("producer %d missing", id)
		}
		if ea.epoch != eb.epoch || ea.lastTimestamp != eb.lastTimestamp ||
			ea.coordinatorEpoch != eb.coordinatorEpoch || ea.currentTxnFirstOffset != eb.currentTxnFirstOffset ||
			!slices.Equal(ea.batches[:ea.count], eb.batches[:eb.count]) {
			t.Fatalf("producer %d differs:\n%+v\n%+v", id, *ea, *eb)
		}
	}
}
