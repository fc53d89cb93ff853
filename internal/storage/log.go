package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// LogOptions are what a Log needs besides its configuration; the Manager
// fills them from its checkpoints.
type LogOptions struct {
	// Logger receives roll, deletion and recovery events; nil means
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock (segment.ms for batches without timestamps,
	// flush.ms, retention when called through the Manager); nil means
	// time.Now.
	Now func() time.Time
	// RecoveryPoint is the offset below which data was flushed, from the
	// recovery-point checkpoint (0 when absent). Without a clean shutdown,
	// the segment holding it and every later one are scanned.
	RecoveryPoint int64
	// LogStartOffset is from the log-start-offset checkpoint, -1 when
	// absent (the first segment's base offset is used).
	LogStartOffset int64
	// CleanShutdown says the data directory holds a clean-shutdown marker:
	// segments are trusted without a scan (indexes are still checked).
	CleanShutdown bool
	// CleanerCheckpoint is from cleaner-offset-checkpoint: the offset the
	// log cleaner has deduplicated up to (0 when absent).
	CleanerCheckpoint int64
	// HighWatermark is from replication-offset-checkpoint: the high
	// watermark the replica layer last set (see SetHighWatermark), or -1
	// when absent, as for a log the replica layer does not own.
	HighWatermark int64
	// DecompressionBudget bounds the memory of the log's decompressions
	// (produce validation, cleaning, timestamp lookups), shared by the
	// broker's logs; nil means record.DefaultBudget.
	DecompressionBudget *record.Budget

	// summarized is set by the Manager, which sums up the recovery of all
	// its logs in one line: a log's own recovery events are debug lines.
	summarized bool
	// rolled, set by the Manager, is told of every roll, under appendMu:
	// it must not block (the Manager queues the log for FlushRolled).
	rolled func(*Log)
}

// Log is one partition's log. It is safe for concurrent use with one
// appender at a time: callers serialize Append (and the other mutators are
// serialized with it internally); reads, Flush and the accessors may run
// concurrently with everything.
type Log struct {
	fs        vfs.FS
	topic     string
	partition int32
	logger    *slog.Logger
	now       func() time.Time
	cfg       atomic.Pointer[Config]
	budget    *record.Budget // decompression memory; never nil

	appendMu sync.Mutex
	// snapshots are the producer-state snapshot files (snapshot.go).
	snapshots ProducerSnapshots
	// txns is the aborted-transaction index (txnindex.go).
	txns TxnIndex
	// commit is the log's group commit (flush.go).
	commit groupCommit

	// mu guards the log's shape: held only briefly, never across I/O but
	// the rename of a deleted log's directory (markDeleted). Every field is
	// written under appendMu as well, so a holder of appendMu may read
	// them without mu.
	mu struct {
		sync.RWMutex
		dir      string
		segments []*segment // by base offset; the last is active; replaced, never edited in place
		epochs   epochCache
		// epochsDirty is set when the cache holds an entry its file does
		// not (assigned on an empty log); the next append writes the
		// file first.
		epochsDirty bool
		closed      bool
		deleted     bool // by the Manager: the directory was renamed *-delete
	}

	logEndOffset   atomic.Int64
	logStartOffset atomic.Int64 // written under mu and appendMu
	recoveryPoint  atomic.Int64 // written under commit.syncMu
	lastFlushMs    atomic.Int64
	unflushedDir   atomic.Bool // files were created in dir since its last sync
	// unflushedParent is set for a directory created since the parent's
	// last sync: the next flush syncs the parent too, so the directory of
	// a partition survives a crash once it holds durable data.
	unflushedParent atomic.Bool
	// retentionBound limits retention to segments whose successor starts
	// at or below it, and cleaning to offsets below it: the high watermark
	// (SetHighWatermark), as Kafka bounds both by it (a record must not be
	// compacted away in favour of one a truncation could remove);
	// math.MaxInt64, no bound, until the replica layer sets one.
	retentionBound atomic.Int64
	highWatermark  atomic.Int64 // see SetHighWatermark; -1 when unknown
	offline        atomic.Pointer[error]

	// cleaner is the log cleaner's state (cleaner.go).
	cleaner cleanerState

	deletes deleteQueue

	// recovery is what opening the log found and did; written by load
	// only, before the log is shared.
	recovery   recoveryStats
	summarized bool
	rolled     func(*Log) // LogOptions.rolled; nil for a log of its own
}

// ParsePartitionDir splits a partition directory name "<topic>-<partition>"
// on its last '-'.
func ParsePartitionDir(name string) (TopicPartition, error) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || i == len(name)-1 {
		return TopicPartition{}, fmt.Errorf("storage: %q is not a <topic>-<partition> directory", name)
	}
	p, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || p < 0 || name[i+1] == '+' {
		return TopicPartition{}, fmt.Errorf("storage: %q is not a <topic>-<partition> directory", name)
	}
	return TopicPartition{Topic: name[:i], Partition: int32(p)}, nil
}

