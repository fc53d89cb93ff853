package storage

import (
	"fmt"
	"math"
	"slices"

	"github.com/strata-io/strata/internal/record"
)

// AppendOptions say how Append treats the batches.
type AppendOptions struct {
	// AssignOffsets is set by a leader: base offsets are written from the
	// log end offset on, and LeaderEpoch into every batch. Otherwise (a
	// follower appending the leader's batches) the batches keep their
	// offsets and epochs.
	AssignOffsets bool
	// LeaderEpoch is stamped into each batch when AssignOffsets is set.
	LeaderEpoch int32
	// LogAppendTime, when >= 0 and AssignOffsets is set, is written as
	// every batch's timestamp (message.timestamp.type=LogAppendTime).
	// Use -1 for CreateTime.
	LogAppendTime int64
}

// AppendInfo describes an append.
type AppendInfo struct {
	FirstOffset int64 // the first batch's base offset; -1 for an empty append
	LastOffset  int64 // the last batch's last offset
	// MaxTimestamp is the greatest batch max timestamp (-1 if none), and
	// OffsetOfMaxTimestamp the last offset of the first batch holding it.
	MaxTimestamp         int64
	OffsetOfMaxTimestamp int64
	LogAppendTime        int64 // as given, or -1
	NumRecords           int64
	Bytes                int64
	// RolledTo is the base offset of the segment rolled to before this
	// append, or -1.
	RolledTo int64
}

// Append validates and appends the records of one produce request (one or
// more v2 batches, back to back) for this partition. Callers serialize
// Append per log.
//
// Every batch is checked first (record.ValidateProduced when assigning
// offsets, record.Validate otherwise; its size against max.message.bytes;
// on a compacted log, a leader's records must all have keys, else
// ErrNullKey);
// on any error nothing is written and batches is not modified. Otherwise
// the batches are edited in place (offsets, epoch, log-append time) and
// written without re-encoding, after a roll if the active segment is full
// or old. A follower's batches must start at or after the log end offset
// and increase, else ErrOffsetsOutOfOrder (Kafka allows the gaps a
// compacted leader's log has). The data reaches the page cache only: it is
// durable once Flush returns, unless flush.messages or flush.ms force a
// flush here.
func (l *Log) Append(batches []byte, opts AppendOptions) (AppendInfo, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	info := AppendInfo{FirstOffset: -1, LastOffset: -1, MaxTimestamp: -1, OffsetOfMaxTimestamp: -1,
		LogAppendTime: -1, RolledTo: -1}
	if err := l.writable(); err != nil {
		return info, err
	}
	cfg := l.cfg.Load()
	leo := l.logEndOffset.Load()
	info.LastOffset = leo - 1
	if len(batches) == 0 {
		return info, nil
	}
	if opts.AssignOffsets && opts.LogAppendTime >= 0 {
		info.LogAppendTime = opts.LogAppendTime
	}

	// Validate everything before changing anything.
	next := leo
	for b, i := batches, 0; len(b) > 0; i++ {
		var h record.Header
		var err error
		if opts.AssignOffsets {
			h, err = record.ValidateProduced(b, 0)
		} else {
			h, err = record.Validate(b, 0)
		}
		if err != nil {
			return info, fmt.Errorf("%w: batch %d at byte %d: %w", ErrCorrupt, i, len(batches)-len(b), err)
		}
		if size := h.Size(); cfg.MaxMessageBytes > 0 && size > cfg.MaxMessageBytes {
			return info, fmt.Errorf("%w: batch of %d bytes exceeds max.message.bytes %d", ErrMessageTooLarge, size, cfg.MaxMessageBytes)
		}
		if opts.AssignOffsets && cfg.Compact && !h.IsControl() {
			if err := checkKeys(b[:h.Size()], &h); err != nil {
				return info, fmt.Errorf("batch %d of %s: %w", i, l, err)
			}
		}
		if opts.AssignOffsets {
			h.BaseOffset = next
		} else if h.BaseOffset < next {
			return info, fmt.Errorf("%w: batch %d has offsets %d..%d, expected %d or later",
				ErrOffsetsOutOfOrder, i, h.BaseOffset, h.LastOffset(), next)
		}
		if info.FirstOffset < 0 {
			info.FirstOffset = h.BaseOffset
		}
		ts := h.MaxTimestamp
		if info.LogAppendTime >= 0 {
			ts = info.LogAppendTime
		}
		if ts > info.MaxTimestamp {
			info.MaxTimestamp, info.OffsetOfMaxTimestamp = ts, h.LastOffset()
		}
		info.NumRecords += int64(h.NumRecords)
		next = h.NextOffset()
		b = b[h.Size():]
	}
	info.LastOffset = next - 1
	info.Bytes = int64(len(batches))
	if info.Bytes > cfg.SegmentBytes {
		return info, fmt.Errorf("%w: %d bytes in one append exceed segment.bytes %d", ErrRecordListTooLarge, info.Bytes, cfg.SegmentBytes)
	}

	active := l.segments[len(l.segments)-1]
	if l.shouldRoll(active, cfg, &info) {
		// The new segment starts at the log end, so that recovery can tell
		// a lost segment tail from a legitimate gap: only offsets that
		// cannot be indexed relative to the log end start it at the
		// first batch instead.
		base := leo
		if info.LastOffset-leo > math.MaxInt32 {
			base = info.FirstOffset
		}
		s, err := l.roll(base, cfg)
		if err != nil {
			return info, err
		}
		active, info.RolledTo = s, s.baseOffset
	}
	if !active.canHold(info.LastOffset) {
		return info, fmt.Errorf("%w: offsets %d..%d span more than a segment can index", ErrOffsetsOutOfOrder, info.FirstOffset, info.LastOffset)
	}

	// Leader epochs first, as Kafka does: a crash between the checkpoint
	// and the data leaves an epoch entry past the log end, which opening
	// the log truncates.
	if opts.AssignOffsets {
		if opts.LeaderEpoch >= 0 {
			if err := l.assignEpochLocked(opts.LeaderEpoch, info.FirstOffset); err != nil {
				return info, err
			}
		}
		off := info.FirstOffset
		for b := batches; len(b) > 0; {
			h, _ := record.ParseHeader(b)
			size := h.Size()
			record.SetBaseOffset(b, off)
			record.SetLeaderEpoch(b, opts.LeaderEpoch)
			if info.LogAppendTime >= 0 {
				record.SetLogAppendTime(b[:size], info.LogAppendTime)
			}
			off += int64(h.LastOffsetDelta) + 1
			b = b[size:]
		}
	} else {
		for b := batches; len(b) > 0; {
			h, _ := record.ParseHeader(b)
			if h.PartitionLeaderEpoch >= 0 {
				if err := l.assignEpochLocked(h.PartitionLeaderEpoch, h.BaseOffset); err != nil {
					return info, err
				}
			}
			b = b[h.Size():]
		}
	}

	if err := active.append(batches, cfg.IndexIntervalBytes); err != nil {
		return info, l.fail("appending", err)
	}
	l.logEndOffset.Store(next)

	if next-l.recoveryPoint.Load() >= cfg.FlushMessages ||
		cfg.FlushMs != math.MaxInt64 && l.now().UnixMilli()-l.lastFlushMs.Load() >= cfg.FlushMs {
		if err := l.flush(next, false); err != nil {
			return info, err
		}
	}
	return info, nil
}

