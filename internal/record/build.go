package record

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrCompressed is returned by Records for a compressed batch: internal
// readers only decode the uncompressed batches the broker itself wrote.
var ErrCompressed = errors.New("record: batch is compressed")

// Rec is one record to build into a batch.
type Rec struct {
	Key, Value []byte // a nil Value is a tombstone
	Headers    []kmsg.Header
	Timestamp  int64 // milliseconds
}

// Build appends to dst an uncompressed v2 batch holding recs, with base
// offset 0, no producer id and a valid CRC. The log assigns the real offsets
// when it is appended. It is how the broker writes its own internal records
// (metadata, consumer offsets).
func Build(dst []byte, recs []Rec) []byte {
	return build(dst, recs, -1, -1, -1, 0)
}

// BuildTransactional is Build for records a coordinator writes for a
// transactional producer (a TxnOffsetCommit's offsets): a transactional
// batch with the producer's id and epoch and sequence 0, as Kafka's
// coordinators write them; the transaction's marker decides it.
func BuildTransactional(dst []byte, producerID int64, epoch int16, recs []Rec) []byte {
	return build(dst, recs, producerID, epoch, 0, AttrTransactional)
}

func build(dst []byte, recs []Rec, producerID int64, epoch int16, sequence int32, attrs int16) []byte {
	if len(recs) == 0 {
		panic("record: Build needs at least one record")
	}
	first, maxTS := recs[0].Timestamp, recs[0].Timestamp
	for _, r := range recs {
		maxTS = max(maxTS, r.Timestamp)
	}
	var body []byte
	for i, r := range recs {
		kr := kmsg.Record{
			TimestampDelta64: r.Timestamp - first,
			OffsetDelta:      int32(i),
			Key:              r.Key,
			Value:            r.Value,
			Headers:          r.Headers,
		}
		// kmsg writes the length the caller sets; encode with length 0
		// (one varint byte) to learn the body's size, then prefix it.
		enc := kr.AppendTo(nil)[1:]
		body = binary.AppendVarint(body, int64(len(enc)))
		body = append(body, enc...)
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                CurrentMagic,
		Attributes:           attrs,
		LastOffsetDelta:      int32(len(recs) - 1),
		FirstTimestamp:       first,
		MaxTimestamp:         maxTS,
		ProducerID:           producerID,
		ProducerEpoch:        epoch,
		FirstSequence:        sequence,
		NumRecords:           int32(len(recs)),
		Records:              body,
	}
	start := len(dst)
	dst = b.AppendTo(dst)
	batch := dst[start:]
	binary.BigEndian.PutUint32(batch[offLength:], uint32(len(batch)-LogOverhead))
	binary.BigEndian.PutUint32(batch[offCRC:], Checksum(batch))
	return dst
}

// Records calls fn with each record of an uncompressed batch and its
// absolute offset and timestamp. The record's slices alias batch.
func Records(batch []byte, fn func(offset, timestamp int64, r *kmsg.Record) error) error {
	h, err := ParseHeader(batch)
	if err != nil {
		return err
	}
	if h.Codec() != CodecNone {
		return ErrCompressed
	}
	if h.Size() > len(batch) {
		return ErrShort
	}
	b := batch[HeaderSize:h.Size()]
	for i := int32(0); i < h.NumRecords; i++ {
		n, w := binary.Varint(b)
		if w <= 0 || n < 0 || int64(len(b)-w) < n {
			return fmt.Errorf("%w: record %d of batch at %d", ErrShort, i, h.BaseOffset)
		}
		var r kmsg.Record
		// kmsg reads the length varint itself.
		if err := r.UnsafeReadFrom(b[:w+int(n)]); err != nil {
			return fmt.Errorf("record: decoding record %d of batch at %d: %w", i, h.BaseOffset, err)
		}
		b = b[w+int(n):]
		ts := h.BaseTimestamp + r.TimestampDelta64
		if h.Attributes&TimestampTypeLogAppend != 0 {
			ts = h.MaxTimestamp
		}
		if err := fn(h.BaseOffset+int64(r.OffsetDelta), ts, &r); err != nil {
			return err
		}
	}
	return nil
}
