package producer

import (
	"bytes"
	"errors"
	"testing"

	"github.com/strata-io/strata/internal/record"
)

// FuzzLoadSnapshot feeds LoadSnapshot arbitrary bytes, and (fix) the same
// bytes with a correct CRC so the fuzzer gets past it to the entries. A
// snapshot is either rejected with ErrCorruptSnapshot, leaving the state as
// it was, or loaded into a state that serialises, reloads to itself, and
// takes each producer's next batch. The seed corpus runs under go test.
func FuzzLoadSnapshot(f *testing.F) {
	valid := kafkaEntry{pid: 1, epoch: 0, lastSeq: 1, lastOffset: 11, offsetDelta: 1, timestamp: 5, coordEpoch: -1, txnFirst: -1}
	second := valid
	second.lastSeq, second.lastOffset, second.offsetDelta = 4, 20, 2
	noBatch := kafkaEntry{pid: 2, epoch: 3, lastSeq: -1, lastOffset: -1, timestamp: 9, coordEpoch: -1, txnFirst: -1}
	rich := richLog(f).state.Snapshot()
	for _, seed := range [][]byte{
		rich,
		NewPartitionState().Snapshot(),
		kafkaSnapshot(valid),
		kafkaSnapshot(valid, second, noBatch),
		kafkaSnapshot(noBatch, valid),
		kafkaSnapshot(second, valid),
		rich[:len(rich)-1],
		rich[:5],
		nil,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if fix && len(data) >= 6 {
			data = fixCRC(bytes.Clone(data))
		}
		s := NewPartitionState()
		s.Update(batch(77, 1, 5, 1))
		before := s.Snapshot()
		if err := s.LoadSnapshot(data); err != nil {
			if !errors.Is(err, ErrCorruptSnapshot) {
				t.Fatalf("error %v is not ErrCorruptSnapshot", err)
			}
			if !bytes.Equal(s.Snapshot(), before) {
				t.Fatal("a rejected snapshot changed the state")
			}
			return
		}
		out := s.Snapshot()
		again := NewPartitionState()
		if err := again.LoadSnapshot(out); err != nil {
			t.Fatalf("reloading a loaded snapshot: %v", err)
		}
		equalStates(t, s, again)
		if !bytes.Equal(again.Snapshot(), out) {
			t.Fatal("snapshot does not serialise stably")
		}
		offset := int64(1) << 40
		for _, p := range s.Producers() {
			if p.ProducerEpoch < 0 {
				continue
			}
			a := s.Begin()
			next := record.IncrementSequence(p.LastSequence, 1)
			if _, err := a.Check(batch(p.ProducerID, p.ProducerEpoch, next, 1)); err != nil {
				t.Fatalf("producer %+v refused its next batch: %v", p, err)
			}
			a.Commit(offset)
			offset++
		}
	})
}
