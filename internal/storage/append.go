package storage

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

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

// ValidateProduced checks the records of one produce request for this log
// as a leader must before anything else looks at them (the idempotent
// producers' state included): record.ValidateProduced, with this log's
// max.message.bytes and, on a compacted log, keys required. It takes no
// lock, so requests validate in parallel. Errors: ErrMessageTooLarge (a
// batch larger than max.message.bytes, or decompressing to more than
// strata.decompressed.batch.max.bytes),
// ErrNullKey (a *record.RecordError names the record) or ErrCorrupt, each
// wrapping the record package's error.
func (l *Log) ValidateProduced(records []byte) (*record.Validated, error) {
	return validateLeader(l.cfg.Load(), l.budget, records, false)
}

// validateLeader is ValidateProduced under cfg, for the broker's own
// batches too when allowControl.
func validateLeader(cfg *Config, budget *record.Budget, records []byte, allowControl bool) (*record.Validated, error) {
	v, err := record.ValidateProduced(records, record.ValidateOptions{
		MaxMessageBytes: cfg.MaxMessageBytes, RequireKeys: cfg.Compact, AllowControl: allowControl, Budget: budget,
	})
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, record.ErrTooLarge), errors.Is(err, record.ErrUncompressedTooLarge):
		return nil, fmt.Errorf("%w: %w", ErrMessageTooLarge, err)
	case errors.Is(err, ErrNullKey):
		return nil, fmt.Errorf("storage: %w", err)
	}
	return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
}

