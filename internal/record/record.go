// Package record reads and edits Kafka record batches (magic v2) in place.
//
// A record batch is the unit a producer sends, the log stores and a consumer
// fetches. Strata never re-encodes a batch on the produce or fetch path: the
// broker validates the header, writes the offsets (and, for LogAppendTime
// topics, the timestamp) into the producer's bytes, and stores them as they
// came. This package is the only code that knows the header layout.
//
// The batch header, all integers big-endian (Kafka's DefaultRecordBatch):
//
//	offset  size  field
//	     0     8  baseOffset            assigned by the leader
//	     8     4  batchLength           bytes after this field
//	    12     4  partitionLeaderEpoch  assigned by the leader
//	    16     1  magic                 2
//	    17     4  crc                   CRC-32C of bytes [21, end)
//	    21     2  attributes            bits 0-2 codec, 3 timestamp type,
//	                                    4 transactional, 5 control,
//	                                    6 delete horizon
//	    23     4  lastOffsetDelta
//	    27     8  baseTimestamp
//	    35     8  maxTimestamp
//	    43     8  producerId            -1 when not idempotent
//	    51     2  producerEpoch
//	    53     4  baseSequence
//	    57     4  recordCount
//	    61     …  records (compressed as a whole when codec != 0)
//
// The CRC does not cover baseOffset, batchLength or partitionLeaderEpoch, so
// the leader can set those without recomputing it.
package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Header field offsets and sizes.
const (
	offBaseOffset      = 0
	offLength          = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57

	// HeaderSize is the size of a v2 batch header, and so of the smallest
	// batch (one with no records, which only control batches may be).
	HeaderSize = 61
	// LogOverhead is the size of the baseOffset and batchLength fields,
	// which batchLength does not count.
	LogOverhead = 12
	// CurrentMagic is the only batch format Strata accepts.
	CurrentMagic = 2
)

// Attribute bits.
const (
	CodecMask              = 0x07
	TimestampTypeLogAppend = 0x08
	AttrTransactional      = 0x10
	AttrControl            = 0x20
	// AttrDeleteHorizon (KIP-534) is set by the log cleaner on a batch
	// whose tombstones it kept: the base timestamp then holds the delete
	// horizon, the time after which they may be removed, and the records'
	// timestamp deltas are relative to it.
	AttrDeleteHorizon = 0x40
)

// Compression codecs, as in the attributes' low three bits.
const (
	CodecNone   = 0
	CodecGzip   = 1
	CodecSnappy = 2
	CodecLz4    = 3
	CodecZstd   = 4
)

