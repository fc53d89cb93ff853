package producer

import (
	"fmt"

	"github.com/strata-io/strata/internal/record"
)

// Append checks the batches of one produce request for one partition and
// stages their effect on the producer state; Commit applies it once the
// batches are in the log. Until then the PartitionState is untouched, so a
// refused or failed append leaves no trace: a request is all or nothing, as
// Kafka's ProducerAppendInfo makes it.
//
// An Append belongs to its PartitionState and is used under the same lock.
// There is at most one at a time: PartitionState.Begin reopens it.
type Append struct {
	state  *PartitionState
	staged []stagedProducer
	// nextRelOffset is the offset of the next batch relative to the
	// request's first, which is not known before the append.
	nextRelOffset int64
	fresh         int // batches checked that will be appended
	dups          int // batches that repeat cached ones
	dup           BatchMetadata
	failed        bool
	open          bool
	// verify is set by BeginVerified: a batch that opens a transaction
	// needs guard to be its producer's verification (verify.go).
	verify bool
	guard  VerificationGuard
}

// stagedProducer is the state a producer will have after the append: a copy
// of its entry with the request's batches added, their offsets relative.
type stagedProducer struct {
	id    int64
	entry producerEntry
	added int
	// txnStart is the offset, relative to the request's first, of the
	// batch that opens the producer's transaction here; -1 when none.
	txnStart int64
}

// Begin opens the partition's Append for a new request, discarding whatever
// an earlier one staged and did not commit.
func (s *PartitionState) Begin() *Append {
	s.append.reset()
	s.append.open = true
	return &s.append
}

func (a *Append) reset() {
	a.staged = a.staged[:0]
	a.nextRelOffset = 0
	a.fresh, a.dups = 0, 0
	a.dup = BatchMetadata{}
	a.failed, a.open = false, false
	a.verify, a.guard = false, 0
}

