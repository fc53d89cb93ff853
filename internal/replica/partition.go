// Package replica holds a partition's replica state on this broker: whether
// it leads, its leader epoch, in-sync replicas and high watermark, and the
// waiters for acks=all produces and long-polling fetches. Storage is below
// it; the broker's handlers are above.
//
// On a single node the in-sync replica set is {self} and the high watermark
// follows the log end offset, or, when every append is flushed
// (flush.messages=1), the flushed offset, so a consumer never reads what a
// crash could lose.
//
// Lock order: Partition.appendMu, then Partition.mu. Neither is held while
// waiting for an fsync or for the high watermark.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
)

// Settings are the topic-level values a partition acts on.
type Settings struct {
	MinInsyncReplicas int  // min.insync.replicas
	LogAppendTime     bool // message.timestamp.type=LogAppendTime
	// SyncEveryAppend is flush.messages=1: every append is fsynced (group
	// committed) before it counts towards the high watermark.
	SyncEveryAppend bool
}

// Partition is one replica of one partition. It is safe for concurrent use.
type Partition struct {
	Topic    string
	Index    int32
	log      *storage.Log
	nodeID   int32
	settings atomic.Pointer[Settings]
	now      func() time.Time
	logger   *slog.Logger
	appendMu sync.Mutex // serializes appends, so offsets and producer state advance together
	// producers is the idempotent producers' state; appendMu guards it.
	producers *producer.PartitionState

	mu            sync.Mutex
	leader        bool
	leaderEpoch   int32
	inSync        []int32
	highWatermark atomic.Int64
	// watchers are signalled (without blocking) when the high watermark
	// moves; see Watch.
	watchers map[chan<- struct{}]struct{}
}

// New returns a replica over log, with the idempotent producers' state
// rebuilt from the latest snapshot and the batches after it. It is not
// leader until BecomeLeader.
func New(topic string, index int32, log *storage.Log, nodeID int32, s Settings, now func() time.Time, logger *slog.Logger) (*Partition, error) {
	p := &Partition{Topic: topic, Index: index, log: log, nodeID: nodeID, now: now, logger: logger,
		watchers: map[chan<- struct{}]struct{}{}, producers: producer.NewPartitionState()}
	p.settings.Store(&s)
	if err := p.rebuildProducers(); err != nil {
		return nil, err
	}
	// A restarted single node resumes with everything recovered visible:
	// what survived recovery was flushed or is as durable as acks=1 ever
	// promised.
	p.highWatermark.Store(log.LogEndOffset())
	log.SetRetentionBound(log.LogEndOffset())
	return p, nil
}

// rebuildProducers loads the newest readable producer snapshot and replays
// the batch headers written after it.
func (p *Partition) rebuildProducers() error {
	offset, data, ok, err := p.log.LatestSnapshot()
	if err != nil || !ok {
		data, offset = nil, p.log.LogStartOffset()
	}
	scan := func(apply func(record.Header) bool) error {
		return p.log.ScanBatchHeaders(offset, func(h record.Header, _ int64) bool { return apply(h) })
	}
	if err := p.producers.Rebuild(data, scan); err != nil {
		if data == nil {
			return fmt.Errorf("replica: rebuilding producer state of %s-%d: %w", p.Topic, p.Index, err)
		}
		// A corrupt snapshot: rebuild from the whole log instead.
		offset = p.log.LogStartOffset()
		if err := p.producers.Rebuild(nil, scan); err != nil {
			return fmt.Errorf("replica: rebuilding producer state of %s-%d: %w", p.Topic, p.Index, err)
		}
	}
	return nil
}

// SnapshotProducers writes the producer state at the log end offset, so the
// next start replays nothing (clean shutdown).
func (p *Partition) SnapshotProducers() error {
	p.appendMu.Lock()
	data, end := p.producers.Snapshot(), p.log.LogEndOffset()
	p.appendMu.Unlock()
	return p.log.WriteSnapshot(end, data)
}

// ExpireProducers forgets producers idle for longer than expirationMs
// (producer.id.expiration.ms).
func (p *Partition) ExpireProducers(expirationMs int64) int {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	return p.producers.Expire(p.now().UnixMilli(), expirationMs)
}

// Producers lists the active producers, for DescribeProducers.
func (p *Partition) Producers() []producer.ProducerInfo {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	return p.producers.Producers()
}

// Log returns the partition's log.
func (p *Partition) Log() *storage.Log { return p.log }

// SetSettings replaces the topic-level settings (AlterConfigs).
func (p *Partition) SetSettings(s Settings) { p.settings.Store(&s) }

// BecomeLeader makes this replica the leader at the given epoch, with the
// given in-sync replicas, and records the epoch's start in the log's epoch
// cache.
func (p *Partition) BecomeLeader(epoch int32, inSync []int32) error {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if latest, ok := p.log.LatestEpoch(); !ok || epoch > latest {
		if err := p.log.AssignEpoch(epoch, p.log.LogEndOffset()); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.leader = true
	p.leaderEpoch = epoch
	p.inSync = inSync
	p.mu.Unlock()
	return nil
}

// Leader reports whether this replica leads, and at which epoch.
func (p *Partition) Leader() (bool, int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader, p.leaderEpoch
}

// HighWatermark returns the offset below which records are committed and
// visible to consumers.
func (p *Partition) HighWatermark() int64 { return p.highWatermark.Load() }

// Watch registers ch to receive a value, without blocking, when the high
// watermark next moves. One channel (buffered, capacity 1) may watch many
// partitions: a long-polling fetch waits on one channel for all of its
// partitions. Unwatch must follow, or the partition keeps ch until the next
// move.
func (p *Partition) Watch(ch chan<- struct{}) {
	p.mu.Lock()
	p.watchers[ch] = struct{}{}
	p.mu.Unlock()
}

// Unwatch removes ch.
func (p *Partition) Unwatch(ch chan<- struct{}) {
	p.mu.Lock()
	delete(p.watchers, ch)
	p.mu.Unlock()
}

// advanceHighWatermark raises the high watermark to hw and signals the
// watchers.
func (p *Partition) advanceHighWatermark(hw int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if hw <= p.highWatermark.Load() {
		return
	}
	p.highWatermark.Store(hw)
	// Retention and compaction stay below the high watermark, as in Kafka.
	p.log.SetRetentionBound(hw)
	for ch := range p.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
		delete(p.watchers, ch)
	}
}

