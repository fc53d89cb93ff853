package storage

import (
	"fmt"
	"math"
)

// Config is a partition log's configuration: the topic-level keys that
// concern storage. Each field names its Kafka key and default.
type Config struct {
	// SegmentBytes is segment.bytes (default 1073741824): roll when the
	// active segment would grow past it.
	SegmentBytes int64
	// SegmentMs is segment.ms (default 604800000): roll when the
	// timestamps being appended are this far past the segment's first
	// batch's max timestamp (or the segment is this old, when batches carry
	// no timestamps).
	SegmentMs int64
	// SegmentIndexBytes is segment.index.bytes (default 10485760): the
	// preallocated size of each index file; a full index rolls the segment.
	SegmentIndexBytes int
	// IndexIntervalBytes is index.interval.bytes (default 4096): the bytes
	// appended between offset-index entries.
	IndexIntervalBytes int
	// RetentionMs is retention.ms (default 604800000; -1 = unlimited):
	// delete a segment once its max timestamp is older than this.
	RetentionMs int64
	// RetentionBytes is retention.bytes (default -1 = unlimited): delete
	// the oldest segments while the log is bigger than this.
	RetentionBytes int64
	// FlushMessages is flush.messages (default math.MaxInt64, never): fsync
	// when this many messages are unflushed.
	FlushMessages int64
	// FlushMs is flush.ms (default math.MaxInt64, never): fsync when the
	// last flush is this old.
	FlushMs int64
	// FileDeleteDelayMs is file.delete.delay.ms (default 60000): how long
	// the files of a deleted segment stay open (renamed *.deleted) before
	// they are closed and removed, so file regions handed out before the
	// deletion stay readable.
	FileDeleteDelayMs int64
	// MaxMessageBytes is max.message.bytes (default 1048588): the largest
	// batch Append accepts.
	MaxMessageBytes int

	// Delete is cleanup.policy containing "delete" (default "delete"):
	// retention.ms and retention.bytes apply. Without it, segments are
	// deleted only below the log start offset.
	Delete bool
	// Compact is cleanup.policy containing "compact" (default false): the
	// log cleaner keeps the latest record of each key (see Clean), and
	// Append refuses records without a key from a leader.
	Compact bool
	// MinCleanableDirtyRatio is min.cleanable.dirty.ratio (default 0.5):
	// a compacted log is cleaned once this share of its cleanable bytes
	// was written since the last cleaning.
	MinCleanableDirtyRatio float64
	// DeleteRetentionMs is delete.retention.ms (default 86400000): how
	// long a tombstone is kept after the cleaning that first kept it, so a
	// consumer reading from the start has time to see it.
	DeleteRetentionMs int64
	// MinCompactionLagMs is min.compaction.lag.ms (default 0): a segment
	// holding a batch younger than this is not cleaned, nor any after it.
	MinCompactionLagMs int64
}

// DefaultConfig returns Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		SegmentBytes:       1 << 30,
		SegmentMs:          7 * 24 * 3600 * 1000,
		SegmentIndexBytes:  10 << 20,
		IndexIntervalBytes: 4096,
		RetentionMs:        7 * 24 * 3600 * 1000,
		RetentionBytes:     -1,
		FlushMessages:      math.MaxInt64,
		FlushMs:            math.MaxInt64,
		FileDeleteDelayMs:  60000,
		MaxMessageBytes:    1048588,

		Delete:                 true,
		MinCleanableDirtyRatio: 0.5,
		DeleteRetentionMs:      24 * 3600 * 1000,
	}
}

// Validate checks the bounds Kafka enforces on these keys.
func (c Config) Validate() error {
	switch {
	case c.SegmentBytes < 14 || c.SegmentBytes > math.MaxInt32:
		// Positions in the offset index are int32.
		return fmt.Errorf("storage: segment.bytes %d out of range [14, %d]", c.SegmentBytes, math.MaxInt32)
	case c.SegmentMs < 1:
		return fmt.Errorf("storage: segment.ms %d must be at least 1", c.SegmentMs)
	case c.SegmentIndexBytes < timeIndexEntrySize*2:
		return fmt.Errorf("storage: segment.index.bytes %d must be at least %d", c.SegmentIndexBytes, timeIndexEntrySize*2)
	case c.IndexIntervalBytes < 0:
		return fmt.Errorf("storage: index.interval.bytes %d must not be negative", c.IndexIntervalBytes)
	case c.FlushMessages < 1:
		return fmt.Errorf("storage: flush.messages %d must be at least 1", c.FlushMessages)
	case c.FlushMs < 0:
		return fmt.Errorf("storage: flush.ms %d must not be negative", c.FlushMs)
	case c.FileDeleteDelayMs < 0:
		return fmt.Errorf("storage: file.delete.delay.ms %d must not be negative", c.FileDeleteDelayMs)
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("storage: max.message.bytes %d must not be negative", c.MaxMessageBytes)
	case !(c.MinCleanableDirtyRatio >= 0 && c.MinCleanableDirtyRatio <= 1):
		return fmt.Errorf("storage: min.cleanable.dirty.ratio %v out of range [0, 1]", c.MinCleanableDirtyRatio)
	case c.DeleteRetentionMs < 0:
		return fmt.Errorf("storage: delete.retention.ms %d must not be negative", c.DeleteRetentionMs)
	case c.MinCompactionLagMs < 0:
		return fmt.Errorf("storage: min.compaction.lag.ms %d must not be negative", c.MinCompactionLagMs)
	}
	return nil
}
