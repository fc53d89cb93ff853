package storage

import (
	"errors"

	"github.com/strata-io/strata/internal/record"
)

// Errors. The broker maps them to Kafka error codes at its edge.
var (
	// ErrCorrupt is returned by Append and ValidateProduced when a batch
	// fails validation (length, magic, CRC, record count, any record); it
	// wraps the record package's error, a *record.RecordError when a
	// record is to blame. Broker: CORRUPT_MESSAGE, or INVALID_RECORD
	// naming the record for Produce v8+.
	ErrCorrupt = errors.New("storage: corrupt record batch")
	// ErrMessageTooLarge is returned by Append for a batch larger than
	// max.message.bytes. Broker: MESSAGE_TOO_LARGE.
	ErrMessageTooLarge = errors.New("storage: record batch too large")
	// ErrRecordListTooLarge is returned by Append for a request larger
	// than segment.bytes, which no segment could hold. Broker:
	// RECORD_LIST_TOO_LARGE.
	ErrRecordListTooLarge = errors.New("storage: records larger than a segment")
	// ErrOffsetsOutOfOrder is returned by a follower's Append (offsets not
	// assigned) when the first batch starts below the log end offset or
	// the batches' offsets do not increase.
	ErrOffsetsOutOfOrder = errors.New("storage: batch offsets out of order")
	// ErrOffsetOutOfRange is returned by reads of an offset below the log
	// start offset or above the log end offset, and by DeleteRecordsBefore
	// past the log end. Broker: OFFSET_OUT_OF_RANGE.
	ErrOffsetOutOfRange = errors.New("storage: offset out of range")
	// ErrLogOffline is returned, wrapping the cause, by every Append,
	// Flush and mutation after a write or fsync failed: the log can no
	// longer say what is durable. Broker: KAFKA_STORAGE_ERROR.
	ErrLogOffline = errors.New("storage: log offline after I/O error")
	// ErrClosed is returned by operations on a closed or deleted log.
	ErrClosed = errors.New("storage: log closed")
	// ErrNullKey is returned by a leader's Append to a compacted log
	// (Config.Compact) for a batch holding a record without a key, which
	// compaction could never replace or delete; a *record.RecordError
	// names the record. Broker: INVALID_RECORD, as Kafka answers since
	// KIP-467. It is the record package's error.
	ErrNullKey = record.ErrNullKey
	// ErrNoSnapshot is returned by ProducerSnapshots.Read for an offset with no
	// snapshot file.
	ErrNoSnapshot = errors.New("storage: no such producer snapshot")
)
