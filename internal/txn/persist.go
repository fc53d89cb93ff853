package txn

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrCorruptRecord is returned by Machine.Replay for a __transaction_state
// record that does not decode; loading the partition fails.
var ErrCorruptRecord = errors.New("txn: corrupt __transaction_state record")

// encodeKey is the TxnMetadataKey v0 of a transactional id.
func encodeKey(id string) []byte {
	k := kmsg.NewTxnMetadataKey()
	k.TransactionalID = id
	return k.AppendTo(nil)
}

// encodeValue is the TxnMetadataValue of m: version 1 (flexible, with the
// previous producer id as tag 0, the next one as tag 1 and the client's
// transactions version as tag 2), as Kafka 4 writes it.
func encodeValue(m *Metadata) []byte {
	v := kmsg.NewTxnMetadataValue()
	v.Version = 1
	v.ProducerID = m.ProducerID
	v.PreviousProducerID = m.PreviousProducerID
	v.NextProducerID = m.NextProducerID
	v.ClientTransactionVersion = m.ClientTransactionVersion
	v.ProducerEpoch = m.ProducerEpoch
	v.TimeoutMillis = m.TimeoutMs
	v.State = kmsg.TransactionState(m.State)
	v.LastUpdateTimestamp = m.LastUpdateMs
	v.StartTimestamp = m.StartMs
	for _, tp := range m.Partitions {
		if n := len(v.Topics); n > 0 && v.Topics[n-1].Topic == tp.Topic {
			v.Topics[n-1].Partitions = append(v.Topics[n-1].Partitions, tp.Partition)
			continue
		}
		t := kmsg.NewTxnMetadataValueTopic()
		t.Topic = tp.Topic
		t.Partitions = []int32{tp.Partition}
		v.Topics = append(v.Topics, t)
	}
	return v.AppendTo(nil)
}

// decodeKey returns the transactional id of a key; ok is false for a key of
// another type (Kafka reserves versions above 0 for other records).
func decodeKey(key []byte) (id string, ok bool, err error) {
	if len(key) < 2 {
		return "", false, fmt.Errorf("%w: key of %d bytes", ErrCorruptRecord, len(key))
	}
	if binary.BigEndian.Uint16(key) != 0 {
		return "", false, nil
	}
	var k kmsg.TxnMetadataKey
	if err := k.ReadFrom(key); err != nil {
		return "", false, fmt.Errorf("%w: key: %v", ErrCorruptRecord, err)
	}
	return k.TransactionalID, true, nil
}

// decodeValue reads a TxnMetadataValue v0 or v1.
func decodeValue(id string, value []byte) (*Metadata, error) {
	if len(value) < 2 {
		return nil, fmt.Errorf("%w: value of %d bytes for %q", ErrCorruptRecord, len(value), id)
	}
	if ver := int16(binary.BigEndian.Uint16(value)); ver < 0 || ver > 1 {
		return nil, fmt.Errorf("%w: value version %d for %q", ErrCorruptRecord, ver, id)
	}
	var v kmsg.TxnMetadataValue
	if err := v.ReadFrom(value); err != nil {
		return nil, fmt.Errorf("%w: value for %q: %v", ErrCorruptRecord, id, err)
	}
	st := State(v.State)
	if st < Empty || st > CompleteAbort {
		// Dead and PrepareEpochFence are never written.
		return nil, fmt.Errorf("%w: state %d for %q", ErrCorruptRecord, v.State, id)
	}
	m := &Metadata{
		TransactionalID:    id,
		ProducerID:         v.ProducerID,
		PreviousProducerID: v.PreviousProducerID,
		NextProducerID:     v.NextProducerID,
		ProducerEpoch:      v.ProducerEpoch,
		LastProducerEpoch:  -1,
		TimeoutMs:          v.TimeoutMillis,
		State:              st,
		StartMs:            v.StartTimestamp,
		LastUpdateMs:       v.LastUpdateTimestamp,

		ClientTransactionVersion: v.ClientTransactionVersion,
	}
	var tps []TopicPartition
	for _, t := range v.Topics {
		for _, p := range t.Partitions {
			tps = append(tps, TopicPartition{t.Topic, p})
		}
	}
	m.Partitions = addPartitions(nil, tps)
	return m, nil
}
