package txn

import (
	"errors"
	"testing"
)

// FuzzReplay feeds arbitrary keys and values to Machine.Replay: every
// input is applied or refused with ErrCorruptRecord, never a panic, and a
// value that decodes encodes back to one that decodes the same.
func FuzzReplay(f *testing.F) {
	md := &Metadata{TransactionalID: "t", ProducerID: 7, PreviousProducerID: -1, ProducerEpoch: 3, TimeoutMs: 60000,
		State: Ongoing, Partitions: []TopicPartition{{"a", 0}, {"a", 1}, {"b", 2}}, StartMs: 10, LastUpdateMs: 20}
	f.Add(encodeKey("t"), encodeValue(md))
	f.Add(encodeKey("t"), []byte(nil))
	f.Add([]byte{0, 1, 0}, []byte{0, 0})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		m := NewMachine(DefaultConfig(), 0)
		if err := m.Replay(key, value); err != nil {
			if !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("error %v is not ErrCorruptRecord", err)
			}
			return
		}
		for _, got := range m.All() {
			again, err := decodeValue(got.TransactionalID, encodeValue(&got))
			if err != nil {
				t.Fatalf("re-encoding %+v: %v", got, err)
			}
			if again.ProducerID != got.ProducerID || again.State != got.State || len(again.Partitions) != len(got.Partitions) {
				t.Fatalf("round trip %+v -> %+v", got, again)
			}
		}
	})
}