// Errors a produce can fail with, besides the storage ones.
var (
	ErrNotLeader         = fmt.Errorf("replica: %w", kerr.NotLeaderForPartition)
	ErrNotEnoughReplicas = fmt.Errorf("replica: %w", kerr.NotEnoughReplicas)
)

// AppendResult is a leader append's outcome.
type AppendResult struct {
	storage.AppendInfo
	// Duplicate is set when the whole request was a retry of batches
	// already in the log (idempotent producers); AppendInfo then gives the
	// original offsets and nothing was written.
	Duplicate bool
}

// AppendAsLeader appends a produce request's records for this partition.
// requiredAcks is the request's acks (0, 1 or -1). It returns once the
// records are in the log; Committed waits for acks=all.
func (p *Partition) AppendAsLeader(records []byte, requiredAcks int16) (AppendResult, error) {
	s := p.settings.Load()
	p.appendMu.Lock()
	p.mu.Lock()
	leader, epoch, isr := p.leader, p.leaderEpoch, len(p.inSync)
	p.mu.Unlock()
	if !leader {
		p.appendMu.Unlock()
		return AppendResult{}, ErrNotLeader
	}
	if requiredAcks == -1 && isr < s.MinInsyncReplicas {
		p.appendMu.Unlock()
		return AppendResult{}, fmt.Errorf("%w: %d in sync, min.insync.replicas is %d", ErrNotEnoughReplicas, isr, s.MinInsyncReplicas)
	}
	opts := storage.AppendOptions{AssignOffsets: true, LeaderEpoch: epoch, LogAppendTime: -1}
	if s.LogAppendTime {
		opts.LogAppendTime = p.now().UnixMilli()
	}
	txn := p.producers.Begin()
	dup, err := checkProducers(txn, records, opts.LogAppendTime)
	if err != nil || dup != nil {
		p.appendMu.Unlock()
		if err != nil {
			return AppendResult{}, err
		}
		// A retry is answered as the original append was, with its
		// log-append time on LogAppendTime topics (the cached timestamp
		// is the one stored, the append time there). Kafka answers the
		// cached timestamp on CreateTime topics too, where clients would
		// take it for the record's timestamp; Strata answers -1 there, as
		// it does for a first append.
		dupTime := int64(-1)
		if s.LogAppendTime {
			dupTime = dup.Timestamp
		}
		return AppendResult{Duplicate: true, AppendInfo: storage.AppendInfo{
			FirstOffset: dup.FirstOffset, LastOffset: dup.LastOffset(), LogAppendTime: dupTime,
		}}, nil
	}
	info, err := p.log.Append(records, opts)
	if err != nil {
		p.appendMu.Unlock()
		return AppendResult{}, err
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
	p.appendMu.Unlock()
	if snapshot != nil {
		// Written (and fsynced) outside the lock. A snapshot only spares
		// recovery a scan; without it the state is rebuilt from the log.
		if err := p.log.WriteSnapshot(info.RolledTo, snapshot); err != nil {
			p.logger.Warn("writing producer snapshot", "topic", p.Topic, "partition", p.Index, "offset", info.RolledTo, "err", err)
		}
	}
	if !s.SyncEveryAppend {
		p.advanceHighWatermark(info.LastOffset + 1)
	}
	return AppendResult{AppendInfo: info}, nil
}

// checkProducers checks every batch of a request against the producers'
// state. It returns the first duplicate, if the request is a retry. Bytes
// that do not parse are left for the log's validation to refuse.
func checkProducers(txn *producer.Append, records []byte, logAppendTime int64) (*producer.BatchMetadata, error) {
	var dup *producer.BatchMetadata
	var err error
	record.Batches(records, func(h record.Header, _ []byte) bool {
		if logAppendTime >= 0 {
			h.MaxTimestamp = logAppendTime
		}
		var d *producer.BatchMetadata
		d, err = txn.Check(h)
		if d != nil && dup == nil {
			dup = d
		}
		return err == nil
	})
	return dup, err
}

// Committed blocks until the records below end are committed: flushed when
// every append is synced, and below the high watermark. A single node
// commits as soon as the flush returns.
func (p *Partition) Committed(ctx context.Context, end int64) error {
	if p.settings.Load().SyncEveryAppend {
		if err := p.log.Flush(end); err != nil {
			return err
		}
		p.advanceHighWatermark(end)
	}
	ch := make(chan struct{}, 1)
	defer p.Unwatch(ch)
	for {
		p.Watch(ch)
		if p.HighWatermark() >= end {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for replication", kerr.RequestTimedOut)
		}
	}
}

// ErrIsStorage reports whether err is a failure of the log itself
// (KAFKA_STORAGE_ERROR) rather than of the request.
func ErrIsStorage(err error) bool { return errors.Is(err, storage.ErrLogOffline) }

// SyncEveryAppend reports flush.messages=1.
func (p *Partition) SyncEveryAppend() bool { return p.settings.Load().SyncEveryAppend }

// Watched reports whether anything waits for the high watermark to move.
func (p *Partition) Watched() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watchers) > 0
}
