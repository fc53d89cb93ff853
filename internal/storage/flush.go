package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-io/strata/internal/vfs"
)

// groupCommit is a log's fsync coordination (group commit): one Flush
// caller at a time leads a round that syncs everything appended so far
// (the log's flushLocked), and the others wait for it. It is owned by its
// Log.
type groupCommit struct {
	// syncMu serializes fsyncs: held by a round's leader, and by
	// anything that removes segments (no fsync runs on a closing file).
	// The log takes it after appendMu and its snapshots' fileMu.
	syncMu sync.Mutex
	// mu guards committing (a round is running); done is signalled when
	// one ends. Never held across I/O or while taking another lock.
	mu struct {
		sync.Mutex
		done       *sync.Cond
		committing bool
	}
	lastSyncNanos atomic.Int64 // how long the last round's fsyncs took
	fsyncRounds   atomic.Int64 // rounds that synced, for group-commit figures

	// Set by OpenLog: the log's end and recovery point, whether it is
	// offline, and its round.
	logEnd, recoveryPoint *atomic.Int64
	offline               func() error
	round                 func(rolledOnly bool) error
}

func (g *groupCommit) init(l *Log) {
	g.mu.done = sync.NewCond(&g.mu)
	g.logEnd, g.recoveryPoint, g.offline, g.round = &l.logEndOffset, &l.recoveryPoint, l.Offline, l.flushLocked
}

// Flush makes every offset below upTo durable and returns when it is. It
// syncs the segments holding unflushed data (fdatasync), the indexes of
// segments that rolled, the .txnindex files written to, and the partition
// directory after files were created, then advances the recovery point to the log end offset it saw.
//
// Concurrent callers share fsyncs (group commit): a caller that finds an
// fsync in flight waits for it, and the next fsync covers every append made
// meanwhile, so each waiter either finds its offset already durable or
// joins the next round. A failed fsync takes the log offline; Flush then
// returns ErrLogOffline, now and forever.
func (l *Log) Flush(upTo int64) error { return l.commit.flush(upTo, true) }

// flush is Flush; linger is false when the caller holds the log's
// appendMu (no append can arrive to share the fsync).
func (g *groupCommit) flush(upTo int64, linger bool) error {
	if err := g.offline(); err != nil {
		return err
	}
	if upTo <= g.recoveryPoint.Load() {
		return nil
	}
	// One caller at a time leads a round: it syncs everything appended so
	// far. The others wait on the condition, not on the fsync's lock, so
	// that those the round covered return as soon as it ends and one of
	// the rest leads the next round.
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		if err := g.offline(); err != nil {
			return err
		}
		if upTo <= g.recoveryPoint.Load() {
			return nil
		}
		if g.mu.committing {
			g.mu.done.Wait()
			continue
		}
		g.mu.committing = true
		g.mu.Unlock()
		g.syncMu.Lock()
		if linger {
			g.linger()
		}
		err := g.round(false)
		g.syncMu.Unlock()
		g.mu.Lock()
		g.mu.committing = false
		g.mu.done.Broadcast()
		if err != nil {
			return err
		}
	}
}

// linger delays an fsync while appends keep arriving, so that they share
// it: with N appenders each appending then flushing, the ones released by
// the previous fsync are appending right now, and an fsync started at once
// would cover only some of them (commit_delay in PostgreSQL, the binlog
// group-commit delay in MySQL). It waits while the log end moves, at most a
// quarter of the last fsync's duration, so a fast device is barely delayed
// and an idle log not at all. g.syncMu must be held.
func (g *groupCommit) linger() {
	budget := time.Duration(g.lastSyncNanos.Load()) / 4
	if budget < 20*time.Microsecond {
		return
	}
	const quiet = 20 * time.Microsecond
	start := time.Now()
	last, lastChange := g.logEnd.Load(), start
	for {
		runtime.Gosched()
		now := time.Now()
		if cur := g.logEnd.Load(); cur != last {
			last, lastChange = cur, now
		}
		if now.Sub(lastChange) > quiet || now.Sub(start) > budget {
			return
		}
	}
}

