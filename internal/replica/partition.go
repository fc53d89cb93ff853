package replica

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
)

// Settings are the topic-level values a partition acts on.
type Settings struct {
	MinInsyncReplicas int  // min.insync.replicas
	LogAppendTime     bool // message.timestamp.type=LogAppendTime
	// SyncEveryAppend is flush.messages=1: every append is fsynced (group
	// committed) before it counts towards the high watermark. The replica
	// then does the fsyncs itself: the leader's once per round of appends
	// waiting (AwaitAcks), a follower's before it fetches again (and, after
	// a restart, before its first fetch: records a killed process never
	// synced come back from the page cache); the log's own flush.messages
	// would sync inside every append, one at a time.
	SyncEveryAppend bool
	// Log is the log's configuration (segments, retention, compaction).
	Log storage.Config
}

// State is a partition's state in the metadata image, as the controller
// decided it.
type State struct {
	Leader         int32 // -1 when there is none
	LeaderEpoch    int32
	PartitionEpoch int32
	Replicas       []int32
	ISR            []int32
	// Ineligible are the replicas whose brokers are fenced or shutting
	// down: a leader neither proposes them for the ISR nor waits for them.
	Ineligible []int32
	// Removing are the replicas a reassignment is removing (KIP-455),
	// among Replicas.
	Removing []int32
}

// Options are a partition's broker-level settings and seams.
type Options struct {
	NodeID int32
	// LagTimeMax is replica.lag.time.max.ms (30 s): how long a follower may
	// go without catching up before it leaves the ISR.
	LagTimeMax time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
	// AlterPartition sends an ISR change to the controller (AlterPartition,
	// API 56) and returns the partition epoch it committed, or a Kafka
	// error (kerr) saying why not. It may be called from any goroutine,
	// several partitions at once. When nil, ISR changes stay in flight
	// until the metadata changes the partition (a single node, whose ISR
	// is itself, proposes none).
	AlterPartition func(ctx context.Context, topic string, partition int32, change ISRChange) (partitionEpoch int32, err error)
	// Context bounds the partition's background work (AlterPartition
	// calls and their retries): cancel it when the broker stops.
	Context context.Context
	// ISRChanged, when set, is called once for every ISR change the
	// controller committed for this leader (Kafka's IsrShrinksPerSec and
	// IsrExpandsPerSec), with p.mu held: it must not block or call the
	// partition.
	ISRChanged func(shrink bool)
}

// Partition is this broker's replica of one partition. It owns the log.
type Partition struct {
	Topic    string
	Index    int32
	log      *storage.Log
	opts     Options
	settings atomic.Pointer[Settings]

	appendMu sync.Mutex
	// producers is the idempotent producers' state; appendMu guards it.
	producers *producer.PartitionState
	// firstUnstable is producers.FirstUnstableOffset(), published for
	// readers that do not take appendMu; written under appendMu.
	firstUnstable atomic.Int64

	mu sync.Mutex
	// tracker is the replication state machine; mu guards it, and the
	// effects of every event are applied before mu is released.
	tracker *tracker
	// highWatermark is tracker.highWatermark, published for readers that
	// do not take mu; written under mu.
	highWatermark atomic.Int64
	// watchers are signalled (without blocking) when the partition has
	// something new to read; see Watch. mu guards them.
	watchers map[chan<- struct{}]struct{}
	// ackWaiters are the acks=all produces waiting, by the id the tracker
	// knows them by; mu guards them.
	ackWaiters map[uint64]chan<- error
	nextAckID  uint64

	// leaderThrottled and followerThrottled say which replication throttle
	// applies to this replica (the topic's leader. and
	// follower.replication.throttled.replicas naming it; the follower's
	// only while it is outside the ISR), as the broker sets them from the
	// metadata.
	leaderThrottled, followerThrottled atomic.Bool
}

