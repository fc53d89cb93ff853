package storage

import (
	"fmt"
	"slices"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// deletePrefixLocked retires the first n segments (never the active one)
// and advances the log start offset to at least the next base offset.
// l.appendMu must be held.
func (l *Log) deletePrefixLocked(n int, reasons []string) error {
	if n == 0 {
		return nil
	}
	l.snapshots.fileMu.Lock()
	defer l.snapshots.fileMu.Unlock()
	l.commit.syncMu.Lock()
	defer l.commit.syncMu.Unlock()
	segs := l.mu.segments
	if n >= len(segs) {
		panic("storage: deleting the active segment")
	}
	l.mu.Lock()
	l.mu.segments = slices.Clone(segs[n:])
	newStart := max(l.logStartOffset.Load(), segs[n].baseOffset)
	l.logStartOffset.Store(newStart)
	epochsChanged := l.mu.epochs.truncateFromStart(newStart)
	l.mu.Unlock()
	for i, s := range segs[:n] {
		l.logger.Info("deleting segment", "base_offset", s.baseOffset, "size", s.size.Load(), "reason", reasons[i],
			"log_start_offset", newStart)
	}
	if err := l.deletes.retire(segs[:n]); err != nil {
		return err
	}
	if epochsChanged {
		if err := l.writeEpochsLocked(); err != nil {
			return err
		}
	}
	if err := l.txns.prune(newStart); err != nil {
		return err
	}
	return l.snapshots.pruneLocked(l.Dir(), newStart)
}

// EnforceRetention deletes the oldest segments that Kafka's rules expire,
// never the active one: with cleanup.policy delete (Config.Delete), those
// whose max timestamp is older than retention.ms (by the file's
// modification time when no batch has a timestamp), then those that keep
// the log over retention.bytes; then, whatever the policy, those wholly
// below the log start offset. It advances the log start offset and
// returns how many segments it deleted.
func (l *Log) EnforceRetention(now time.Time) (deletedSegments int, err error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.writable(); err != nil {
		return 0, err
	}
	cfg := l.cfg.Load()
	segs := l.mu.segments
	var reasons []string
	n := 0
	if cfg.Delete && cfg.RetentionMs >= 0 {
		nowMs := now.UnixMilli()
		for n < len(segs)-1 {
			ts, _ := segs[n].maxTimestampAndOffset()
			if ts < 0 {
				if st, err := segs[n].log.Stat(); err == nil {
					ts = st.ModTime().UnixMilli()
				}
			}
			if nowMs-ts <= cfg.RetentionMs {
				break
			}
			reasons = append(reasons, fmt.Sprintf("retention.ms %d: max timestamp %d", cfg.RetentionMs, ts))
			n++
		}
	}
	if cfg.Delete && cfg.RetentionBytes >= 0 {
		var size int64
		for _, s := range segs[n:] {
			size += s.size.Load()
		}
		diff := size - cfg.RetentionBytes
		for n < len(segs)-1 && diff-segs[n].size.Load() >= 0 {
			diff -= segs[n].size.Load()
			reasons = append(reasons, fmt.Sprintf("retention.bytes %d: log size %d", cfg.RetentionBytes, size))
			n++
		}
	}
	logStart := l.logStartOffset.Load()
	for n < len(segs)-1 && segs[n+1].baseOffset <= logStart {
		reasons = append(reasons, fmt.Sprintf("below log start offset %d", logStart))
		n++
	}
	// Kafka never deletes past the high watermark: data a follower may
	// still need, or a consumer not yet see.
	for bound := l.retentionBound.Load(); n > 0 && segs[n].baseOffset > bound; n-- {
	}
	if err := l.deletePrefixLocked(n, reasons); err != nil {
		return 0, err
	}
	return n, nil
}

// DeleteRecordsBefore advances the log start offset to offset (the
// DeleteRecords API) and deletes the segments wholly below it. It returns
// the new log start offset; an offset at or below the current one changes
// nothing, and one past the log end offset is ErrOffsetOutOfRange (the
// caller bounds it by the high watermark).
func (l *Log) DeleteRecordsBefore(offset int64) (newLogStart int64, err error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.writable(); err != nil {
		return 0, err
	}
	if leo := l.logEndOffset.Load(); offset > leo {
		return l.logStartOffset.Load(), fmt.Errorf("%w: delete before %d past the log end %d", ErrOffsetOutOfRange, offset, leo)
	}
	if offset <= l.logStartOffset.Load() {
		return l.logStartOffset.Load(), nil
	}
	l.mu.Lock()
	l.logStartOffset.Store(offset)
	epochsChanged := l.mu.epochs.truncateFromStart(offset)
	l.mu.Unlock()
	if epochsChanged {
		if err := l.writeEpochsLocked(); err != nil {
			return offset, err
		}
	}
	segs := l.mu.segments
	n := 0
	var reasons []string
	for n < len(segs)-1 && segs[n+1].baseOffset <= offset {
		reasons = append(reasons, fmt.Sprintf("delete records before %d", offset))
		n++
	}
	if n == 0 {
		l.snapshots.fileMu.Lock()
		defer l.snapshots.fileMu.Unlock()
		return offset, l.snapshots.pruneLocked(l.Dir(), offset)
	}
	return offset, l.deletePrefixLocked(n, reasons)
}

// TruncateTo removes every batch holding an offset at or after offset,
// across segments and indexes, the leader-epoch cache and the producer
// snapshots above the new end (replication's truncation). The log end
// offset becomes the end of the last remaining batch (offset itself when
// offset is a batch boundary). An offset at or past the log end changes
// nothing; one below the log start offset empties the log and starts it
// there. The truncation is durable when TruncateTo returns.
func (l *Log) TruncateTo(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("storage: truncate to negative offset %d", offset)
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if offset >= l.logEndOffset.Load() {
		return nil
	}
	if offset < l.logStartOffset.Load() {
		return l.truncateFullyLocked(offset)
	}
	l.snapshots.fileMu.Lock()
	defer l.snapshots.fileMu.Unlock()
	l.commit.syncMu.Lock()
	defer l.commit.syncMu.Unlock()

	segs := l.mu.segments
	i := floorSegment(segs, offset)
	s := segs[i]
	sc := scannerPool.Get().(*headerScanner)
	defer scannerPool.Put(sc)
	sc.n = 0
	pos, h, found, err := s.find(sc, offset, s.size.Load())
	if err != nil {
		return l.fail("truncating", err)
	}
	if found {
		if err := s.log.Truncate(pos); err != nil {
			return l.fail("truncating", err)
		}
		s.offsetIdx.truncateToPosition(pos)
		s.timeIdx.truncateToOffset(h.BaseOffset)
		s.size.Store(pos)
	}
	if err := s.reloadTail(sc); err != nil {
		return l.fail("truncating", err)
	}
	removed := segs[i+1:]
	if len(removed) > 0 {
		s.becomeActive()
	}
	if err := s.log.Sync(); err != nil {
		return l.fail("syncing truncated segment", err)
	}
	newEnd := s.nextOffset
	l.cleaner.truncations.Add(1)
	if l.cleaner.checkpoint.Load() > newEnd {
		l.cleaner.checkpoint.Store(newEnd)
	}
	l.mu.Lock()
	l.mu.segments = slices.Clone(segs[:i+1])
	l.logEndOffset.Store(newEnd)
	if l.recoveryPoint.Load() > newEnd {
		l.recoveryPoint.Store(newEnd)
	}
	epochsChanged := l.mu.epochs.truncateFromEnd(newEnd)
	l.mu.Unlock()
	for _, r := range removed {
		l.logger.Info("deleting segment", "base_offset", r.baseOffset, "size", r.size.Load(), "reason",
			fmt.Sprintf("truncation to %d", offset))
	}
	if err := l.deletes.retire(removed); err != nil {
		return err
	}
	if len(removed) > 0 {
		if err := vfs.SyncDir(l.fs, l.Dir()); err != nil {
			return l.fail("syncing directory", err)
		}
	}
	if epochsChanged {
		if err := l.writeEpochsLocked(); err != nil {
			return err
		}
	}
	l.logger.Info("truncated log", "offset", offset, "log_end_offset", newEnd, "segments_removed", len(removed))
	if err := l.txns.truncate(newEnd); err != nil {
		return err
	}
	return l.snapshots.deleteLocked(l.Dir(), func(o int64) bool { return o > newEnd })
}

// reloadTail recomputes, after a truncation, what the appender keeps about
// the segment's end: the next offset, the exact max timestamp (from the time
// index's last entry, which covers everything before it, plus the batches
// after it) and the last index entry's position.
func (s *segment) reloadTail(sc *headerScanner) error {
	size := s.size.Load()
	ts, tsOffset := s.timeIdx.lastEntry()
	s.statMu.Lock()
	s.maxTimestamp, s.offsetOfMaxTimestamp = ts, tsOffset
	s.statMu.Unlock()
	_, s.lastIndexEntryPos = s.offsetIdx.lastEntry()
	s.nextOffset = s.baseOffset
	s.rollingLoaded = false
	s.rollingBasedTimestamp = -1
	_, from := s.offsetIdx.lookup(tsOffset)
	if ts < 0 {
		// Every index entry saw no timestamp: only the tail can have one.
		from = s.lastIndexEntryPos
	}
	return sc.scan(s.log, from, size, func(h *record.Header, _ int64) bool {
		s.observeTimestamp(h.MaxTimestamp, h.LastOffset())
		s.nextOffset = h.NextOffset()
		return true
	})
}

// TruncateFullyAndStartAt deletes every segment and starts the log empty at
// offset (a follower far behind its leader's log start): log start, log end
// and recovery point all become offset, and the epoch cache and producer
// snapshots are cleared.
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("storage: start at negative offset %d", offset)
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	return l.truncateFullyLocked(offset)
}