// OpenLog opens (creating if needed) the partition log in dir, whose name
// must be "<topic>-<partition>", recovering it as opts say.
func OpenLog(fs vfs.FS, dir string, cfg Config, opts LogOptions) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tp, err := ParsePartitionDir(filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	l := &Log{fs: fs, topic: tp.Topic, partition: tp.Partition, logger: opts.Logger, now: opts.Now,
		budget: opts.DecompressionBudget, summarized: opts.summarized,
		rolled: opts.rolled}
	l.mu.dir = dir
	if l.budget == nil {
		l.budget = record.DefaultBudget
	}
	l.commit.init(l)
	l.retentionBound.Store(math.MaxInt64)
	l.highWatermark.Store(max(opts.HighWatermark, -1))
	l.txns.fs, l.txns.dir, l.txns.name, l.txns.fail = fs, l.Dir, l.String(), l.fail
	l.txns.recoveryPoint, l.txns.writable, l.txns.logEnd, l.txns.segments = &l.recoveryPoint, l.writable, &l.logEndOffset, l.segmentList
	l.txns.firstUnstable.Store(-1)
	l.cleaner.checkpoint.Store(max(opts.CleanerCheckpoint, 0))
	l.cleaner.deleteHorizon.Store(math.MaxInt64)
	if l.logger == nil {
		l.logger = slog.Default()
	}
	l.logger = l.logger.With("topic", tp.Topic, "partition", tp.Partition)
	l.snapshots.fs, l.snapshots.dir, l.snapshots.name = fs, l.Dir, l.String()
	l.snapshots.offline, l.snapshots.logEnd = l.Offline, &l.logEndOffset
	l.snapshots.wroteUnsynced = func() {
		l.unflushedDir.Store(true)
		if l.rolled != nil {
			l.rolled(l)
		}
	}
	l.deletes.fs, l.deletes.logger, l.deletes.dir, l.deletes.cfg, l.deletes.fail = fs, l.logger, l.Dir, &l.cfg, l.fail
	if l.now == nil {
		l.now = time.Now
	}
	l.cfg.Store(&cfg)
	if !vfs.Exists(fs, dir) {
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		l.unflushedParent.Store(true)
	}
	if err := l.load(opts); err != nil {
		for _, s := range l.mu.segments {
			s.close()
		}
		return nil, fmt.Errorf("storage: opening %s: %w", dir, err)
	}
	l.lastFlushMs.Store(l.now().UnixMilli())
	return l, nil
}

// Topic returns the topic name.
func (l *Log) Topic() string { return l.topic }

// Partition returns the partition index.
func (l *Log) Partition() int32 { return l.partition }

// Dir returns the partition directory (which changes when the Manager
// deletes the log).
func (l *Log) Dir() string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.mu.dir
}

func (l *Log) String() string { return fmt.Sprintf("%s-%d", l.topic, l.partition) }

// Config returns the current configuration.
func (l *Log) Config() Config { return *l.cfg.Load() }

// SetConfig changes the configuration (dynamic topic configs). Size limits
// apply from the next append; index sizes from the next segment.
func (l *Log) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	l.cfg.Store(&cfg)
	return nil
}

// LogStartOffset returns the first offset a consumer may read.
func (l *Log) LogStartOffset() int64 { return l.logStartOffset.Load() }

// LogEndOffset returns the offset the next appended record will get.
func (l *Log) LogEndOffset() int64 { return l.logEndOffset.Load() }

// HighWatermark returns the high watermark last set with SetHighWatermark
// or, until then, the one checkpointed in replication-offset-checkpoint
// (LogOptions.HighWatermark), within [log start offset, log end offset]
// as Kafka's UnifiedLog bounds it: a crash may have lost records below a
// checkpointed high watermark, or DeleteRecords moved the start past it.
// ok is false when neither is known.
func (l *Log) HighWatermark() (hw int64, ok bool) {
	hw = l.highWatermark.Load()
	if hw < 0 {
		return 0, false
	}
	return min(max(hw, l.LogStartOffset()), l.LogEndOffset()), true
}

// SetHighWatermark records the partition's high watermark, which the
// Manager checkpoints in replication-offset-checkpoint, and bounds
// retention and cleaning by it (retentionBound). The replica layer
// calls it whenever the high watermark moves.
func (l *Log) SetHighWatermark(hw int64) {
	l.highWatermark.Store(max(hw, 0))
	l.retentionBound.Store(hw)
}

// RecoveryPoint returns the offset below which everything is durable.
func (l *Log) RecoveryPoint() int64 { return l.recoveryPoint.Load() }

func (l *Log) segmentList() []*segment {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.mu.segments
}

// Size returns the bytes held by the log's segments.
func (l *Log) Size() int64 {
	var n int64
	for _, s := range l.segmentList() {
		n += s.size.Load()
	}
	return n
}

// NumSegments returns the number of segments.
func (l *Log) NumSegments() int { return len(l.segmentList()) }

// SegmentBaseOffsets returns the segments' base offsets, ascending.
func (l *Log) SegmentBaseOffsets() []int64 {
	segs := l.segmentList()
	out := make([]int64, len(segs))
	for i, s := range segs {
		out[i] = s.baseOffset
	}
	return out
}

