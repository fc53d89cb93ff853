package replica

import (
	"errors"
	"fmt"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
)

// The follower's side: the fetcher (fetcher.go) reads the position to
// fetch from with FetchPosition, appends what the leader sent with
// AppendAsFollower, takes the leader's high watermark with
// SetLeaderHighWatermark, and truncates where its log diverged from the
// leader's with TruncateToDivergence (Fetch v12+ DivergingEpoch, KIP-320's
// successor to OffsetForLeaderEpoch) or, behind the leader's log start or
// past its log end, with ResetToLeader.

// BecomeFollower makes this replica a follower of state.Leader: produces
// are refused with NOT_LEADER_OR_FOLLOWER from now on, those waiting fail
// with it, and long polls answer. It reports whether the leader epoch is
// new, in which case the fetcher must start again from the new leader. A
// state at an older partition epoch than the replica knows is ignored.
func (p *Partition) BecomeFollower(state State) bool {
	// The append lock orders this after any append under way: no leader
	// append lands after the replica became a follower.
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	eff, newEpoch := p.tracker.becomeFollower(state)
	p.applyLocked(eff)
	p.wakeLocked()
	return newEpoch
}

// Leader returns the partition's leader and leader epoch as this replica
// knows them (-1 when there is none).
func (p *Partition) Leader() (leader, epoch int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker.leaderID, p.tracker.leaderEpoch
}

// Position is where a follower fetches from.
type Position struct {
	Leader, LeaderEpoch int32
	// FetchOffset is the log end offset; LastFetchedEpoch the epoch of the
	// last batch in the log (-1 for none), for the leader to tell whether
	// the logs diverged.
	FetchOffset      int64
	LastFetchedEpoch int32
	LogStartOffset   int64
	// Following is false when the replica leads (or leads no more and
	// follows no one yet), or when its log is offline: then there is
	// nothing to fetch.
	Following bool
}

// FetchPosition returns where a follower fetches from. When every append
// is synced, it first syncs what the log holds past its last sync: records
// a killed process appended but never synced come back from the page cache
// at restart, and the fetch offset tells the leader this replica has them
// (see Settings.SyncEveryAppend). A failed sync takes the log offline, and
// the replica stops fetching.
func (p *Partition) FetchPosition() Position {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	var syncErr error
	if p.settings.Load().SyncEveryAppend && p.log.RecoveryPoint() < p.log.LogEndOffset() {
		if syncErr = p.log.Flush(p.log.LogEndOffset()); syncErr != nil {
			p.opts.Logger.Warn("syncing recovered records before fetching", "topic", p.Topic, "partition", p.Index, "err", syncErr)
		}
	}
	last := lastBatchEpoch(p.log.Epochs(), p.log.LogEndOffset())
	p.mu.Lock()
	defer p.mu.Unlock()
	return Position{Leader: p.tracker.leaderID, LeaderEpoch: p.tracker.leaderEpoch,
		FetchOffset: p.log.LogEndOffset(), LastFetchedEpoch: last, LogStartOffset: p.log.LogStartOffset(),
		Following: !p.tracker.leader && p.tracker.leaderID >= 0 && p.tracker.leaderID != p.opts.NodeID &&
			// An offline log (a failed write or fsync) stops fetching, as
			// Kafka's log-dir failure handling does: its log end offset
			// may count records that never reached the disk, which the
			// leader would take as replicated.
			p.log.Offline() == nil && syncErr == nil}
}

// lastBatchEpoch is the epoch of the log's last batch, or -1: the latest
// epoch that starts below the log end offset. An epoch this replica led
// without writing anything starts at the log end; the next leader may
// never have had it, and a fetch naming it would be told, at every fetch,
// that the logs diverged where they do not.
func lastBatchEpoch(epochs []storage.EpochEntry, logEnd int64) int32 {
	for i := len(epochs) - 1; i >= 0; i-- {
		if epochs[i].StartOffset < logEnd {
			return epochs[i].Epoch
		}
	}
	return -1
}

// ErrNotFollower is returned by a follower's operation on a replica that
// leads, or follows at another leader epoch than the caller fetched at.
var ErrNotFollower = errors.New("replica: not a follower at this leader epoch")

// AppendAsFollower appends the batches a leader at leaderEpoch sent, as the
// leader stored them (offsets, leader epochs and timestamps unchanged),
// and brings the idempotent producers' state and the epoch cache along, so
// that this replica deduplicates retries correctly if it becomes leader.
// Batches wholly below the log end offset (a fetch that raced with an
// earlier one) are skipped. It returns the log end offset after the
// append.
func (p *Partition) AppendAsFollower(leaderEpoch int32, batches []byte) (int64, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	p.mu.Lock()
	following := !p.tracker.leader && p.tracker.leaderEpoch == leaderEpoch
	p.mu.Unlock()
	if !following {
		return 0, ErrNotFollower
	}
	leo := p.log.LogEndOffset()
	batches, err := skipBelow(batches, leo)
	if err != nil || len(batches) == 0 {
		return leo, err
	}
	if h, _ := record.ParseHeader(batches); h.BaseOffset < leo {
		// The leader's log start is inside this batch (DeleteRecords) and
		// this log, empty, starts there: start it at the batch instead,
		// as Kafka does.
		if leo != p.log.LogStartOffset() {
			return leo, fmt.Errorf("%w: batch %d..%d straddles the log end %d", storage.ErrOffsetsOutOfOrder, h.BaseOffset, h.LastOffset(), leo)
		}
		if err := p.log.TruncateFullyAndStartAt(h.BaseOffset); err != nil {
			return leo, err
		}
		p.producers.Reset()
		p.publishFirstUnstableLocked()
	}
	info, err := p.log.Append(batches, storage.AppendOptions{})
	if err != nil {
		return p.log.LogEndOffset(), err
	}
	var snapshot []byte
	if info.RolledTo >= 0 {
		snapshot = p.producers.Snapshot()
	}
	record.Batches(batches, func(h record.Header, batch []byte) bool {
		p.applyBatchLocked(h, batch)
		return true
	})
	p.publishFirstUnstableLocked()
	if p.settings.Load().SyncEveryAppend {
		// Synced before the next fetch tells the leader this replica has
		// the records (see Settings.SyncEveryAppend).
		if err := p.log.Flush(p.log.LogEndOffset()); err != nil {
			return p.log.LogEndOffset(), err
		}
	}
	if snapshot != nil {
		// Under the append lock, unlike the leader's: a follower's appends
		// wait for nobody, and the snapshot must precede the next roll's.
		if err := p.log.Snapshots().WriteRoll(info.RolledTo, snapshot); err != nil {
			p.opts.Logger.Warn("writing producer snapshot", "topic", p.Topic, "partition", p.Index, "offset", info.RolledTo, "err", err)
		}
	}
	return p.log.LogEndOffset(), nil
}

