package storage

import (
	"fmt"

	"github.com/strata-io/strata/internal/vfs"
)

// Flush makes every offset below upTo durable and returns when it is. It
// syncs the segments holding unflushed data (fdatasync), the indexes of
// segments that rolled, and the partition directory after files were
// created, then advances the recovery point to the log end offset it saw.
//
// Concurrent callers share fsyncs (group commit): a caller that finds an
// fsync in flight waits for it, and the next fsync covers every append made
// meanwhile, so each waiter either finds its offset already durable or
// joins the next round. A failed fsync takes the log offline; Flush then
// returns ErrLogOffline, now and forever.
func (l *Log) Flush(upTo int64) error {
	if err := l.Offline(); err != nil {
		return err
	}
	if upTo <= l.recoveryPoint.Load() {
		return nil
	}
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if err := l.Offline(); err != nil {
		return err
	}
	if upTo <= l.recoveryPoint.Load() {
		return nil
	}
	return l.flushLocked()
}

// flushLocked syncs everything appended so far. l.flushMu must be held.
func (l *Log) flushLocked() error {
	// Load the end before the segment list: every byte below it is in a
	// segment of the list, and that segment was marked dirty before the end
	// was published.
	target := l.logEndOffset.Load()
	recoveryPoint := l.recoveryPoint.Load()
	syncDir := l.unflushedDir.Swap(false)
	l.mu.RLock()
	segs, dir, closed := l.segments, l.dir, l.closed
	l.mu.RUnlock()
	if closed {
		return fmt.Errorf("%w: %s", ErrClosed, l)
	}
	// Sync from the end back to the segment holding the recovery point,
	// and past it while segments are still dirty (one that rolled while an
	// earlier flush ran has unsynced indexes below the recovery point).
	first := floorSegment(segs, recoveryPoint)
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if i < first && !s.dirtyLog.Load() && !s.dirtyIndex.Load() {
			break
		}
		if err := s.flush(i == len(segs)-1); err != nil {
			return l.fail("syncing segment "+segmentName(s.baseOffset), err)
		}
	}
	if syncDir {
		if err := vfs.SyncDir(l.fs, dir); err != nil {
			return l.fail("syncing directory", err)
		}
	}
	if target > recoveryPoint {
		l.recoveryPoint.Store(target)
	}
	l.lastFlushMs.Store(l.now().UnixMilli())
	return nil
}
