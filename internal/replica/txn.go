package replica

import (
	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
)

// Transactions on a partition (KIP-98). A transactional batch opens its
// producer's transaction here; the coordinator's marker (WriteTxnMarkers,
// appended by AppendMarker on the leader, replicated as any batch) ends
// it. The first offset of the oldest open transaction bounds the last
// stable offset, which read_committed consumers read up to.

// MarkerResult is what AppendMarker appended.
type MarkerResult struct {
	Offset int64
	// Pending is set when the marker is not yet below the high watermark:
	// AwaitAcks(ctx, Offset+1, -1) waits for it, as Kafka appends markers
	// with acks=all.
	Pending bool
}

// AppendMarker appends the marker of producerID's transaction at epoch,
// from the coordinator at coordinatorEpoch: COMMIT or ABORT. It needs the
// leader. A marker for an older epoch is producer.ErrInvalidProducerEpoch,
// from an older coordinator producer.ErrCoordinatorFenced; a producer with
// no transaction open gets a marker all the same (a retried
// WriteTxnMarkers, or a partition added and never written to), which ends
// nothing.
func (p *Partition) AppendMarker(producerID int64, epoch int16, commit bool, coordinatorEpoch int32) (MarkerResult, error) {
	res, err := p.appendMarker(producerID, epoch, commit, coordinatorEpoch)
	if err != nil {
		return res, err
	}
	res.Pending = p.HighWatermark() <= res.Offset
	return res, nil
}

func (p *Partition) appendMarker(producerID int64, epoch int16, commit bool, coordinatorEpoch int32) (MarkerResult, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	p.mu.Lock()
	leaderEpoch, err := p.tracker.leaderEpoch, p.tracker.checkAppend(-1)
	if !p.tracker.leader {
		err = ErrNotLeader
	}
	p.mu.Unlock()
	if err != nil {
		return MarkerResult{}, err
	}
	if err := p.producers.CheckMarker(producerID, epoch, coordinatorEpoch); err != nil {
		return MarkerResult{}, err
	}
	now := p.nowMs()
	batch := record.BuildMarker(nil, producerID, epoch, commit, coordinatorEpoch, now)
	opts := storage.AppendOptions{AssignOffsets: true, LeaderEpoch: leaderEpoch, LogAppendTime: -1}
	if p.settings.Load().LogAppendTime {
		opts.LogAppendTime = now
	}
	info, err := p.log.Append(batch, opts)
	if err != nil {
		return MarkerResult{}, err
	}
	h, err := record.ParseHeader(batch)
	if err != nil {
		panic("replica: the marker just built does not parse: " + err.Error())
	}
	h.BaseOffset = info.FirstOffset
	p.endTxnLocked(h, record.Marker{Commit: commit, CoordinatorEpoch: coordinatorEpoch})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applyLocked(p.tracker.appended(p.log.LogEndOffset(), p.committable(), p.nowMs()))
	p.wakeLocked()
	return MarkerResult{Offset: info.FirstOffset}, nil
}

// applyBatchLocked brings the producers' state along with a batch that is
// in the log (a follower's, or a leader's rebuilt). p.appendMu must be held.
func (p *Partition) applyBatchLocked(h record.Header, batch []byte) {
	if !h.IsControl() || !h.HasProducerID() {
		p.producers.Update(h)
		return
	}
	m, err := record.ParseMarker(batch)
	if err != nil {
		// A control batch that is no marker ends nothing; Kafka ignores
		// unknown control types too.
		p.producers.Update(h)
		return
	}
	p.endTxnLocked(h, m)
}

// endTxnLocked ends a transaction at a marker in the log. p.appendMu must
// be held.
func (p *Partition) endTxnLocked(h record.Header, m record.Marker) {
	done := p.producers.EndTxn(h, m)
	p.publishFirstUnstableLocked()
	if done.Aborted && done.FirstOffset >= 0 {
		p.indexAborted(p.producers, done)
	}
}

// indexAborted adds an aborted transaction to the log's index.
func (p *Partition) indexAborted(state *producer.PartitionState, done producer.CompletedTxn) {
	err := p.log.TxnIndex().Append(abortedEntry(state, done))
	if err != nil {
		p.opts.Logger.Warn("indexing an aborted transaction", "topic", p.Topic, "partition", p.Index, "offset", done.LastOffset, "err", err)
	}
}

// abortedEntry is the index entry of an aborted transaction, with the
// last stable offset state gives once it ended (Kafka's: the first offset
// of the oldest transaction still open, or the offset after the marker).
func abortedEntry(state *producer.PartitionState, done producer.CompletedTxn) storage.AbortedTxn {
	lso := state.FirstUnstableOffset()
	if lso < 0 {
		lso = done.LastOffset + 1
	}
	return storage.AbortedTxn{ProducerID: done.ProducerID, FirstOffset: done.FirstOffset,
		LastOffset: done.LastOffset, LastStableOffset: lso}
}

// publishFirstUnstableLocked publishes the producers' first unstable
// offset for readers. p.appendMu must be held.
func (p *Partition) publishFirstUnstableLocked() {
	f := p.producers.FirstUnstableOffset()
	p.firstUnstable.Store(f)
	p.log.TxnIndex().SetFirstUnstableOffset(f)
}

// LastStableOffset is the offset below which every transaction is decided:
// the high watermark, or the first offset of the oldest open transaction
// if that is lower. read_committed consumers read up to it.
func (p *Partition) LastStableOffset() int64 { return p.lastStableOffset(p.HighWatermark()) }

func (p *Partition) lastStableOffset(hw int64) int64 {
	if f := p.firstUnstable.Load(); f >= 0 && f < hw {
		return f
	}
	return hw
}

// StartTxnVerification is called before records (one produce request's
// batches for this partition) are appended: when they would open their
// producer's transaction here (a transactional batch of a producer with
// none open), needed is set and the broker verifies with the transaction
// coordinator that the partition is in the producer's transaction (KIP-890
// part 1; with transactions version 2 it has it added) before appending
// with AppendVerified and guard, so that a late write of a transaction
// already ended cannot open one that nothing will end. A marker for the
// producer landing meanwhile clears the guard, and the append is refused
// (producer.StartVerification).
func (p *Partition) StartTxnVerification(records []byte) (producerID int64, epoch int16, guard producer.VerificationGuard, needed bool) {
	h, err := record.ParseHeader(records)
	if err != nil || !h.IsTransactional() || h.IsControl() || !h.HasProducerID() {
		return -1, -1, 0, false
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	guard, needed = p.producers.StartVerification(h.ProducerID, h.ProducerEpoch, h.BaseSequence, p.nowMs())
	return h.ProducerID, h.ProducerEpoch, guard, needed
}