// skipBelow drops the leading batches that end below offset. Bytes that do
// not parse are left for the log's validation to refuse.
func skipBelow(batches []byte, offset int64) ([]byte, error) {
	for len(batches) > 0 {
		h, err := record.ParseHeader(batches)
		if err != nil || h.LastOffset() >= offset {
			return batches, nil
		}
		if h.Size() > len(batches) {
			return batches, nil
		}
		batches = batches[h.Size():]
	}
	return batches, nil
}

// SetLeaderHighWatermark takes the high watermark a leader sent: the
// follower's is the smaller of it and its own log end offset.
func (p *Partition) SetLeaderHighWatermark(leaderHighWatermark int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applyLocked(p.tracker.followerHighWatermark(leaderHighWatermark, p.log.LogEndOffset()))
}

// EpochEndOffset is a leader epoch and the offset where it ends.
type EpochEndOffset struct {
	Epoch     int32
	EndOffset int64
}

// TruncateToDivergence truncates the log where it diverged from the
// leader's, which ends epoch diverging.Epoch at diverging.EndOffset
// (Kafka's AbstractFetcherThread): to the smaller end of that epoch here
// and there when this log has the epoch; when it does not, to the end of
// its largest epoch below, after which the next fetch finds out whether
// more must go. Never to the high watermark: that could drop committed
// records. It returns the new log end offset.
func (p *Partition) TruncateToDivergence(leaderEpoch int32, diverging EpochEndOffset) (int64, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if err := p.checkFollowingLocked(leaderEpoch); err != nil {
		return 0, err
	}
	leo := p.log.LogEndOffset()
	to := min(diverging.EndOffset, leo)
	if epoch, end := p.log.EndOffsetForEpoch(diverging.Epoch); end >= 0 {
		to = min(end, leo)
		if epoch == diverging.Epoch {
			to = min(to, diverging.EndOffset)
		}
	}
	if to >= leo {
		return leo, nil
	}
	p.opts.Logger.Info("truncating to the divergence point", "topic", p.Topic, "partition", p.Index,
		"offset", to, "log_end_offset", leo, "leader_epoch", diverging.Epoch, "leader_epoch_end", diverging.EndOffset)
	return to, p.truncateLocked(to)
}

// ResetToLeader brings a log that the leader cannot serve back in range:
// one behind the leader's log start starts again, empty, at it; one past
// the leader's log end (an unclean election) is truncated to it. It
// returns the new log end offset.
func (p *Partition) ResetToLeader(leaderEpoch int32, leaderLogStart, leaderLogEnd int64) (int64, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if err := p.checkFollowingLocked(leaderEpoch); err != nil {
		return 0, err
	}
	leo := p.log.LogEndOffset()
	switch {
	case leaderLogEnd < leo:
		p.opts.Logger.Warn("truncating past the leader's log end", "topic", p.Topic, "partition", p.Index,
			"offset", leaderLogEnd, "log_end_offset", leo)
		return leaderLogEnd, p.truncateLocked(leaderLogEnd)
	case leo < leaderLogStart:
		p.opts.Logger.Info("starting again at the leader's log start", "topic", p.Topic, "partition", p.Index,
			"offset", leaderLogStart, "log_end_offset", leo)
		if err := p.log.TruncateFullyAndStartAt(leaderLogStart); err != nil {
			return leo, err
		}
		p.producers.Reset()
		p.publishFirstUnstableLocked()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.applyLocked(p.tracker.truncated(leaderLogStart, true))
		return leaderLogStart, nil
	}
	return leo, nil
}

// checkFollowingLocked refuses a follower's operation on a replica that
// is not a follower at leaderEpoch. p.appendMu must be held.
func (p *Partition) checkFollowingLocked(leaderEpoch int32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tracker.leader || p.tracker.leaderEpoch != leaderEpoch {
		return ErrNotFollower
	}
	return nil
}

// truncateLocked truncates the log to offset and rebuilds the producers'
// state from what is left. p.appendMu must be held.
func (p *Partition) truncateLocked(offset int64) error {
	if err := p.log.TruncateTo(offset); err != nil {
		return err
	}
	if err := p.rebuildProducers(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applyLocked(p.tracker.truncated(p.log.LogEndOffset(), false))
	return nil
}