// New returns a replica that owns log, with the idempotent producers'
// state rebuilt from the latest snapshot and the batches after it, and the
// high watermark the log checkpointed. It is not leader until
// BecomeLeader.
func New(topic string, index int32, log *storage.Log, s Settings, opts Options) (*Partition, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	p := &Partition{Topic: topic, Index: index, log: log, opts: opts,
		producers: producer.NewPartitionState(),
		watchers:  map[chan<- struct{}]struct{}{}, ackWaiters: map[uint64]chan<- error{}}
	if s.SyncEveryAppend {
		// The log keeps the configuration it was opened with (s.Log
		// applies from SetSettings), less its own flush.messages.
		c := log.Config()
		c.FlushMessages = math.MaxInt64
		if err := log.SetConfig(c); err != nil {
			return nil, err
		}
	}
	p.settings.Store(&s)
	if err := p.rebuildProducers(); err != nil {
		return nil, err
	}
	// The high watermark checkpointed in replication-offset-checkpoint
	// (bounded by the log), as Kafka's Partition starts from: records
	// recovered past it may never have been committed. The log start for
	// a log without one. A sole replica shows what it recovered once it
	// leads (tracker.becomeLeader).
	hw, ok := log.HighWatermark()
	if !ok {
		hw = log.LogStartOffset()
	}
	p.tracker = newTracker(opts.NodeID, hw, s.MinInsyncReplicas, opts.LagTimeMax.Milliseconds())
	p.highWatermark.Store(hw)
	log.SetHighWatermark(hw)
	return p, nil
}

// rebuildProducers loads the newest readable producer snapshot at or
// below where the log's aborted-transaction index stops being trusted
// (storage's TxnIndex.SuspectFrom: the segments recovery checked after a
// crash, or a torn .txnindex) and replays the batch headers written after
// it. Markers are read whole, and the index entries of the aborted
// transactions the replay finds replace those from its start on: a crash
// may have lost them, or left entries of a truncated tail. A snapshot that
// does not load (a roll's, which a power loss caught before its flush
// synced it) gives way to the next older one. With no usable snapshot
// there, the replay starts at the log start, as Kafka rebuilds from the
// log start when it finds no snapshot.
func (p *Partition) rebuildProducers() error {
	defer p.publishFirstUnstableLocked()
	suspect := p.log.TxnIndex().SuspectFrom()
	var (
		state   *producer.PartitionState
		aborted replayedAborts
		err     error
		offset  int64
		loaded  bool
	)
	offs := p.log.Snapshots().Offsets()
	for i := len(offs) - 1; i >= 0 && !loaded; i-- {
		if offs[i] > suspect {
			continue
		}
		data, rerr := p.log.Snapshots().Read(offs[i])
		if rerr != nil {
			continue
		}
		offset = offs[i]
		state, aborted, err = p.replayProducers(data, offset)
		loaded = err == nil
	}
	if !loaded {
		offset = p.log.LogStartOffset()
		state, aborted, err = p.replayProducers(nil, offset)
	}
	if err != nil {
		return fmt.Errorf("replica: rebuilding producer state of %s-%d: %w", p.Topic, p.Index, err)
	}
	p.producers = state
	if err := p.log.TxnIndex().Rebuild(offset, aborted.txns, func(a storage.AbortedTxn) bool {
		return aborted.unknownStart[a.LastOffset]
	}); err != nil {
		return fmt.Errorf("replica: rebuilding the aborted-transaction index of %s-%d: %w", p.Topic, p.Index, err)
	}
	return nil
}

// replayedAborts are the aborted transactions a replay found.
type replayedAborts struct {
	txns []storage.AbortedTxn
	// unknownStart holds the offsets of ABORT markers of producers the
	// replay knew no open transaction of: one that began before the
	// replay's start (whose index entry the replay cannot rebuild), or a
	// marker that ended nothing (a partition added and never written to).
	unknownStart map[int64]bool
}

