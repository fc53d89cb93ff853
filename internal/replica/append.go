package replica

import (
	"context"
	"fmt"

	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
)

// AppendResult is a leader append's outcome.
type AppendResult struct {
	storage.AppendInfo
	// Duplicate is set when the whole request was a retry of batches
	// already in the log (idempotent producers); AppendInfo then gives the
	// original offsets and nothing was written.
	Duplicate bool
	// LogStartOffset is the log start offset after the append.
	LogStartOffset int64
	// Pending is set when the answer must wait for AwaitAcks: acks=all
	// before the high watermark passes the records (a retried duplicate's
	// original included), or any acks with flush.messages=1 before the
	// fsync.
	Pending bool
}

// AppendAsLeader appends a produce request's records for this partition.
// acks is the request's acks (0, 1 or -1). It returns once the records are
// in the log; AwaitAcks waits for what acks asks when Pending is set.
//
// Every record is validated first (storage.Log.ValidateProduced), outside
// the lock and before the idempotent producers' state looks at the
// batches: a corrupt retry is refused, never answered as a duplicate.
func (p *Partition) AppendAsLeader(records []byte, acks int16) (AppendResult, error) {
	return p.appendProduced(records, acks, false, 0)
}

// AppendVerified is AppendAsLeader for a client's produce: a batch that
// would open its producer's transaction is refused
// (producer.ErrInvalidTxnState) unless guard, from StartTxnVerification
// and verified with the coordinator since, still holds.
func (p *Partition) AppendVerified(records []byte, acks int16, guard producer.VerificationGuard) (AppendResult, error) {
	return p.appendProduced(records, acks, true, guard)
}

func (p *Partition) appendProduced(records []byte, acks int16, verify bool, guard producer.VerificationGuard) (AppendResult, error) {
	s := p.settings.Load()
	batches, err := p.log.ValidateProduced(records)
	if err != nil {
		return AppendResult{}, err
	}
	res, snapshot, err := p.appendAsLeader(batches, acks, s, verify, guard)
	if err != nil {
		return res, err
	}
	if snapshot != nil {
		// Written outside the lock, and fsynced by the roll's background
		// flush, not here. A snapshot only spares recovery a scan;
		// without it the state is rebuilt from an older one or the log.
		if err := p.log.Snapshots().WriteRoll(res.RolledTo, snapshot); err != nil {
			p.opts.Logger.Warn("writing producer snapshot", "topic", p.Topic, "partition", p.Index, "offset", res.RolledTo, "err", err)
		}
	}
	end := res.LastOffset + 1
	res.LogStartOffset = p.log.LogStartOffset()
	res.Pending = s.SyncEveryAppend || (acks == -1 && p.HighWatermark() < end)
	return res, nil
}

// appendAsLeader appends under the append lock. When the append rolled a
// segment, it returns the producers' snapshot to write at the roll.
func (p *Partition) appendAsLeader(batches *record.Validated, acks int16, s *Settings, verify bool, guard producer.VerificationGuard) (AppendResult, []byte, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	p.mu.Lock()
	epoch, err := p.tracker.leaderEpoch, p.tracker.checkAppend(acks)
	p.mu.Unlock()
	if err != nil {
		return AppendResult{}, nil, err
	}
	opts := storage.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch, LogAppendTime: -1}
	if s.LogAppendTime {
		opts.LogAppendTime = p.nowMs()
	}
	txn := p.producers.Begin()
	if verify {
		txn = p.producers.BeginVerified(guard)
	}
	dup, err := checkProducers(txn, batches.Headers(), opts.LogAppendTime)
	if err != nil {
		return AppendResult{}, nil, err
	}
	if dup != nil {
		return duplicate(dup, s), nil, nil
	}
	info, err := p.log.AppendValidated(batches, opts)
	if err != nil {
		return AppendResult{}, nil, err
	}
	var snapshot []byte
	if info.RolledTo >= 0 {
		// The state before this append is the state at the new segment's
		// base offset.
		snapshot = p.producers.Snapshot()
	}
	// The records are in the log: the state must follow them whatever
	// happens to the snapshot, or a retry would be appended twice.
	txn.Commit(info.FirstOffset)
	p.publishFirstUnstableLocked()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applyLocked(p.tracker.appended(p.log.LogEndOffset(), p.committable(), p.nowMs()))
	p.wakeLocked() // followers' long polls read to the log end
	return AppendResult{AppendInfo: info}, snapshot, nil
}

