package producer

import (
	"fmt"

	"github.com/strata-io/strata/internal/record"
)

// CompletedTxn is a transaction a marker ended on the partition: Kafka's
// CompletedTxn. The aborted ones go to the aborted-transaction index.
type CompletedTxn struct {
	ProducerID int64
	// FirstOffset is the transaction's first offset on the partition, -1
	// when the producer had none open (a marker for a partition the
	// transaction added but never wrote to).
	FirstOffset int64
	// LastOffset is the marker's offset.
	LastOffset int64
	Aborted    bool
}

// CheckMarker validates a marker the transaction coordinator asks the
// leader to append (WriteTxnMarkers), before it is appended, as Kafka's
// ProducerAppendInfo.appendEndTxnMarker does: an epoch older than the
// producer's is ErrInvalidProducerEpoch, a coordinator epoch older than the
// last marker's is ErrCoordinatorFenced.
func (s *PartitionState) CheckMarker(producerID int64, epoch int16, coordinatorEpoch int32) error {
	e := s.producers[producerID]
	if e == nil {
		return nil
	}
	if epoch < e.epoch {
		return fmt.Errorf("%w: marker for producer %d at epoch %d, producer at %d", ErrInvalidProducerEpoch, producerID, epoch, e.epoch)
	}
	if coordinatorEpoch < e.coordinatorEpoch {
		return fmt.Errorf("%w: marker for producer %d from coordinator epoch %d, last %d", ErrCoordinatorFenced, producerID, coordinatorEpoch, e.coordinatorEpoch)
	}
	return nil
}

// EndTxn applies a marker batch that is in the log at h.BaseOffset (the
// leader's after CheckMarker, a follower's as replicated): the producer's
// transaction ends, its epoch becomes the marker's. It returns the
// transaction it ended.
func (s *PartitionState) EndTxn(h record.Header, m record.Marker) CompletedTxn {
	e := s.producers[h.ProducerID]
	if e == nil {
		ne := newEntry()
		e = &ne
		s.producers[h.ProducerID] = e
	}
	done := CompletedTxn{ProducerID: h.ProducerID, FirstOffset: e.currentTxnFirstOffset, LastOffset: h.BaseOffset, Aborted: !m.Commit}
	// The marker ends the transaction open here at the data's epoch. A
	// bumped marker (transactions version 2 ends every transaction at
	// epoch+1; a fencing abort too) says that epoch is over: a
	// verification at the marker's epoch or later was about the
	// producer's next transaction, which the coordinator only confirms
	// once this one is complete, and it stands.
	nextVerified := false
	if v, ok := s.verifying[h.ProducerID]; ok {
		nextVerified = e.currentTxnFirstOffset >= 0 && e.epoch < h.ProducerEpoch && v.epoch >= h.ProducerEpoch
	}
	e.apply(&h)
	e.coordinatorEpoch = max(e.coordinatorEpoch, m.CoordinatorEpoch)
	s.track(h.ProducerID, e)
	if !nextVerified {
		// A verification started before the marker may have verified
		// the transaction that is over now.
		s.clearVerification(h.ProducerID)
	}
	return done
}

// TxnOpen reports whether producerID has a transaction open on the
// partition.
func (s *PartitionState) TxnOpen(producerID int64) bool {
	_, ok := s.ongoing[producerID]
	return ok
}

// txnOpenAt reports whether producerID has a transaction open on the
// partition at epoch.
func (s *PartitionState) txnOpenAt(producerID int64, epoch int16) bool {
	e := s.producers[producerID]
	return e != nil && e.currentTxnFirstOffset >= 0 && e.epoch == epoch
}