// Check validates the next batch of the request. It must be called for every
// batch, in order, with or without a producer id, so that it can place the
// batches' offsets.
//
// It returns the cached metadata of the original batch when h repeats one
// of the producer's latest NumBatchesToRetain batches (same producer id,
// epoch, first and last sequence): the broker appends nothing and answers
// with the original batch's FirstOffset. The pointer is valid until the next
// Begin; every later batch of the request must be a duplicate too.
//
// A transactional batch opens the producer's transaction on this partition
// when none is open (its first offset holds the last stable offset back); a
// non-transactional batch while one is open is ErrInvalidTxnState, as in
// Kafka. After BeginVerified, so is a batch that would open one without
// its producer's verification guard (verify.go).
//
// It returns an error when the batch must be refused: ErrOutOfOrderSequence,
// ErrInvalidProducerEpoch, ErrInvalidRecord or ErrInvalidTxnState. The broker
// then appends none of the request's batches for this partition.
//
// As in Kafka 2.5 and later, a producer the partition does not know (new,
// expired, or whose batches were all deleted) may start at any sequence.
func (a *Append) Check(h record.Header) (*BatchMetadata, error) {
	if !a.open {
		panic("producer: Append.Check without PartitionState.Begin")
	}
	relOffset := a.nextRelOffset
	a.nextRelOffset += int64(h.LastOffsetDelta) + 1
	if !h.HasProducerID() {
		if a.dups > 0 {
			return a.fail(ErrOutOfOrderSequence, h, "batch without producer id after a retried batch")
		}
		a.fresh++
		return nil, nil
	}
	if h.BaseSequence < 0 || h.ProducerEpoch < 0 {
		return a.fail(ErrInvalidRecord, h, "negative sequence or epoch")
	}
	// Duplicates are looked for among the appended batches only, before
	// any other check, as Kafka does: a retry is answered even when newer
	// batches followed it.
	if e := a.state.producers[h.ProducerID]; e != nil && e.epoch == h.ProducerEpoch {
		if b, ok := e.findBatch(h.BaseSequence, h.LastSequence()); ok {
			if a.fresh > 0 {
				return a.fail(ErrOutOfOrderSequence, h, "retried batch after a new one in the same request")
			}
			if a.dups == 0 {
				a.dup = b
			}
			a.dups++
			return &a.dup, nil
		}
	}
	if a.dups > 0 {
		return a.fail(ErrOutOfOrderSequence, h, "new batch after a retried one in the same request")
	}
	sp := a.stage(h.ProducerID)
	e := &sp.entry
	switch {
	case h.ProducerEpoch < e.epoch:
		return a.fail(ErrInvalidProducerEpoch, h, fmt.Sprintf("current epoch %d", e.epoch))
	case h.ProducerEpoch != e.epoch:
		// A bumped epoch restarts the sequence (KIP-360); an unknown
		// producer may start anywhere.
		if h.BaseSequence != 0 && e.epoch != noEpoch {
			return a.fail(ErrOutOfOrderSequence, h, fmt.Sprintf("new epoch after %d must start at sequence 0", e.epoch))
		}
	default:
		if !inSequence(e.lastSeq(), h.BaseSequence) {
			return a.fail(ErrOutOfOrderSequence, h, fmt.Sprintf("last sequence %d", e.lastSeq()))
		}
	}
	switch {
	case h.IsTransactional() && e.currentTxnFirstOffset >= 0 && h.ProducerEpoch != e.epoch:
		// The first batch of a transaction at a newer epoch (the
		// epoch bumped at every end with transactions version 2)
		// before the marker of the producer's open one: it belongs to
		// the next transaction and must not be decided by this one's
		// marker. Verification keeps it out (StartVerification); this
		// is the invariant behind it, for every append.
		return a.fail(ErrInvalidTxnState, h, fmt.Sprintf("a transaction of epoch %d is still open here", e.epoch))
	case h.IsTransactional() && e.currentTxnFirstOffset < 0 && sp.txnStart < 0:
		if a.verify && !a.state.verified(h.ProducerID, a.guard) {
			return a.fail(ErrInvalidTxnState, h, errUnverified(a.guard))
		}
		if a.verify && a.state.afterLowestVerified(h.ProducerID, h.ProducerEpoch, h.BaseSequence) {
			return a.fail(ErrOutOfOrderSequence, h, "a lower sequence of the producer is being verified")
		}
		sp.txnStart = relOffset
	case !h.IsTransactional() && (e.currentTxnFirstOffset >= 0 || sp.txnStart >= 0):
		return a.fail(ErrInvalidTxnState, h, "a non-transactional batch in an open transaction")
	}
	e.addBatch(h.ProducerEpoch, metadataOf(&h, relOffset))
	sp.added++
	a.fresh++
	return nil, nil
}

// Commit applies the staged batches once the request's batches are in the
// log, the first at firstOffset. It panics when the request was refused or
// was a duplicate: nothing may be appended then.
func (a *Append) Commit(firstOffset int64) {
	if !a.open || a.failed || a.dups > 0 {
		panic("producer: Append.Commit of a request that was refused, a duplicate, or not begun")
	}
	for i := range a.staged {
		sp := &a.staged[i]
		e := &sp.entry
		for j := e.count - min(sp.added, e.count); j < e.count; j++ {
			e.batches[j].FirstOffset += firstOffset
		}
		if sp.txnStart >= 0 {
			e.currentTxnFirstOffset = firstOffset + sp.txnStart
			a.state.clearVerification(sp.id)
		}
		if cur := a.state.producers[sp.id]; cur != nil {
			*cur = *e
		} else {
			ne := *e
			a.state.producers[sp.id] = &ne
		}
		a.state.track(sp.id, e)
	}
	a.reset()
}

// stage returns the staged state of producer id, copying its entry on first
// use in this request.
func (a *Append) stage(id int64) *stagedProducer {
	for i := range a.staged {
		if a.staged[i].id == id {
			return &a.staged[i]
		}
	}
	entry := newEntry()
	if cur := a.state.producers[id]; cur != nil {
		entry = *cur
	}
	a.staged = append(a.staged, stagedProducer{id: id, entry: entry, txnStart: -1})
	return &a.staged[len(a.staged)-1]
}

func (a *Append) fail(err error, h record.Header, why string) (*BatchMetadata, error) {
	a.failed = true
	return nil, fmt.Errorf("%w: producer %d epoch %d sequences %d-%d: %s",
		err, h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.LastSequence(), why)
}