// Append validates and appends the records of one request (one or more v2
// batches, back to back) for this partition. Callers serialize Append per
// log.
//
// A leader's batches (AssignOffsets) are checked as ValidateProduced does,
// except that control batches (the broker's own transaction markers) are
// allowed; a follower's framing and CRC only (record.Validate, and
// max.message.bytes), as Kafka trusts its leader's records. On any error nothing is written
// and batches is not modified. Otherwise as AppendValidated.
func (l *Log) Append(batches []byte, opts AppendOptions) (AppendInfo, error) {
	if opts.AssignOffsets {
		v, err := validateLeader(l.cfg.Load(), l.budget, batches, true)
		if err != nil {
			return refusedAppend(l.logEndOffset.Load(), err)
		}
		return l.AppendValidated(v, opts)
	}
	cfg := l.cfg.Load()
	var headers []record.Header
	for b, i := batches, 0; len(b) > 0; i++ {
		h, err := record.Validate(b, 0)
		if err != nil {
			return refusedAppend(l.logEndOffset.Load(), fmt.Errorf("%w: batch %d at byte %d: %w", ErrCorrupt, i, len(batches)-len(b), err))
		}
		if size := h.Size(); cfg.MaxMessageBytes > 0 && size > cfg.MaxMessageBytes {
			return refusedAppend(l.logEndOffset.Load(), fmt.Errorf("%w: batch of %d bytes exceeds max.message.bytes %d", ErrMessageTooLarge, size, cfg.MaxMessageBytes))
		}
		headers = append(headers, h)
		b = b[h.Size():]
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	return l.appendLocked(batches, headers, opts)
}

// refusedAppend is what a refused Append of a log ending at leo returns.
func refusedAppend(leo int64, err error) (AppendInfo, error) {
	return AppendInfo{FirstOffset: -1, LastOffset: leo - 1, MaxTimestamp: -1,
		OffsetOfMaxTimestamp: -1, LogAppendTime: -1, RolledTo: -1}, err
}

// AppendValidated appends a leader's validated records (ValidateProduced),
// with opts.AssignOffsets. Callers serialize appends per log. The batches
// are edited in place (offsets, epoch, log-append time), and so are v's
// headers, and written without re-encoding, after a roll if the active
// segment is full or old. The data reaches the page cache only: it is
// durable once Flush returns, unless flush.messages or flush.ms force a
// flush here.
func (l *Log) AppendValidated(v *record.Validated, opts AppendOptions) (AppendInfo, error) {
	if !opts.AssignOffsets {
		panic("storage: AppendValidated of a follower's batches")
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	return l.appendLocked(v.Records(), v.Headers(), opts)
}

// appendLocked appends batches, whose headers are parsed and validated. A
// follower's batches must start at or after the log end offset and
// increase, else ErrOffsetsOutOfOrder (Kafka allows the gaps a compacted
// leader's log has). l.appendMu must be held.
func (l *Log) appendLocked(batches []byte, headers []record.Header, opts AppendOptions) (AppendInfo, error) {
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

	// Check everything before changing anything.
	next := leo
	for i := range headers {
		h := &headers[i]
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
	}
	info.LastOffset = next - 1
	info.Bytes = int64(len(batches))
	if info.Bytes > cfg.SegmentBytes {
		return info, fmt.Errorf("%w: %d bytes in one append exceed segment.bytes %d", ErrRecordListTooLarge, info.Bytes, cfg.SegmentBytes)
	}

	active := l.mu.segments[len(l.mu.segments)-1]
	if active.shouldRoll(cfg, &info, l.now) {
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
		pos := 0
		for i := range headers {
			h := &headers[i]
			b := batches[pos : pos+h.Size()]
			record.SetBaseOffset(b, h.BaseOffset)
			record.SetLeaderEpoch(b, opts.LeaderEpoch)
			h.PartitionLeaderEpoch = opts.LeaderEpoch
			if info.LogAppendTime >= 0 {
				record.SetLogAppendTime(b, info.LogAppendTime)
				h.Attributes |= record.TimestampTypeLogAppend
				h.MaxTimestamp = info.LogAppendTime
				h.CRC = record.Checksum(b)
			}
			pos += len(b)
		}
	} else {
		for i := range headers {
			if h := &headers[i]; h.PartitionLeaderEpoch >= 0 {
				if err := l.assignEpochLocked(h.PartitionLeaderEpoch, h.BaseOffset); err != nil {
					return info, err
				}
			}
		}
	}

	if err := active.append(batches, headers, cfg.IndexIntervalBytes); err != nil {
		return info, l.fail("appending", err)
	}
	l.logEndOffset.Store(next)

	if next-l.recoveryPoint.Load() >= cfg.FlushMessages ||
		cfg.FlushMs != math.MaxInt64 && l.now().UnixMilli()-l.lastFlushMs.Load() >= cfg.FlushMs {
		if err := l.commit.flush(next, false); err != nil {
			return info, err
		}
	}
	return info, nil
}

// shouldRoll applies Kafka's LogSegment.shouldRoll to an append: the data
// would not fit in segment.bytes, segment.ms has passed since the first
// batch's timestamp (or since the segment was created, without
// timestamps), an index is full, or the offsets do not fit the relative
// offsets. An empty segment rolls only for the last reason. now is the
// log's clock. The log's appendMu must be held.
func (s *segment) shouldRoll(cfg *Config, info *AppendInfo, now func() time.Time) bool {
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
	return now().Sub(s.created).Milliseconds() > cfg.SegmentMs
}

// roll makes a new active segment at baseOffset. The old one records its
// final max timestamp and trims its indexes; it is synced by the next
// Flush or, under a Manager, by its flusher's FlushRolled, which the roll
// only asks for: the append does not wait for an fsync. l.appendMu must be
// held.
func (l *Log) roll(baseOffset int64, cfg *Config) (*segment, error) {
	old := l.mu.segments[len(l.mu.segments)-1]
	s, err := createSegment(l.fs, l.mu.dir, baseOffset, cfg, l.now())
	if err != nil {
		return nil, l.fail("rolling", err)
	}
	if err := old.becomeInactive(); err != nil {
		s.close()
		return nil, l.fail("rolling", err)
	}
	l.unflushedDir.Store(true)
	l.mu.Lock()
	l.mu.segments = append(slices.Clip(l.mu.segments), s)
	l.mu.Unlock()
	l.logger.Info("rolled segment", "base_offset", baseOffset, "previous_base_offset", old.baseOffset,
		"previous_size", old.size.Load())
	if l.rolled != nil {
		l.rolled(l)
	}
	return s, nil
}