// FlushRolled makes the segments before the active one durable (their
// data, indexes and .txnindex files, and the directory entries of files
// created since the last flush) and moves the recovery point to the active
// segment's base offset, as Kafka's UnifiedLog.roll has its scheduler run
// flushUptoOffsetExclusive(newSegment.baseOffset). The active segment is
// left to Flush, flush.messages and flush.ms, and flush.ms's clock is not
// reset. The Manager's flusher calls it after a roll, off the append path.
// The rolled data is synced first without commit.syncMu, then
// again, with the indexes and the rest, under commit.syncMu, which Flush callers
// and the mutators that remove segments share. A failed fsync takes the
// log offline, as Flush's does.
func (l *Log) FlushRolled() error {
	if err := l.Offline(); err != nil {
		return err
	}
	// Sync the data of the rolled segments from the one holding the
	// recovery point on, without the fsync lock: the bulk of their
	// writeback (up to a segment's worth) happens here, while retention,
	// DeleteRecords and truncation, which take it under appendMu, go on;
	// the locked round after it then finds little to write. The segments
	// stay marked dirty, so the locked round syncs each again and alone
	// decides what is durable. A segment removed meanwhile has its file
	// closed under it: that error is no fault. Any other takes the log
	// offline, as a failed fsync must (its pages may be marked clean
	// without being written).
	segs := l.segmentList()
	for i := floorSegment(segs, l.recoveryPoint.Load()); i < len(segs)-1; i++ {
		s := segs[i]
		if !s.dirtyLog.Load() {
			continue
		}
		if err := s.log.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			return l.fail("syncing segment "+segmentName(s.baseOffset), err)
		}
	}
	l.commit.syncMu.Lock()
	defer l.commit.syncMu.Unlock()
	return l.flushLocked(true)
}

// flushLocked syncs everything appended so far or, when rolledOnly, every
// segment but the active one. l.commit.syncMu must be held.
func (l *Log) flushLocked(rolledOnly bool) error {
	// Load the end before the segment list: every byte below it is in a
	// segment of the list, and that segment was marked dirty before the end
	// was published.
	target := l.logEndOffset.Load()
	recoveryPoint := l.recoveryPoint.Load()
	syncDir := l.unflushedDir.Swap(false)
	l.mu.RLock()
	segs, dir, closed := l.mu.segments, l.mu.dir, l.mu.closed
	l.mu.RUnlock()
	if closed {
		return fmt.Errorf("%w: %s", ErrClosed, l)
	}
	if rolledOnly {
		// Every byte below the active segment's base offset is in the
		// segments before it (a roll marks the old one inactive before it
		// publishes the new list), and none of them takes appends again
		// unless truncation, which holds commit.syncMu, makes one active.
		target = min(target, segs[len(segs)-1].baseOffset)
		segs = segs[:len(segs)-1]
	}
	// Sync from the end back to the segment holding the recovery point,
	// and past it while segments are still dirty (one that rolled while an
	// earlier flush ran has unsynced indexes below the recovery point).
	first := floorSegment(segs, recoveryPoint)
	if !rolledOnly {
		// Group commit's figures: a rolled segment's fsync is not the
		// appenders' and must not stretch their linger.
		l.commit.fsyncRounds.Add(1)
		syncStart := time.Now()
		defer func() { l.commit.lastSyncNanos.Store(int64(time.Since(syncStart))) }()
	}
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if i < first && !s.dirtyLog.Load() && !s.dirtyIndex.Load() {
			break
		}
		if err := s.flush(!rolledOnly && i == len(segs)-1); err != nil {
			return l.fail("syncing segment "+segmentName(s.baseOffset), err)
		}
	}
	if err := l.snapshots.sync(dir); err != nil {
		return l.fail("syncing a producer snapshot", err)
	}
	if syncDir {
		if err := vfs.SyncDir(l.fs, dir); err != nil {
			return l.fail("syncing directory", err)
		}
	}
	if l.unflushedParent.Swap(false) {
		if err := vfs.SyncDir(l.fs, filepath.Dir(filepath.Clean(dir))); err != nil {
			return l.fail("syncing the data directory", err)
		}
	}
	if err := l.txns.commitRecoveryPoint(recoveryPoint, target); err != nil {
		return err
	}
	if !rolledOnly {
		l.lastFlushMs.Store(l.now().UnixMilli())
	}
	return nil
}
