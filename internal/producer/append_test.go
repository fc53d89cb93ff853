package producer

import (
	"errors"
	"math"
	"testing"

	"github.com/strata-io/strata/internal/record"
	"github.com/twmb/franz-go/pkg/kerr"
)

// step is one produce request for the partition and what the broker must
// answer: the base offset (the original one for a duplicate) or an error.
type step struct {
	req        []record.Header
	base       int64
	dup        bool
	err        error
	failAppend bool // the log append fails after the checks pass
}

func ok(base int64, req ...record.Header) step    { return step{req: req, base: base} }
func dupOf(base int64, req ...record.Header) step { return step{req: req, base: base, dup: true} }
func refused(err error, req ...record.Header) step {
	return step{req: req, err: err}
}

func txnal(h record.Header) record.Header {
	h.Attributes |= record.AttrTransactional
	return h
}

// lastFiveThenOlder appends six batches of producer 1 after three plain
// records, retries each of the last five (duplicates, answered with their
// offsets), then the oldest (no longer cached: out of order, as Kafka
// answers), then goes on.
func lastFiveThenOlder() []step {
	steps := []step{ok(0, plain(3))}
	for i := range int32(6) {
		steps = append(steps, ok(3+2*int64(i), batch(1, 0, 2*i, 2)))
	}
	for i := range int32(5) {
		seq := 2 + 2*i
		steps = append(steps, dupOf(3+int64(seq), batch(1, 0, seq, 2)))
	}
	return append(steps,
		refused(ErrOutOfOrderSequence, batch(1, 0, 0, 2)),
		ok(15, batch(1, 0, 12, 2)),
		// The window moved: seq 2 is gone, seq 4 is the oldest cached.
		refused(ErrOutOfOrderSequence, batch(1, 0, 2, 2)),
		dupOf(7, batch(1, 0, 4, 2)),
	)
}

func TestCheckRules(t *testing.T) {
	const maxSeq = math.MaxInt32
	tests := []struct {
		name  string
		steps []step
	}{
		{"in sequence", []step{
			ok(0, batch(1, 0, 0, 2)),
			ok(2, batch(1, 0, 2, 3)),
			ok(5, batch(1, 0, 5, 1)),
		}},
		{"each of the last five is a duplicate, a sixth-older retry is out of order", lastFiveThenOlder()},
		{"a retry after newer batches is still a duplicate", []step{
			ok(0, batch(1, 0, 0, 1)),
			ok(1, batch(1, 0, 1, 1)),
			ok(2, batch(1, 0, 2, 1)),
			dupOf(1, batch(1, 0, 1, 1)),
			ok(3, batch(1, 0, 3, 1)),
		}},
		{"gap", []step{
			ok(0, batch(1, 0, 0, 2)),
			refused(ErrOutOfOrderSequence, batch(1, 0, 4, 2)),
			refused(ErrOutOfOrderSequence, batch(1, 0, 3, 2)),
			ok(2, batch(1, 0, 2, 2)),
		}},
		{"same first sequence, different length is not a duplicate", []step{
			ok(0, batch(1, 0, 0, 2)),
			refused(ErrOutOfOrderSequence, batch(1, 0, 0, 3)),
		}},
		{"lower epoch is fenced", []step{
			ok(0, batch(1, 3, 0, 2)),
			refused(ErrInvalidProducerEpoch, batch(1, 2, 2, 2)),
			refused(ErrInvalidProducerEpoch, batch(1, 2, 0, 2)),
			ok(2, batch(1, 3, 2, 2)),
		}},
		{"a new epoch starts at sequence 0 and fences the old one", []step{
			ok(0, batch(1, 0, 0, 2)),
			ok(2, batch(1, 0, 2, 2)),
			refused(ErrOutOfOrderSequence, batch(1, 1, 4, 2)),
			ok(4, batch(1, 1, 0, 2)),
			refused(ErrInvalidProducerEpoch, batch(1, 0, 4, 2)),
			// The old epoch's batches are forgotten: their retry is fenced,
			// not a duplicate.
			refused(ErrInvalidProducerEpoch, batch(1, 0, 2, 2)),
			dupOf(4, batch(1, 1, 0, 2)),
			ok(6, batch(1, 1, 2, 2)),
		}},
		{"epochs may skip (a client bumping locally)", []step{
			ok(0, batch(1, 0, 0, 1)),
			ok(1, batch(1, 5, 0, 1)),
		}},
		{"an unknown producer may start at any sequence (Kafka 2.5+)", []step{
			ok(0, batch(9, 0, 1000, 2)),
			ok(2, batch(9, 0, 1002, 2)),
			dupOf(0, batch(9, 0, 1000, 2)),
			ok(4, batch(10, 4, 17, 1)),
		}},
		{"sequence wraps at MaxInt32", []step{
			ok(0, batch(1, 0, maxSeq-1, 2)),
			ok(2, batch(1, 0, 0, 2)),
			dupOf(0, batch(1, 0, maxSeq-1, 2)),
			refused(ErrOutOfOrderSequence, batch(1, 0, maxSeq-1, 4)),
		}},
		{"a batch spanning the wrap", []step{
			ok(0, batch(1, 0, maxSeq-1, 4)), // sequences MaxInt32-1 … 1
			ok(4, batch(1, 0, 2, 1)),
			dupOf(0, batch(1, 0, maxSeq-1, 4)),
		}},
		{"after MaxInt32 comes 0, nothing else", []step{
			ok(0, batch(1, 0, maxSeq, 1)),
			refused(ErrOutOfOrderSequence, batch(1, 0, 1, 1)),
			ok(1, batch(1, 0, 0, 1)),
		}},
		{"negative sequence or epoch is an invalid record", []step{
			refused(ErrInvalidRecord, batch(1, 0, -5, 1)),
			refused(ErrInvalidRecord, batch(1, -1, 0, 1)),
		}},
		{"a non-transactional batch in an open transaction is refused", []step{
			ok(0, txnal(batch(1, 0, 0, 1))),
			refused(ErrInvalidTxnState, batch(1, 0, 1, 1)),
			ok(1, txnal(batch(1, 0, 1, 1))),
		}},
		{"several batches of one producer in one request", []step{
			ok(0, batch(1, 0, 0, 2), batch(1, 0, 2, 3)),
			dupOf(2, batch(1, 0, 2, 3)),
			dupOf(0, batch(1, 0, 0, 2), batch(1, 0, 2, 3)),
			ok(5, batch(1, 0, 5, 1)),
		}},
		{"a request is all or nothing", []step{
			refused(ErrOutOfOrderSequence, batch(1, 0, 0, 2), batch(1, 0, 5, 2)),
			// The first batch was not applied: it is new, not a duplicate.
			ok(0, batch(1, 0, 0, 2)),
		}},
		{"a second batch must follow the first of the same request", []step{
			ok(0, batch(1, 0, 0, 2)),
			refused(ErrOutOfOrderSequence, batch(1, 0, 2, 2), batch(1, 0, 2, 2)),
			ok(2, batch(1, 0, 2, 2)),
		}},
		{"a retried batch then a new one in one request is refused", []step{
			ok(0, batch(1, 0, 0, 2)),
			refused(ErrOutOfOrderSequence, batch(1, 0, 0, 2), batch(1, 0, 2, 2)),
			refused(ErrOutOfOrderSequence, batch(1, 0, 0, 2), plain(1)),
			ok(2, batch(1, 0, 2, 2)),
		}},
		{"a new batch then a retried one in one request is refused", []step{
			ok(0, batch(1, 0, 0, 2)),
			refused(ErrOutOfOrderSequence, batch(1, 0, 2, 2), batch(1, 0, 0, 2)),
			ok(2, batch(1, 0, 2, 2)),
		}},
		{"two producers in one request", []step{
			ok(0, batch(1, 0, 0, 2), batch(2, 0, 0, 1), batch(1, 0, 2, 2)),
			dupOf(2, batch(2, 0, 0, 1)),
			dupOf(3, batch(1, 0, 2, 2)),
			ok(5, batch(2, 0, 1, 1)),
		}},
		{"one producer's refusal refuses the other's batch too", []step{
			ok(0, batch(2, 0, 0, 1)),
			refused(ErrOutOfOrderSequence, batch(1, 0, 0, 2), batch(2, 0, 5, 1)),
			ok(1, batch(1, 0, 0, 2)),
		}},
		{"batches without producer id take offsets", []step{
			ok(0, plain(3), batch(1, 0, 0, 2)),
			dupOf(3, batch(1, 0, 0, 2)),
		}},
		{"a failed append leaves no trace", []step{
			{req: []record.Header{batch(1, 0, 0, 2)}, err: errAppend, failAppend: true},
			ok(0, batch(1, 0, 0, 2)),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newTestLog()
			for i, s := range tt.steps {
				l.failAppend = s.failAppend
				before := len(l.log)
				base, dup, err := l.produce(s.req...)
				if !errors.Is(err, s.err) {
					t.Fatalf("step %d: err %v, want %v", i, err, s.err)
				}
				if err != nil || s.dup {
					if len(l.log) != before {
						t.Fatalf("step %d: refused or duplicate request appended", i)
					}
				}
				if err == nil && (base != s.base || dup != s.dup) {
					t.Fatalf("step %d: base %d dup %v, want %d %v", i, base, dup, s.base, s.dup)
				}
			}
			// Whatever was checked live, the log rebuilds to the same state.
			equalStates(t, l.state, l.replay(t))
		})
	}
}