// Errors returned by Validate and ParseHeader (and ValidateProduced). The
// broker maps them to CORRUPT_MESSAGE (or UNSUPPORTED_FOR_MESSAGE_FORMAT for
// ErrMagic); recovery treats them as a torn or corrupt tail.
var (
	// ErrShort is returned when the bytes end before the batch does: a
	// truncated request or a torn write.
	ErrShort = errors.New("record: batch truncated")
	// ErrLength is returned when batchLength is smaller than a header or
	// larger than the limit the caller allows.
	ErrLength = errors.New("record: invalid batch length")
	// ErrMagic is returned for any magic byte other than 2.
	ErrMagic = errors.New("record: unsupported magic")
	// ErrCRC is returned when the stored CRC does not match the batch.
	ErrCRC = errors.New("record: CRC mismatch")
	// ErrRecordCount is returned when recordCount and lastOffsetDelta
	// disagree, or either is negative.
	ErrRecordCount = errors.New("record: record count does not match last offset delta")
	// ErrCodec is returned for a compression codec Kafka does not define.
	ErrCodec = errors.New("record: unknown compression codec")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a decoded copy of a batch header.
type Header struct {
	BaseOffset           int64
	Length               int32 // batchLength: bytes after the length field
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Size is the number of bytes the whole batch occupies.
func (h *Header) Size() int { return int(h.Length) + LogOverhead }

// LastOffset is the offset of the batch's last record.
func (h *Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset is the offset after the batch.
func (h *Header) NextOffset() int64 { return h.LastOffset() + 1 }

// Codec is the compression codec.
func (h *Header) Codec() int { return int(h.Attributes) & CodecMask }

// IsTransactional reports the transactional attribute.
func (h *Header) IsTransactional() bool { return h.Attributes&AttrTransactional != 0 }

// IsControl reports the control attribute (transaction markers).
func (h *Header) IsControl() bool { return h.Attributes&AttrControl != 0 }

// HasDeleteHorizon reports the delete-horizon attribute: BaseTimestamp is
// the time after which the log cleaner may remove the batch's tombstones.
func (h *Header) HasDeleteHorizon() bool { return h.Attributes&AttrDeleteHorizon != 0 }

// HasProducerID reports whether the batch was written by an idempotent or
// transactional producer.
func (h *Header) HasProducerID() bool { return h.ProducerID >= 0 }

// LastSequence is the sequence number of the batch's last record, wrapping
// at MaxInt32 as Kafka does.
func (h *Header) LastSequence() int32 {
	return IncrementSequence(h.BaseSequence, h.LastOffsetDelta)
}

// IncrementSequence adds n to a sequence number, wrapping past MaxInt32 to 0
// as the Kafka producer does.
func IncrementSequence(seq, n int32) int32 {
	if seq > (1<<31-1)-n {
		return n - ((1<<31 - 1) - seq) - 1
	}
	return seq + n
}

// ParseHeader decodes the header at the start of b without checking the CRC.
// It returns ErrShort when b holds less than a header, and ErrLength or
// ErrMagic when the fields that frame the batch are impossible.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, ErrShort
	}
	h.BaseOffset = int64(binary.BigEndian.Uint64(b[offBaseOffset:]))
	h.Length = int32(binary.BigEndian.Uint32(b[offLength:]))
	h.PartitionLeaderEpoch = int32(binary.BigEndian.Uint32(b[offLeaderEpoch:]))
	h.Magic = int8(b[offMagic])
	h.CRC = binary.BigEndian.Uint32(b[offCRC:])
	h.Attributes = int16(binary.BigEndian.Uint16(b[offAttributes:]))
	h.LastOffsetDelta = int32(binary.BigEndian.Uint32(b[offLastOffsetDelta:]))
	h.BaseTimestamp = int64(binary.BigEndian.Uint64(b[offBaseTimestamp:]))
	h.MaxTimestamp = int64(binary.BigEndian.Uint64(b[offMaxTimestamp:]))
	h.ProducerID = int64(binary.BigEndian.Uint64(b[offProducerID:]))
	h.ProducerEpoch = int16(binary.BigEndian.Uint16(b[offProducerEpoch:]))
	h.BaseSequence = int32(binary.BigEndian.Uint32(b[offBaseSequence:]))
	h.NumRecords = int32(binary.BigEndian.Uint32(b[offRecordCount:]))
	if h.Length < HeaderSize-LogOverhead {
		return h, fmt.Errorf("%w: %d", ErrLength, h.Length)
	}
	if h.Magic != CurrentMagic {
		return h, fmt.Errorf("%w: %d", ErrMagic, h.Magic)
	}
	return h, nil
}

// Validate checks the framing of the batch at the start of b, as a Kafka
// broker does for a follower's or the log's own batches: the length fits
// within b and within maxSize (when maxSize > 0), the magic is 2, the CRC
// matches, the codec is known, and the record count agrees with the last
// offset delta. It does not read the records (ValidateProduced and
// ScanStored do). It returns the header; the batch is b[:h.Size()].
func Validate(b []byte, maxSize int) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	size := h.Size()
	if maxSize > 0 && size > maxSize {
		return h, fmt.Errorf("%w: batch of %d bytes exceeds %d", ErrLength, size, maxSize)
	}
	if size > len(b) {
		return h, fmt.Errorf("%w: batch of %d bytes, %d present", ErrShort, size, len(b))
	}
	if crc := crc32.Checksum(b[offAttributes:size], castagnoli); crc != h.CRC {
		return h, fmt.Errorf("%w: stored %08x, computed %08x", ErrCRC, h.CRC, crc)
	}
	if h.Codec() > CodecZstd {
		return h, fmt.Errorf("%w: %d", ErrCodec, h.Codec())
	}
	if h.NumRecords < 0 || h.LastOffsetDelta < 0 {
		return h, ErrRecordCount
	}
	// Control batches and compacted batches may hold fewer records than
	// their offset span, but never more; a produced batch holds exactly one
	// record per offset. A compacted batch may hold none: the log cleaner
	// keeps the header of an emptied batch where its offsets or producer
	// sequence must stay visible (KAFKA-5443), as Kafka's does.
	if h.NumRecords < 0 || int64(h.NumRecords) > int64(h.LastOffsetDelta)+1 {
		return h, fmt.Errorf("%w: %d records, last offset delta %d", ErrRecordCount, h.NumRecords, h.LastOffsetDelta)
	}
	return h, nil
}

// SetBaseOffset writes the base offset into the batch at the start of b.
// The CRC does not cover it.
func SetBaseOffset(b []byte, offset int64) {
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(offset))
}

// SetLeaderEpoch writes the partition leader epoch into the batch at the
// start of b. The CRC does not cover it.
func SetLeaderEpoch(b []byte, epoch int32) {
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(epoch))
}

// SetLogAppendTime marks the batch at the start of b as having a log-append
// timestamp of ts and recomputes its CRC, as a broker does for topics with
// message.timestamp.type=LogAppendTime. b must hold the whole batch.
func SetLogAppendTime(b []byte, ts int64) {
	attrs := binary.BigEndian.Uint16(b[offAttributes:]) | TimestampTypeLogAppend
	binary.BigEndian.PutUint16(b[offAttributes:], attrs)
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(ts))
	size := int(int32(binary.BigEndian.Uint32(b[offLength:]))) + LogOverhead
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:size], castagnoli))
}

// Checksum computes the CRC-32C a batch of the given bytes should carry.
func Checksum(batch []byte) uint32 {
	return crc32.Checksum(batch[offAttributes:], castagnoli)
}

// Batches calls fn for each batch in b, which must hold only whole, valid
// batches (as a produce request's records do after Validate, or a log
// segment does after recovery). It stops early when fn returns false and
// returns an error if b does not split into whole batches.
func Batches(b []byte, fn func(h Header, batch []byte) bool) error {
	for len(b) > 0 {
		h, err := ParseHeader(b)
		if err != nil {
			return err
		}
		size := h.Size()
		if size > len(b) {
			return ErrShort
		}
		if !fn(h, b[:size]) {
			return nil
		}
		b = b[size:]
	}
	return nil
}
