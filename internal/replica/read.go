package replica

import (
	"fmt"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
)

// ReadRequest is one partition of a Fetch request.
type ReadRequest struct {
	Offset int64
	// CurrentLeaderEpoch is the fetcher's view of the leader epoch, or -1
	// (KIP-320).
	CurrentLeaderEpoch int32
	MaxBytes           int64
	// MinOneBatch returns a first batch bigger than MaxBytes alone
	// (KIP-74): set for the first partition of a response with data.
	MinOneBatch bool

	// Follower is set for a follower's fetch, nil for a consumer's.
	Follower *FollowerRead
	// AnyReplica lets a consumer read from a follower (Fetch v11+, KIP-392:
	// Kafka's fetchOnlyLeader is false once the client sends its
	// metadata): a follower serves it up to the high watermark it knows.
	AnyReplica bool
	// ReadCommitted is a consumer's isolation level read_committed (1):
	// it reads up to the last stable offset and gets the aborted
	// transactions of what it read.
	ReadCommitted bool
}

// FollowerRead is what a follower's fetch adds. A follower reads up to the
// log end offset, and its fetch offset is its log end offset, which the
// leader records.
type FollowerRead struct {
	ReplicaID int32
	// LastFetchedEpoch is the epoch of the follower's last batch (Fetch
	// v12+), or -1: when the leader's log has no such epoch ending at or
	// after the fetch offset, the logs diverged and nothing is read.
	LastFetchedEpoch int32
	LogStartOffset   int64 // the follower's
	// Reread is set when a long poll reads again: the follower's position
	// was recorded by the first read, as Kafka records it once per request.
	Reread bool
}

// ReadResult is what Read found.
type ReadResult struct {
	// Region holds whole batches; Len is 0 when there is nothing to send.
	// It belongs to the log and stays valid as storage.FileRegion says.
	Region         storage.FileRegion
	HighWatermark  int64
	LogStartOffset int64
	LogEndOffset   int64
	// LastStableOffset is the partition's, whatever the isolation level.
	LastStableOffset int64
	// AbortedTxns are, for read_committed, the aborted transactions that
	// may have records in what was read.
	AbortedTxns []storage.AbortedTxn
	// DivergingEpoch, for a follower whose log diverged, is the leader's
	// largest epoch at or below the follower's last fetched epoch and where
	// it ends: the follower truncates there (Fetch v12+).
	DivergingEpoch *EpochEndOffset
	// Limit is the offset the read was bounded by (the high watermark for
	// a consumer, the log end offset for a follower), for a long poll to
	// compare with Limit.
	Limit int64
	// More and LaterSegment are the log's (storage.ReadResult): more
	// could be read at once, within the region's segment beyond MaxBytes,
	// or in a later segment.
	More, LaterSegment bool
}

