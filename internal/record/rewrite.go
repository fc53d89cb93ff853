package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Rewriting batches is for the log cleaner, never the produce or fetch
// path. A record (see walk.go for its layout) is self-contained: its
// offset and timestamp are relative to the batch header, so a cleaned
// batch that keeps its base offset and base timestamp keeps the surviving
// records' bytes as they are.

// RawRecord is one record of a records section, decoded only as far as the
// cleaner needs. Its slices alias the records section.
type RawRecord struct {
	// Bytes is the whole encoded record, its length prefix included.
	Bytes          []byte
	TimestampDelta int64
	OffsetDelta    int32
	Key            []byte // nil for a null key
	Value          []byte // nil for a null value (a tombstone)
	// afterTimestamp is where, in Bytes, the fields after the timestamp
	// delta start; attrEnd where the timestamp delta starts.
	afterTimestamp, attrEnd int
}

// ScanRecords calls fn with each of the count records of an uncompressed
// records section (a batch's bytes after its header), checking each
// record's framing as ValidateProduced does (lengths, varints and header
// counts within the record) and that the records fill the section
// exactly. A malformed record is ErrShort.
func ScanRecords(records []byte, count int32, fn func(r *RawRecord) error) error {
	var w walker
	w.inMemory(records)
	var wr walkedRecord
	var r RawRecord
	for i := int32(0); i < count; i++ {
		if err := w.next(&wr); err != nil {
			return fmt.Errorf("%w: record %d: %v", ErrShort, i, err)
		}
		r = RawRecord{
			Bytes:          records[wr.start:wr.end:wr.end],
			TimestampDelta: wr.TimestampDelta,
			OffsetDelta:    wr.OffsetDelta,
			Key:            slice(records, wr.keyAt, wr.KeyLength),
			Value:          slice(records, wr.valueAt, wr.ValueLength),
			attrEnd:        int(wr.tsStart - wr.start),
			afterTimestamp: int(wr.tsEnd - wr.start),
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
	if left := len(records) - int(w.offset()); left != 0 {
		return fmt.Errorf("%w: %d bytes after %d records", ErrShort, left, count)
	}
	return nil
}

// slice returns the n bytes of b at at, nil for n = -1.
func slice(b []byte, at int64, n int32) []byte {
	if n < 0 {
		return nil
	}
	return b[at : at+int64(n) : at+int64(n)]
}

// AppendRetimed appends r re-encoded with a new timestamp delta: what the
// cleaner writes when it moves a batch's base timestamp to a delete horizon.
func AppendRetimed(dst []byte, r *RawRecord, timestampDelta int64) []byte {
	var tmp [binary.MaxVarintLen64]byte
	tsLen := binary.PutVarint(tmp[:], timestampDelta)
	_, w := binary.Varint(r.Bytes)
	bodyLen := (r.attrEnd - w) + tsLen + (len(r.Bytes) - r.afterTimestamp)
	dst = binary.AppendVarint(dst, int64(bodyLen))
	dst = append(dst, r.Bytes[w:r.attrEnd]...)
	dst = append(dst, tmp[:tsLen]...)
	return append(dst, r.Bytes[r.afterTimestamp:]...)
}

// AppendBatch appends to dst a batch with h's fields and records, which
// must already be compressed with h's codec; the batch length, magic and
// CRC are computed, h's are ignored.
func AppendBatch(dst []byte, h *Header, records []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	b := dst[start:]
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(h.PartitionLeaderEpoch))
	b[offMagic] = CurrentMagic
	binary.BigEndian.PutUint16(b[offAttributes:], uint16(h.Attributes))
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], uint32(h.LastOffsetDelta))
	binary.BigEndian.PutUint64(b[offBaseTimestamp:], uint64(h.BaseTimestamp))
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(h.MaxTimestamp))
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(h.ProducerID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(h.ProducerEpoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(h.BaseSequence))
	binary.BigEndian.PutUint32(b[offRecordCount:], uint32(h.NumRecords))
	dst = append(dst, records...)
	b = dst[start:]
	binary.BigEndian.PutUint32(b[offLength:], uint32(len(b)-LogOverhead))
	binary.BigEndian.PutUint32(b[offCRC:], Checksum(b))
	return dst
}

// xerialBlockSize is the block size of Java's SnappyOutputStream, which
// Kafka's broker uses when it recompresses.
const xerialBlockSize = 32 << 10

var (
	gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
	lz4Writers  = sync.Pool{New: func() any { return lz4.NewWriter(nil) }}

	zstdEncOnce sync.Once
	zstdEnc     *zstd.Encoder
	zstdEncErr  error
)

// Compress appends src, a records section, compressed with codec to dst,
// framed as a Kafka broker frames what it recompresses: gzip and LZ4
// frames, snappy in Java's xerial framing, one zstd frame. CodecNone
// appends src as it is.
func Compress(dst []byte, codec int, src []byte) ([]byte, error) {
	switch codec {
	case CodecNone:
		return append(dst, src...), nil
	case CodecGzip:
		buf := bytes.NewBuffer(dst)
		w := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(w)
		w.Reset(buf)
		if _, err := w.Write(src); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case CodecSnappy:
		dst = append(dst, xerialMagic...)
		dst = binary.BigEndian.AppendUint32(dst, 1) // version
		dst = binary.BigEndian.AppendUint32(dst, 1) // compatible version
		scratch := make([]byte, s2.MaxEncodedLen(xerialBlockSize))
		for len(src) > 0 {
			block := src[:min(len(src), xerialBlockSize)]
			src = src[len(block):]
			enc := s2.EncodeSnappy(scratch, block)
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(enc)))
			dst = append(dst, enc...)
		}
		return dst, nil
	case CodecLz4:
		buf := bytes.NewBuffer(dst)
		w := lz4Writers.Get().(*lz4.Writer)
		defer lz4Writers.Put(w)
		w.Reset(buf)
		// Kafka's 64 KiB blocks, not the library's 4 MiB: every reader
		// allocates a block.
		if err := w.Apply(lz4.BlockSizeOption(lz4.Block64Kb)); err != nil {
			return nil, err
		}
		if _, err := w.Write(src); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case CodecZstd:
		zstdEncOnce.Do(func() {
			zstdEnc, zstdEncErr = zstd.NewWriter(nil, zstd.WithWindowSize(64<<10), zstd.WithEncoderConcurrency(1),
				zstd.WithZeroFrames(true))
		})
		if zstdEncErr != nil {
			return nil, zstdEncErr
		}
		return zstdEnc.EncodeAll(src, dst), nil
	}
	return nil, fmt.Errorf("%w: %d", ErrCodec, codec)
}