// floorSegment returns the index of the segment with the greatest base
// offset <= offset, or 0 when offset precedes them all.
func floorSegment(segs []*segment, offset int64) int {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].baseOffset > offset })
	return max(i-1, 0)
}

// Offline returns the error that took the log offline, or nil.
func (l *Log) Offline() error {
	if p := l.offline.Load(); p != nil {
		return *p
	}
	return nil
}

// fail takes the log offline for err, once; it returns the offline error.
func (l *Log) fail(op string, err error) error {
	e := fmt.Errorf("%w: %s: %s: %w", ErrLogOffline, l, op, err)
	if l.offline.CompareAndSwap(nil, &e) {
		l.logger.Error("log offline", "op", op, "err", err)
	}
	return *l.offline.Load()
}

// writable returns why the log cannot be changed, or nil. l.appendMu must
// be held.
func (l *Log) writable() error {
	if err := l.Offline(); err != nil {
		return err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed || l.mu.deleted {
		return fmt.Errorf("%w: %s", ErrClosed, l)
	}
	return nil
}

// Close closes the log: the active segment writes its final time-index entry
// and trims its indexes, which are synced (unless the log is offline), and
// every file is closed, including those awaiting delayed deletion (which are
// removed now). Close does not flush data; the Manager flushes first.
//
// A deleted log's files are only closed: they are about to be removed (a
// crash leaves a "-delete" directory that opening removes), and its
// indexes' paths still name the directory as it was before the rename, so
// a final time-index entry or a trim would open a file that is gone.
// Kafka's delete of a log likewise closes and removes its segments without
// a flush.
func (l *Log) Close() error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.commit.syncMu.Lock()
	defer l.commit.syncMu.Unlock()
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.closed = true
	segs, deleted := l.mu.segments, l.mu.deleted
	l.mu.Unlock()

	var errs []error
	live := !deleted && l.Offline() == nil
	if live {
		errs = append(errs, l.snapshots.sync(l.mu.dir))
	}
	if len(segs) > 0 && live {
		active := segs[len(segs)-1]
		if err := active.becomeInactive(); err != nil {
			errs = append(errs, err)
		} else if err := active.flush(false); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range segs {
		errs = append(errs, s.close())
	}
	l.deletes.finishAll()
	return errors.Join(errs...)
}

// Epochs returns a copy of the leader-epoch cache.
func (l *Log) Epochs() []EpochEntry {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return append([]EpochEntry(nil), l.mu.epochs.entries...)
}

// LatestEpoch returns the latest leader epoch in the cache.
func (l *Log) LatestEpoch() (int32, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.mu.epochs.latest()
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch with Kafka's semantics
// (KIP-101/279): the largest epoch <= epoch in the cache and the start offset
// of the next higher epoch, or the log end offset when epoch is the latest;
// (-1, -1) when there is none.
func (l *Log) EndOffsetForEpoch(epoch int32) (epochOut int32, endOffset int64) {
	leo := l.logEndOffset.Load()
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.mu.epochs.endOffsetFor(epoch, leo)
}

// AssignEpoch records that epoch starts at startOffset (a new leader does
// this at its log end offset), and writes leader-epoch-checkpoint.
func (l *Log) AssignEpoch(epoch int32, startOffset int64) error {
	if epoch < 0 || startOffset < 0 {
		return fmt.Errorf("storage: invalid epoch %d at offset %d", epoch, startOffset)
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if l.logEndOffset.Load() == l.logStartOffset.Load() {
		// An empty log (a partition just created, or one a new leader
		// takes over before any data): the entry matters only once data
		// follows it, and the first append writes the file before its
		// data. Creating a thousand partitions then costs no fsync here.
		l.mu.Lock()
		if l.mu.epochs.assign(epoch, startOffset) {
			l.mu.epochsDirty = true
		}
		l.mu.Unlock()
		return nil
	}
	return l.assignEpochLocked(epoch, startOffset)
}

// assignEpochLocked updates the cache and its file. l.appendMu must be held.
func (l *Log) assignEpochLocked(epoch int32, startOffset int64) error {
	l.mu.Lock()
	changed := l.mu.epochs.assign(epoch, startOffset) || l.mu.epochsDirty
	l.mu.Unlock()
	if !changed {
		return nil
	}
	return l.writeEpochsLocked()
}

// writeEpochsLocked writes leader-epoch-checkpoint. l.appendMu must be
// held. A failure takes the log offline: the cache on disk would disagree
// with the log.
func (l *Log) writeEpochsLocked() error {
	l.mu.Lock()
	data := l.mu.epochs.encode()
	dir := l.mu.dir
	l.mu.epochsDirty = false
	l.mu.Unlock()
	if err := vfs.WriteFileAtomic(l.fs, filepath.Join(dir, LeaderEpochCheckpointFile), data); err != nil {
		return l.fail("writing leader-epoch-checkpoint", err)
	}
	return nil
}

// openFiles returns how many descriptors segs hold.
func openFiles(segs []*segment) int {
	n := 0
	for _, s := range segs {
		n += s.openFiles()
	}
	return n
}