// replayProducers builds the producers' state from a snapshot (nil for
// none) and the batches from offset on, and the aborted transactions
// whose markers it met.
func (p *Partition) replayProducers(snapshot []byte, offset int64) (*producer.PartitionState, replayedAborts, error) {
	state := producer.NewPartitionState()
	aborted := replayedAborts{unknownStart: map[int64]bool{}}
	if snapshot != nil {
		if err := state.LoadSnapshot(snapshot); err != nil {
			return nil, aborted, err
		}
	}
	var readErr error
	err := p.log.ScanBatchHeaders(offset, func(h record.Header, _ int64) bool {
		if !h.IsControl() || !h.HasProducerID() {
			state.Update(h)
			return true
		}
		var m record.Marker
		var parseErr error
		readErr = p.log.ReadBatches(h.BaseOffset, 1, func(_ record.Header, batch []byte) bool {
			m, parseErr = record.ParseMarker(batch)
			return false
		})
		if readErr != nil {
			return false
		}
		if parseErr != nil {
			// Not a marker: it ends nothing (Kafka ignores unknown
			// control records too).
			state.Update(h)
			return true
		}
		done := state.EndTxn(h, m)
		switch {
		case !done.Aborted:
		case done.FirstOffset < 0:
			aborted.unknownStart[done.LastOffset] = true
		default:
			aborted.txns = append(aborted.txns, abortedEntry(state, done))
		}
		return true
	})
	if err == nil {
		err = readErr
	}
	return state, aborted, err
}

// logConfig is the log's configuration: Log, without flush.messages when
// the replica syncs every append itself.
func (s *Settings) logConfig() storage.Config {
	c := s.Log
	if s.SyncEveryAppend {
		c.FlushMessages = math.MaxInt64
	}
	return c
}

// SetSettings replaces the topic-level settings (AlterConfigs, or the
// topic's configuration once known).
// Invalid log settings change nothing.
func (p *Partition) SetSettings(s Settings) error {
	if err := p.log.SetConfig(s.logConfig()); err != nil {
		return err
	}
	p.settings.Store(&s)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tracker.configure(s.MinInsyncReplicas, p.opts.LagTimeMax.Milliseconds())
	return nil
}

// BecomeLeader makes this replica the leader in state, and records the
// leader epoch's start in the log's epoch cache.
func (p *Partition) BecomeLeader(state State) error {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if latest, ok := p.log.LatestEpoch(); !ok || state.LeaderEpoch > latest {
		if err := p.log.AssignEpoch(state.LeaderEpoch, p.log.LogEndOffset()); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applyLocked(p.tracker.becomeLeader(state, p.log.LogEndOffset(), p.committable(), p.nowMs()))
	return nil
}

// committable is how far the local log counts towards the high watermark:
// the log end offset, or the flushed end when every append is synced.
func (p *Partition) committable() int64 {
	if p.settings.Load().SyncEveryAppend {
		return p.log.RecoveryPoint()
	}
	return p.log.LogEndOffset()
}

func (p *Partition) nowMs() int64 { return p.opts.Now().UnixMilli() }

// Tick lets the partition notice followers that fell out of sync. The
// broker calls it every half replica.lag.time.max.ms, as Kafka's
// isr-expiration task runs.
func (p *Partition) Tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applyLocked(p.tracker.tick(p.nowMs()))
}

// SetThrottled sets which replication throttles apply to this replica:
// leader, to what it sends followers outside the ISR; follower, to what it
// fetches.
func (p *Partition) SetThrottled(leader, follower bool) {
	p.leaderThrottled.Store(leader)
	p.followerThrottled.Store(follower)
}

// LeaderThrottled reports whether what this replica sends followers
// outside the ISR counts towards leader.replication.throttled.rate.
func (p *Partition) LeaderThrottled() bool { return p.leaderThrottled.Load() }