func TestCheckWithoutBeginPanics(t *testing.T) {
	s := NewPartitionState()
	a := s.Begin()
	a.Commit(0)
	defer func() {
		if recover() == nil {
			t.Fatal("Check after Commit did not panic")
		}
	}()
	a.Check(batch(1, 0, 0, 1))
}

func TestCommitOfRefusedOrDuplicatePanics(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    record.Header
	}{
		{"refused", batch(1, 0, 7, 1)},
		{"duplicate", batch(1, 0, 0, 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newTestLog()
			if _, _, err := l.produce(batch(1, 0, 0, 1)); err != nil {
				t.Fatal(err)
			}
			a := l.state.Begin()
			a.Check(tt.h)
			defer func() {
				if recover() == nil {
					t.Fatal("Commit did not panic")
				}
			}()
			a.Commit(1)
		})
	}
}

func TestErrorCode(t *testing.T) {
	l := newTestLog()
	l.produce(batch(1, 0, 0, 1))
	_, _, gap := l.produce(batch(1, 0, 5, 1))
	for _, tt := range []struct {
		err  error
		want int16
	}{
		{nil, 0},
		{gap, kerr.OutOfOrderSequenceNumber.Code},
		{ErrOutOfOrderSequence, kerr.OutOfOrderSequenceNumber.Code},
		{ErrInvalidProducerEpoch, kerr.InvalidProducerEpoch.Code},
		{ErrInvalidRecord, kerr.InvalidRecord.Code},
		{ErrInvalidTxnState, kerr.InvalidTxnState.Code},
		{ErrIDsUnavailable, kerr.CoordinatorLoadInProgress.Code},
		{ErrIDsExhausted, kerr.UnknownServerError.Code},
		{ErrCorruptSnapshot, kerr.UnknownServerError.Code},
		{errors.New("other"), kerr.UnknownServerError.Code},
	} {
		if got := ErrorCode(tt.err); got != tt.want {
			t.Errorf("ErrorCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