// duplicate answers a retry as the original append was answered, with its
// log-append time on LogAppendTime topics (the cached timestamp is the one
// stored, the append time there). Kafka answers the cached timestamp on
// CreateTime topics too, where clients would take it for the record's
// timestamp; Strata answers -1 there, as it does for a first append.
func duplicate(dup *producer.BatchMetadata, s *Settings) AppendResult {
	dupTime := int64(-1)
	if s.LogAppendTime {
		dupTime = dup.Timestamp
	}
	return AppendResult{Duplicate: true, AppendInfo: storage.AppendInfo{
		FirstOffset: dup.FirstOffset, LastOffset: dup.LastOffset(), LogAppendTime: dupTime,
	}}
}

// checkProducers checks every batch of a request, by its validated header,
// against the producers' state. It returns the first duplicate, if the
// request is a retry.
func checkProducers(txn *producer.Append, headers []record.Header, logAppendTime int64) (*producer.BatchMetadata, error) {
	var dup *producer.BatchMetadata
	for _, h := range headers {
		if logAppendTime >= 0 {
			h.MaxTimestamp = logAppendTime
		}
		d, err := txn.Check(h)
		if err != nil {
			return nil, err
		}
		if d != nil && dup == nil {
			dup = d
		}
	}
	return dup, nil
}

// AwaitAcks blocks until an append whose records end before end is
// acknowledged as acks asks: flushed when every append is synced
// (flush.messages=1), and for acks=all committed, that is below the high
// watermark, with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
// min.insync.replicas meanwhile. It returns ErrTimedOut when ctx ends
// first, ErrNotLeader when the replica stops leading first.
func (p *Partition) AwaitAcks(ctx context.Context, end int64, acks int16) error {
	if p.settings.Load().SyncEveryAppend {
		if err := p.log.Flush(end); err != nil {
			return err
		}
		// The log end offset and the flushed end only grow (a leader
		// never truncates), so reading them under mu keeps the tracker's
		// view in order without the append lock.
		p.mu.Lock()
		p.applyLocked(p.tracker.appended(p.log.LogEndOffset(), p.committable(), p.nowMs()))
		p.mu.Unlock()
	}
	if acks != -1 {
		return nil
	}
	ch := make(chan error, 1)
	p.mu.Lock()
	p.nextAckID++
	id := p.nextAckID
	p.ackWaiters[id] = ch
	p.applyLocked(p.tracker.awaitAck(id, end))
	p.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.tracker.cancelAck(id)
	delete(p.ackWaiters, id)
	p.mu.Unlock()
	select {
	case err := <-ch: // answered while the context ended
		return err
	default:
		return fmt.Errorf("%w: waiting for replication", ErrTimedOut)
	}
}

// AppendAsCoordinator appends a batch built by this broker's coordinators
// (the group coordinator's __consumer_offsets records, transactional ones
// included, and the transaction coordinator's): validated as a produce,
// but the producers' state takes it unchecked, as Kafka appends with
// AppendOrigin.COORDINATOR (its transactional offset commits all carry
// sequence 0). Otherwise as AppendAsLeader.
func (p *Partition) AppendAsCoordinator(records []byte, acks int16) (AppendResult, error) {
	s := p.settings.Load()
	batches, err := p.log.ValidateProduced(records)
	if err != nil {
		return AppendResult{}, err
	}
	p.appendMu.Lock()
	p.mu.Lock()
	epoch, err := p.tracker.leaderEpoch, p.tracker.checkAppend(acks)
	p.mu.Unlock()
	if err != nil {
		p.appendMu.Unlock()
		return AppendResult{}, err
	}
	opts := storage.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch, LogAppendTime: -1}
	if s.LogAppendTime {
		opts.LogAppendTime = p.nowMs()
	}
	info, err := p.log.AppendValidated(batches, opts)
	if err != nil {
		p.appendMu.Unlock()
		return AppendResult{}, err
	}
	next := info.FirstOffset
	for _, h := range batches.Headers() {
		h.BaseOffset = next
		next = h.NextOffset()
		p.producers.Update(h)
	}
	p.publishFirstUnstableLocked()
	p.mu.Lock()
	p.applyLocked(p.tracker.appended(p.log.LogEndOffset(), p.committable(), p.nowMs()))
	p.wakeLocked()
	p.mu.Unlock()
	p.appendMu.Unlock()
	res := AppendResult{AppendInfo: info, LogStartOffset: p.log.LogStartOffset()}
	res.Pending = s.SyncEveryAppend || (acks == -1 && p.HighWatermark() < info.LastOffset+1)
	return res, nil
}