// Read reads one partition of a fetch: a consumer's up to the high
// watermark, a follower's up to the log end offset. It needs the leader
// (or, for a consumer with AnyReplica, any replica), at the caller's
// leader epoch, and a follower that is one of the partition's replicas. An
// offset outside the log is ErrOffsetOutOfRange; on a follower, an offset
// past its high watermark but in its log reads nothing, as in Kafka.
func (p *Partition) Read(r ReadRequest) (ReadResult, error) {
	f := r.Follower
	p.mu.Lock()
	_, err := p.fenceLocked(r.CurrentLeaderEpoch, f != nil || !r.AnyReplica)
	if err == nil && f != nil {
		err = p.tracker.isReplica(f.ReplicaID)
	}
	p.mu.Unlock()
	if err == nil {
		// A log taken offline by an I/O error serves no one, consumer
		// or follower: they get KAFKA_STORAGE_ERROR and look for the
		// partition's next leader, as from an offline replica in Kafka,
		// rather than reading nothing from it forever.
		err = p.log.Offline()
	}
	if err != nil {
		return ReadResult{}, err
	}
	// The log end offset before the read: appends after it must not keep
	// a follower from catching up.
	hw, leo := p.HighWatermark(), p.log.LogEndOffset()
	lso := p.lastStableOffset(hw)
	res := ReadResult{HighWatermark: hw, LogStartOffset: p.log.LogStartOffset(), LogEndOffset: leo, Limit: hw, LastStableOffset: lso}
	if f == nil && r.ReadCommitted {
		res.Limit = lso
	}
	if f != nil {
		res.Limit = leo
		if f.LastFetchedEpoch >= 0 {
			epoch, end := p.log.EndOffsetForEpoch(f.LastFetchedEpoch)
			switch {
			case epoch < 0 || end < 0:
				return res, fmt.Errorf("%w: no end offset for the last fetched epoch %d", ErrOffsetOutOfRange, f.LastFetchedEpoch)
			case r.Offset < res.LogStartOffset:
				return res, fmt.Errorf("%w: offset %d, log from %d", ErrOffsetOutOfRange, r.Offset, res.LogStartOffset)
			case epoch < f.LastFetchedEpoch || end < r.Offset:
				res.DivergingEpoch = &EpochEndOffset{Epoch: epoch, EndOffset: end}
				return res, nil
			}
		}
	}
	if r.Offset > leo || r.Offset < res.LogStartOffset {
		return res, fmt.Errorf("%w: offset %d, log from %d to %d", ErrOffsetOutOfRange, r.Offset, res.LogStartOffset, leo)
	}
	if f != nil && !f.Reread {
		p.mu.Lock()
		p.applyLocked(p.tracker.followerFetched(followerFetch{replica: f.ReplicaID, fetchOffset: r.Offset,
			logStartOffset: f.LogStartOffset, leaderLogEnd: leo, nowMs: p.nowMs()}))
		res.HighWatermark = p.tracker.highWatermark
		p.mu.Unlock()
	}
	maxBytes := max(r.MaxBytes, 0)
	if r.Offset >= res.Limit || (maxBytes == 0 && !r.MinOneBatch) {
		return res, nil
	}
	rr, err := p.log.Read(r.Offset, int(min(maxBytes, 1<<31-1)), res.Limit, r.MinOneBatch)
	if err != nil {
		return res, outOfRange(err)
	}
	res.Region, res.More, res.LaterSegment = rr.Region, rr.More, rr.LaterSegment
	if f == nil && r.ReadCommitted && rr.Region.Len > 0 {
		res.AbortedTxns = p.log.TxnIndex().Aborted(r.Offset, res.Limit)
	}
	return res, nil
}

// Limit returns the offset a follower's or a consumer's read is bounded
// by now (for a read_committed consumer, the last stable offset), or -1
// when this replica no longer leads (and, with anyReplica, the consumer may
// not read from a follower): a long poll has news once it differs from the
// ReadResult's.
func (p *Partition) Limit(follower, anyReplica, readCommitted bool) int64 {
	p.mu.Lock()
	leader := p.tracker.leader
	p.mu.Unlock()
	switch {
	case !leader && (follower || !anyReplica):
		return -1
	case follower:
		return p.log.LogEndOffset()
	case readCommitted:
		return p.LastStableOffset()
	}
	return p.HighWatermark()
}

// Special timestamps of ListOffsets.
const (
	LatestTimestamp        = -1 // the high watermark
	EarliestTimestamp      = -2 // the log start offset
	MaxTimestamp           = -3 // the record with the largest timestamp (v7+)
	EarliestLocalTimestamp = -4 // the log start offset: no tiered storage (v8+)
)

// OffsetResult answers one partition of ListOffsets.
type OffsetResult struct {
	Offset, Timestamp int64 // -1, -1 when no record matches
	LeaderEpoch       int32 // the current leader epoch
}