// truncateFullyLocked: see TruncateFullyAndStartAt. l.appendMu must be held
// (or the log not yet shared).
func (l *Log) truncateFullyLocked(offset int64) error {
	l.snapshots.fileMu.Lock()
	defer l.snapshots.fileMu.Unlock()
	l.commit.syncMu.Lock()
	defer l.commit.syncMu.Unlock()
	old := l.mu.segments
	l.cleaner.truncations.Add(1)
	l.cleaner.checkpoint.Store(offset)
	if err := l.deletes.retire(old); err != nil {
		return err
	}
	s, err := createSegment(l.fs, l.Dir(), offset, l.cfg.Load(), l.now())
	if err != nil {
		return l.fail("creating segment", err)
	}
	if err := vfs.SyncDir(l.fs, l.Dir()); err != nil {
		return l.fail("syncing directory", err)
	}
	l.mu.Lock()
	l.mu.segments = []*segment{s}
	l.logEndOffset.Store(offset)
	l.logStartOffset.Store(offset)
	l.recoveryPoint.Store(offset)
	l.mu.epochs.entries = nil
	l.mu.Unlock()
	l.logger.Info("truncated log fully", "offset", offset, "segments_removed", len(old))
	if err := l.writeEpochsLocked(); err != nil {
		return err
	}
	if err := l.txns.truncate(-1); err != nil {
		return err
	}
	return l.snapshots.deleteLocked(l.Dir(), func(int64) bool { return true })
}
