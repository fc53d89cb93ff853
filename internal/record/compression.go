package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// ErrDecompress is returned by Decompress for records that do not
// decompress, or decompress to more than the limit.
var ErrDecompress = errors.New("record: cannot decompress batch")

// xerialMagic starts snappy data framed the way the Java client frames it
// (8 bytes of magic, then a 4-byte version and a 4-byte compatible version,
// then blocks each prefixed with a 4-byte big-endian length).
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

var (
	zstdOnce    sync.Once
	zstdDecoder *zstd.Decoder
	zstdErr     error
)

// Decompress returns an uncompressed copy of a compressed batch: the same
// header with the codec bits cleared, a batchLength and CRC that fit, and
// the decompressed records, so that Records can iterate it. The records may
// decompress to at most maxSize bytes. An uncompressed batch is returned as
// it is. batch must hold the whole batch; it is not modified. Reading
// compressed records is for internal readers (timestamp lookups); the
// produce and fetch paths never decompress.
func Decompress(batch []byte, maxSize int) ([]byte, error) {
	h, err := ParseHeader(batch)
	if err != nil {
		return nil, err
	}
	if h.Size() > len(batch) {
		return nil, ErrShort
	}
	if h.Codec() == CodecNone {
		return batch, nil
	}
	src := batch[HeaderSize:h.Size()]
	out := make([]byte, HeaderSize, HeaderSize+2*len(src))
	copy(out, batch[:HeaderSize])
	out, err = decompressInto(out, h.Codec(), src, maxSize)
	if err != nil {
		return nil, fmt.Errorf("%w: codec %d: %w", ErrDecompress, h.Codec(), err)
	}
	attrs := binary.BigEndian.Uint16(out[offAttributes:]) &^ CodecMask
	binary.BigEndian.PutUint16(out[offAttributes:], attrs)
	binary.BigEndian.PutUint32(out[offLength:], uint32(len(out)-LogOverhead))
	binary.BigEndian.PutUint32(out[offCRC:], Checksum(out))
	return out, nil
}

func decompressInto(dst []byte, codec int, src []byte, maxSize int) ([]byte, error) {
	switch codec {
	case CodecGzip:
		r, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, err
		}
		return readLimited(dst, r, maxSize)
	case CodecSnappy:
		if bytes.HasPrefix(src, xerialMagic) && len(src) >= 16 {
			return xerialDecode(dst, src[16:], maxSize)
		}
		return snappyBlock(dst, src, maxSize)
	case CodecLz4:
		return readLimited(dst, lz4.NewReader(bytes.NewReader(src)), maxSize)
	case CodecZstd:
		zstdOnce.Do(func() {
			zstdDecoder, zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(1<<30))
		})
		if zstdErr != nil {
			return nil, zstdErr
		}
		// The frame header's content size is checked against the
		// limit before decoding when present.
		var hdr zstd.Header
		if hdr.Decode(src) == nil && hdr.HasFCS && hdr.FrameContentSize > uint64(maxSize) {
			return nil, fmt.Errorf("decompresses to %d bytes, over %d", hdr.FrameContentSize, maxSize)
		}
		out, err := zstdDecoder.DecodeAll(src, dst)
		if err != nil {
			return nil, err
		}
		if len(out)-len(dst) > maxSize {
			return nil, fmt.Errorf("decompresses to more than %d bytes", maxSize)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %d", ErrCodec, codec)
}

func readLimited(dst []byte, r io.Reader, maxSize int) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	n, err := buf.ReadFrom(io.LimitReader(r, int64(maxSize)+1))
	if err != nil {
		return nil, err
	}
	if n > int64(maxSize) {
		return nil, fmt.Errorf("decompresses to more than %d bytes", maxSize)
	}
	return buf.Bytes(), nil
}

func snappyBlock(dst, src []byte, maxSize int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	if n > maxSize {
		return nil, fmt.Errorf("decompresses to %d bytes, over %d", n, maxSize)
	}
	out, err := s2.Decode(nil, src)
	if err != nil {
		return nil, err
	}
	return append(dst, out...), nil
}

func xerialDecode(dst, src []byte, maxSize int) ([]byte, error) {
	total := 0
	for len(src) > 0 {
		if len(src) < 4 {
			return nil, io.ErrUnexpectedEOF
		}
		n := int(binary.BigEndian.Uint32(src))
		src = src[4:]
		if n < 0 || n > len(src) {
			return nil, io.ErrUnexpectedEOF
		}
		before := len(dst)
		var err error
		if dst, err = snappyBlock(dst, src[:n], maxSize-total); err != nil {
			return nil, err
		}
		total += len(dst) - before
		src = src[n:]
	}
	return dst, nil
}