// shouldRoll applies Kafka's LogSegment.shouldRoll to an append: the data
// would not fit in segment.bytes, segment.ms has passed since the first
// batch's timestamp (or since the segment was created, without
// timestamps), an index is full, or the offsets do not fit the relative
// offsets. An empty segment rolls only for the last reason. l.appendMu must
// be held.
func (l *Log) shouldRoll(s *segment, cfg *Config, info *AppendInfo) bool {
	size := s.size.Load()
	if size == 0 {
		return !s.canHold(info.LastOffset)
	}
	if size > cfg.SegmentBytes-info.Bytes || s.indexesFull() || !s.canHold(info.LastOffset) {
		return true
	}
	s.loadRollingTimestamp()
	if s.rollingBasedTimestamp >= 0 {
		return info.MaxTimestamp-s.rollingBasedTimestamp > cfg.SegmentMs
	}
	return l.now().Sub(s.created).Milliseconds() > cfg.SegmentMs
}

// roll makes a new active segment at baseOffset. The old one records its
// final max timestamp and trims its indexes; it is synced by the next
// Flush. l.appendMu must be held.
func (l *Log) roll(baseOffset int64, cfg *Config) (*segment, error) {
	old := l.segments[len(l.segments)-1]
	s, err := createSegment(l.fs, l.dir, baseOffset, cfg, l.now())
	if err != nil {
		return nil, l.fail("rolling", err)
	}
	if err := old.becomeInactive(); err != nil {
		s.close()
		return nil, l.fail("rolling", err)
	}
	l.unflushedDir.Store(true)
	l.mu.Lock()
	l.segments = append(slices.Clip(l.segments), s)
	l.mu.Unlock()
	l.logger.Info("rolled segment", "base_offset", baseOffset, "previous_base_offset", old.baseOffset,
		"previous_size", old.size.Load())
	return s, nil
}