// FollowerThrottled reports whether what this replica fetches counts
// towards follower.replication.throttled.rate.
func (p *Partition) FollowerThrottled() bool { return p.followerThrottled.Load() }

// InSync reports whether a replica is in the committed ISR of this leader.
func (p *Partition) InSync(id int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.tracker.isr, id)
}

// SetIneligible takes the replicas whose brokers are now fenced or
// shutting down (see State.Ineligible), when that changes without a new
// partition state.
func (p *Partition) SetIneligible(ids []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applyLocked(p.tracker.setIneligible(ids, p.nowMs()))
}

// ISR returns the committed in-sync replicas when this replica leads.
func (p *Partition) ISR() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.tracker.isr)
}

// fence applies KIP-320 to a caller that believes the leader epoch is
// currentLeaderEpoch (-1: it does not say), in Kafka's order: the epoch
// first, then, with requireLeader, that this replica leads. It returns
// this replica's leader epoch.
func (p *Partition) fence(currentLeaderEpoch int32, requireLeader bool) (int32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fenceLocked(currentLeaderEpoch, requireLeader)
}

// fenceLocked is fence; p.mu must be held.
func (p *Partition) fenceLocked(currentLeaderEpoch int32, requireLeader bool) (int32, error) {
	epoch := p.tracker.leaderEpoch
	switch {
	case currentLeaderEpoch >= 0 && currentLeaderEpoch < epoch:
		return epoch, fmt.Errorf("%w: %d is older than %d", ErrFencedLeaderEpoch, currentLeaderEpoch, epoch)
	case currentLeaderEpoch > epoch:
		return epoch, fmt.Errorf("%w: %d is newer than %d", ErrUnknownLeaderEpoch, currentLeaderEpoch, epoch)
	case requireLeader && !p.tracker.leader:
		return epoch, ErrNotLeader
	}
	return epoch, nil
}

// HighWatermark returns the offset below which records are committed and
// visible to consumers.
func (p *Partition) HighWatermark() int64 { return p.highWatermark.Load() }

// Stats are a partition's sizes and offsets, for metrics and
// DescribeLogDirs.
type Stats struct {
	LogStartOffset int64
	LogEndOffset   int64
	HighWatermark  int64
	Size           int64 // bytes on disk
}

// Stats returns the partition's sizes and offsets.
func (p *Partition) Stats() Stats {
	return Stats{LogStartOffset: p.log.LogStartOffset(), LogEndOffset: p.log.LogEndOffset(),
		HighWatermark: p.HighWatermark(), Size: p.log.Size()}
}

// Offline returns the error that took the log offline, or nil.
func (p *Partition) Offline() error { return p.log.Offline() }

// SnapshotProducers writes the producer state at the log end offset, so the
// next start replays nothing (clean shutdown).
func (p *Partition) SnapshotProducers() error {
	p.appendMu.Lock()
	data, end, none := p.producers.Snapshot(), p.log.LogEndOffset(), len(p.producers.Producers()) == 0
	p.appendMu.Unlock()
	// As Kafka's takeSnapshot, only when the log moved since the last
	// snapshot; and not at all for an empty log without producers, which
	// has nothing for recovery to skip.
	if offs := p.log.Snapshots().Offsets(); len(offs) > 0 && offs[len(offs)-1] == end {
		return nil
	}
	if none && end == p.log.LogStartOffset() {
		return nil
	}
	return p.log.Snapshots().Write(end, data)
}

// ExpireProducers forgets producers idle for longer than expirationMs
// (producer.id.expiration.ms).
func (p *Partition) ExpireProducers(expirationMs int64) int {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	return p.producers.Expire(p.nowMs(), expirationMs)
}

// ActiveProducers lists the active producers, for DescribeProducers. It
// needs the leader.
func (p *Partition) ActiveProducers() ([]producer.ProducerInfo, error) {
	if _, err := p.fence(-1, true); err != nil {
		return nil, err
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	return p.producers.Producers(), nil
}