// OffsetForTime answers ListOffsets for timestamp ts, one of the special
// timestamps or a time in milliseconds: the first committed record at or
// after it, through the time index. A follower asking (replicaID >= 0)
// sees up to the log end offset instead of the high watermark, as in
// Kafka; readCommitted (isolation level 1) sees up to the last stable
// offset. It needs the leader, at the caller's leader epoch.
func (p *Partition) OffsetForTime(currentLeaderEpoch int32, ts int64, replicaID int32, readCommitted bool) (OffsetResult, error) {
	epoch, err := p.fence(currentLeaderEpoch, true)
	if err != nil {
		return OffsetResult{}, err
	}
	res := OffsetResult{Offset: -1, Timestamp: -1, LeaderEpoch: epoch}
	hw := p.HighWatermark()
	switch {
	case replicaID >= 0:
		hw = p.log.LogEndOffset()
	case readCommitted:
		hw = p.lastStableOffset(hw)
	}
	switch {
	case ts == LatestTimestamp:
		res.Offset = hw
	case ts == EarliestTimestamp || ts == EarliestLocalTimestamp:
		res.Offset = p.log.LogStartOffset()
	case ts == MaxTimestamp:
		if t, off := p.log.MaxTimestamp(); off < hw {
			res.Timestamp, res.Offset = t, off
		}
	case ts < 0:
		return OffsetResult{}, fmt.Errorf("%w: timestamp %d", ErrUnsupportedTimestamp, ts)
	default:
		if off, t, ok := p.log.OffsetForTimestamp(ts); ok && off < hw {
			res.Offset, res.Timestamp = off, t
		}
	}
	return res, nil
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch (KIP-101/279): the
// largest epoch at or below epoch that the log has and the offset where the
// next epoch starts (the log end offset for the latest epoch), or -1, -1.
// It needs the leader, at the caller's leader epoch.
func (p *Partition) EndOffsetForEpoch(currentLeaderEpoch, epoch int32) (int32, int64, error) {
	if _, err := p.fence(currentLeaderEpoch, true); err != nil {
		return -1, -1, err
	}
	e, end := p.log.EndOffsetForEpoch(epoch)
	return e, end, nil
}

// DeleteRecordsBefore advances the log start offset to offset (-1: the
// high watermark) and returns the new log start offset. An offset past the
// high watermark is ErrOffsetOutOfRange. It needs the leader.
func (p *Partition) DeleteRecordsBefore(offset int64) (int64, error) {
	if _, err := p.fence(-1, true); err != nil {
		return 0, err
	}
	hw := p.HighWatermark()
	if offset == -1 {
		offset = hw
	}
	if offset < 0 || offset > hw {
		return 0, fmt.Errorf("%w: %d is beyond the high watermark %d", ErrOffsetOutOfRange, offset, hw)
	}
	return p.log.DeleteRecordsBefore(offset)
}

// ReadForLoad calls fn with every batch from the one holding offset from
// (or the log start) up to the log end offset, in order, until fn returns
// false: for the group coordinator loading __consumer_offsets, which, as
// Kafka's GroupMetadataManager, reads its partition to the log end. A
// leader's log is the partition's from its election on, and a new
// leader's high watermark may not have reached the commits its
// predecessor acknowledged yet: loading only to it would forget them.
// batch is only valid during the call. It does not check leadership: the
// caller loads what it was told it leads.
func (p *Partition) ReadForLoad(from int64, fn func(batch []byte) bool) error {
	from = max(from, p.log.LogStartOffset())
	end := p.log.LogEndOffset()
	if from >= end {
		return nil
	}
	return outOfRange(p.log.ReadBatches(from, 0, func(h record.Header, batch []byte) bool {
		if h.BaseOffset >= end {
			return false
		}
		return fn(batch)
	}))
}

// BatchTimestamp returns the first timestamp of the batch holding offset
// (or of the first batch after it): the age of the oldest record a
// consumer at offset has not read.
func (p *Partition) BatchTimestamp(offset int64) (ts int64, ok bool) {
	p.log.ScanBatchHeaders(offset, func(h record.Header, _ int64) bool {
		if h.LastOffset() >= offset {
			ts, ok = h.BaseTimestamp, true
			return false
		}
		return true
	})
	return ts, ok
}
