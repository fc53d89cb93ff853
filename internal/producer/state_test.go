package producer

import (
	"reflect"
	"testing"

	"github.com/strata-io/strata/internal/record"
)

func TestExpire(t *testing.T) {
	const exp = DefaultExpirationMs
	tests := []struct {
		name    string
		lastTs  int64
		now     int64
		expired bool
	}{
		{"fresh", 1000, 1000, false},
		{"just before", 1000, 1000 + exp - 1, false},
		{"exactly at", 1000, 1000 + exp, true},
		{"long after", 1000, 1000 + 10*exp, true},
		{"timestamp in the future", 1000 + 5*exp, 1000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newTestLog()
			if _, _, err := l.produce(at(batch(1, 0, 0, 1), tt.lastTs-5)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := l.produce(at(batch(1, 0, 1, 1), tt.lastTs)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := l.produce(at(batch(2, 0, 0, 1), tt.now)); err != nil {
				t.Fatal(err)
			}
			n := l.state.Expire(tt.now, exp)
			want := 0
			if tt.expired {
				want = 1
			}
			if n != want {
				t.Fatalf("Expire forgot %d producers, want %d", n, want)
			}
			_, _, known := l.state.LastBatches(1)
			if known == tt.expired {
				t.Fatalf("producer 1 known %v after Expire", known)
			}
			if _, _, ok := l.state.LastBatches(2); !ok {
				t.Fatal("the fresh producer was forgotten")
			}
			// An expired producer is unknown: it may go on at its next
			// sequence (Kafka 2.5+), and its old batches are no longer
			// recognised as duplicates.
			_, dup, err := l.produce(at(batch(1, 0, 1, 1), tt.now))
			if tt.expired && (err != nil || dup) {
				t.Fatalf("retry after expiry: dup %v err %v, want a new append", dup, err)
			}
			if !tt.expired && (err != nil || !dup) {
				t.Fatalf("retry before expiry: dup %v err %v, want a duplicate", dup, err)
			}
			if _, _, err := l.produce(at(batch(1, 0, 2, 1), tt.now)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestExpireKeepsOpenTransactions(t *testing.T) {
	s := NewPartitionState()
	h := txnal(batch(1, 0, 0, 1))
	h.BaseOffset = 10
	s.Update(h) // from the log: a transaction the coordinator will end
	if n := s.Expire(1000+10*DefaultExpirationMs, DefaultExpirationMs); n != 0 {
		t.Fatalf("expired a producer with an open transaction")
	}
	marker := batch(1, 0, -1, 1)
	marker.Attributes = record.AttrControl | record.AttrTransactional
	marker.BaseOffset = 11
	s.Update(marker)
	if n := s.Expire(1000+10*DefaultExpirationMs, DefaultExpirationMs); n != 1 {
		t.Fatalf("Expire after the marker forgot %d producers, want 1", n)
	}
}

func TestProducers(t *testing.T) {
	l := newTestLog()
	steps := []record.Header{
		at(batch(7, 2, 0, 3), 5000),
		at(batch(3, 0, 0, 1), 6000),
		at(batch(3, 0, 1, 4), 7000),
		plain(2),
	}
	for _, h := range steps {
		if _, _, err := l.produce(h); err != nil {
			t.Fatal(err)
		}
	}
	marker := batch(9, 4, -1, 1)
	marker.Attributes = record.AttrControl
	marker.MaxTimestamp = 8000
	l.state.Update(marker)

	got := l.state.Producers()
	want := []ProducerInfo{
		{ProducerID: 3, ProducerEpoch: 0, LastSequence: 4, LastTimestamp: 7000, CoordinatorEpoch: -1, CurrentTxnStartOffset: -1},
		{ProducerID: 7, ProducerEpoch: 2, LastSequence: 2, LastTimestamp: 5000, CoordinatorEpoch: -1, CurrentTxnStartOffset: -1},
		{ProducerID: 9, ProducerEpoch: 4, LastSequence: -1, LastTimestamp: 8000, CoordinatorEpoch: -1, CurrentTxnStartOffset: -1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Producers:\n got %+v\nwant %+v", got, want)
	}
	batches, epoch, ok := l.state.LastBatches(3)
	wantBatches := []BatchMetadata{
		{FirstSeq: 0, LastSeq: 0, FirstOffset: 3, LastOffsetDelta: 0, Timestamp: 6000},
		{FirstSeq: 1, LastSeq: 4, FirstOffset: 4, LastOffsetDelta: 3, Timestamp: 7000},
	}
	if !ok || epoch != 0 || !reflect.DeepEqual(batches, wantBatches) {
		t.Fatalf("LastBatches(3) = %+v %d %v", batches, epoch, ok)
	}
}

func TestUpdateIgnoresBatchesWithoutProducer(t *testing.T) {
	s := NewPartitionState()
	s.Update(plain(3))
	if s.Len() != 0 {
		t.Fatal("a batch without producer id created a producer")
	}
}

func TestReset(t *testing.T) {
	l := newTestLog()
	l.produce(batch(1, 0, 0, 1))
	l.state.Reset()
	if l.state.Len() != 0 {
		t.Fatal("Reset kept producers")
	}
	if _, dup, err := l.produce(batch(1, 0, 0, 1)); err != nil || dup {
		t.Fatalf("after Reset: dup %v err %v", dup, err)
	}
}

func TestSequenceArithmetic(t *testing.T) {
	const max = 1<<31 - 1
	for _, tt := range []struct {
		last, next int32
		in         bool
	}{
		{-1, 0, true}, {0, 1, true}, {5, 7, false}, {5, 5, false},
		{max - 1, max, true}, {max, 0, true}, {max, 1, false}, {max - 1, 0, false},
	} {
		if got := inSequence(tt.last, tt.next); got != tt.in {
			t.Errorf("inSequence(%d, %d) = %v", tt.last, tt.next, got)
		}
	}
	for _, tt := range []struct{ seq, n int32 }{
		{10, 3}, {0, 0}, {2, 5}, {0, 1}, {max, max}, {1, max},
	} {
		if got := record.IncrementSequence(decrementSequence(tt.seq, tt.n), tt.n); got != tt.seq {
			t.Errorf("increment(decrement(%d, %d)) = %d", tt.seq, tt.n, got)
		}
	}
}
