package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

// Decompression is bounded three ways, so that a batch of a few hundred
// bytes that inflates to gigabytes (a bomb) costs little:
//
//   - Output: every decoder streams, and whoever reads it stops as soon as
//     the output passes its budget's MaxUncompressed
//     (strata.decompressed.batch.max.bytes, 64 MiB by default). Kafka
//     sets no such limit: it would decompress any batch to its end. The
//     limit is far above what producers send (a batch of a few MiB of
//     zeros, or a record of 1 MiB, pass whatever their ratio), and bounds
//     the CPU a bomb costs. Nothing decodes a whole frame into memory and
//     then looks at its size.
//   - Decoder memory: zstd decoders are created with a bounded window
//     (zstdWindows); LZ4 and snappy framing is walked before decoding, so
//     the block buffers are known in advance (Strata decodes LZ4 frames
//     itself, lz4.go, to own those buffers); gzip's is fixed.
//   - All of it together: each decompression reserves its decoder's memory
//     (and the output, when the output is kept) from a Budget first, and
//     decoders are pooled inside the budget, so N concurrent bombs, and
//     the idle decoders they leave, cost at most the budget.

// ErrDecompress is returned for records that do not decompress, that
// decompress to more than the limit, or whose decoder would need more
// memory than Strata allows.
var ErrDecompress = errors.New("record: cannot decompress batch")

// ErrUncompressedTooLarge is returned for a compressed batch whose
// records decompress to more than its budget's MaxUncompressed: a limit of
// Strata's, not a corrupt batch. The error is ErrDecompress too.
var ErrUncompressedTooLarge = errors.New("record: batch decompresses to more than " + MaxUncompressedKey)

// tooLargeError is ErrUncompressedTooLarge with the limit, in words a
// producer's log can show.
type tooLargeError struct{ limit int64 }

func tooLarge(limit int64) error { return tooLargeError{limit} }

func (e tooLargeError) Error() string {
	return fmt.Sprintf("record: the records decompress to more than %d bytes, the limit %s sets", e.limit, MaxUncompressedKey)
}

func (e tooLargeError) Is(target error) bool {
	return target == ErrUncompressedTooLarge || target == ErrDecompress
}

// xerialMagic starts snappy data framed the way the Java client frames it
// (8 bytes of magic, then a 4-byte version and a 4-byte compatible version,
// then blocks each prefixed with a 4-byte big-endian length).
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// decoderKind is a kind of pooled decoder: a codec, and for LZ4 and zstd
// the size of its buffers.
type decoderKind uint8

const (
	kindGzip decoderKind = iota
	kindSnappy
	kindLz4x64K // LZ4 of 64 KiB blocks; then 256 KiB, 1 MiB, 4 MiB
	kindLz4x256K
	kindLz4x1M
	kindLz4x4M
	kindZstd256K // zstd of windows up to 256 KiB; then 2 MiB, 8 MiB
	kindZstd2M
	kindZstd8M
	numKinds
)

// idleLimit is how many idle decoders of each kind a budget keeps.
var idleLimit = [numKinds]int{
	kindGzip: 8, kindSnappy: 8,
	kindLz4x64K: 8, kindLz4x256K: 4, kindLz4x1M: 2, kindLz4x4M: 2,
	kindZstd256K: 8, kindZstd2M: 4, kindZstd8M: 2,
}

// Memory decoders hold, reserved from the budget.
const (
	// streamWindow is the buffer the records walker reads a decoder
	// through; every decoder has one.
	streamWindow = 32 << 10
	// gzipMemory covers klauspost's inflater: its 32 KiB window, Huffman
	// tables and the gzip.Reader.
	gzipMemory = 96 << 10
	// decoderOverhead is the decoder's own state beside its buffers.
	decoderOverhead = 4 << 10
	// zstdMaxBlock is zstd's largest block.
	zstdMaxBlock = 128 << 10
	// maxSnappyPooled is the largest snappy block buffer a pooled
	// decoder keeps; a batch needing more gets a decoder of its own.
	maxSnappyPooled = 1 << 20
)

// zstdWindows are the windows of the zstd kinds: 256 KiB covers franz-go's
// 64 KiB and small batches of other clients (whose window shrinks to a
// known content size), 2 MiB libzstd's window at the default level for an
// unknown size (the Java client), 8 MiB the largest window the zstd format
// asks decoders to support. A larger window is refused.
var zstdWindows = [...]uint64{256 << 10, 2 << 20, 8 << 20} // kindZstd256K, kindZstd2M, kindZstd8M

// zstdMemory is what a zstd decoder of window holds: its history ring (the
// window and two blocks, kept between frames), the block decoder's
// literal and sequence buffers, and slack.
func zstdMemory(window uint64) int64 {
	block := min(int64(window), zstdMaxBlock)
	return int64(window) + 2*block + 2*zstdMaxBlock + 64<<10
}

// zstdKindFor picks the kind whose window fits the first frame of src.
func zstdKindFor(src []byte) (decoderKind, error) {
	var h zstd.Header
	if err := h.Decode(src); err != nil {
		return 0, err
	}
	window := h.WindowSize
	switch {
	case h.Skippable:
		window = zstdWindows[len(zstdWindows)-1] // cannot tell: the largest
	case h.SingleSegment:
		window = h.FrameContentSize
	}
	for i, w := range zstdWindows {
		if window <= w {
			return kindZstd256K + decoderKind(i), nil
		}
	}
	return 0, fmt.Errorf("zstd window of %d bytes, more than the %d Strata decodes", window, zstdWindows[len(zstdWindows)-1])
}

// decoder is one decompression's state: an io.Reader of a records
// section's uncompressed bytes, and the window the walker reads it
// through. It holds its memory's reservation from its budget while in use
// and while idle in the budget's pool.
type decoder struct {
	kind   decoderKind
	memory int64 // reserved from budget
	budget *Budget
	window []byte

	src bytes.Reader
	r   io.Reader
	gz  *gzip.Reader
	zs  *zstd.Decoder
	lz  lz4Reader
	buf []byte // LZ4's block buffer, snappy's
	sn  snappyReader
}

// openDecoder returns a decoder of the compressed records src, from
// budget's pool or new, with extra bytes reserved beside its own memory
// (the output, for Decompress). limit is the output limit; snappy's
// framing is checked against it before anything is decoded. close must
// follow.
func openDecoder(codec int, src []byte, limit, extra int64, budget *Budget) (*decoder, error) {
	kind, memory, err := decoderFor(codec, src, limit)
	if err != nil {
		if errors.Is(err, ErrDecompress) || errors.Is(err, ErrCodec) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: codec %d: %w", ErrDecompress, codec, err)
	}
	d := budget.take(kind)
	switch {
	case d != nil && extra > 0:
		// One reservation at a time: give the idle one's back, then
		// reserve the whole.
		budget.release(d.memory)
		if err := budget.reserve(d.memory + extra); err != nil {
			d.free()
			return nil, err
		}
	case d == nil:
		if err := budget.reserve(memory + extra); err != nil {
			return nil, err
		}
		d = &decoder{kind: kind, memory: memory, budget: budget, window: make([]byte, streamWindow)}
	}
	if err := d.start(codec, src, extra); err != nil {
		d.close(extra)
		return nil, fmt.Errorf("%w: codec %d: %w", ErrDecompress, codec, err)
	}
	return d, nil
}

// decoderFor returns the kind of decoder src needs and its memory.
func decoderFor(codec int, src []byte, limit int64) (decoderKind, int64, error) {
	switch codec {
	case CodecGzip:
		return kindGzip, gzipMemory + streamWindow + decoderOverhead, nil
	case CodecSnappy:
		largest, err := snappyLargestBlock(src, limit)
		if err != nil {
			return 0, 0, err
		}
		return kindSnappy, int64(max(largest, maxSnappyPooled)) + streamWindow + decoderOverhead, nil
	case CodecLz4:
		block, err := lz4MaxBlock(src)
		if err != nil {
			return 0, 0, err
		}
		kind := kindLz4x64K
		for size := 64 << 10; size < block; size <<= 2 {
			kind++
		}
		return kind, int64(lz4History+block) + streamWindow + decoderOverhead, nil
	case CodecZstd:
		kind, err := zstdKindFor(src)
		if err != nil {
			return 0, 0, err
		}
		return kind, zstdMemory(zstdWindows[kind-kindZstd256K]) + streamWindow + decoderOverhead, nil
	}
	return 0, 0, fmt.Errorf("%w: %d", ErrCodec, codec)
}

// start readies the decoder for src.
func (d *decoder) start(codec int, src []byte, extra int64) error {
	d.src.Reset(src)
	switch codec {
	case CodecGzip:
		if d.gz == nil {
			d.gz = new(gzip.Reader)
		}
		// bytes.Reader is an io.ByteReader: the inflater reads it
		// directly, with no bufio.Reader of its own.
		if err := d.gz.Reset(&d.src); err != nil {
			return err
		}
		d.r = d.gz
	case CodecSnappy:
		need := int(d.memory - streamWindow - decoderOverhead)
		if cap(d.buf) < need {
			d.buf = make([]byte, need)
		}
		d.sn.reset(src, d.buf[:cap(d.buf)])
		d.r = &d.sn
	case CodecLz4:
		need := int(d.memory - streamWindow - decoderOverhead)
		if cap(d.buf) < need {
			d.buf = make([]byte, need)
		}
		d.lz.reset(src, d.buf[:need])
		d.r = &d.lz
	case CodecZstd:
		if d.zs == nil {
			window := zstdWindows[d.kind-kindZstd256K]
			zs, err := zstd.NewReader(nil,
				zstd.WithDecoderConcurrency(1), // decode on the caller's goroutine
				zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(window),
				zstd.WithDecoderMaxMemory(window))
			if err != nil {
				return err
			}
			d.zs = zs
		}
		// Not a bytes.Buffer: the decoder streams it, rather than
		// decode it whole into memory.
		if err := d.zs.Reset(&d.src); err != nil {
			return err
		}
		d.r = d.zs
	}
	return nil
}

func (d *decoder) Read(p []byte) (int, error) { return d.r.Read(p) }

// close ends the decompression: extra is given back, and the decoder goes
// idle into its budget's pool with its own reservation, or is freed.
func (d *decoder) close(extra int64) {
	d.src.Reset(nil)
	d.r = nil
	d.lz.reset(nil, nil)
	d.sn.reset(nil, nil)
	if d.zs != nil {
		d.zs.Reset(nil) // drop the source
	}
	b := d.budget
	if extra > 0 {
		b.release(extra)
	}
	if d.kind == kindSnappy && cap(d.buf) > maxSnappyPooled || !b.keep(d) {
		b.release(d.memory)
		d.free()
	}
}

// free lets go of what the decoder holds outside the heap's reach.
func (d *decoder) free() {
	if d.zs != nil {
		d.zs.Close()
		d.zs = nil
	}
}

// snappyReader decodes a raw snappy block, or the xerial-framed blocks of
// the Java client, one block at a time into a buffer sized in advance.
type snappyReader struct {
	blocks []byte // what is left to decode
	xerial bool
	buf    []byte // room for the largest block
	out    []byte // decoded, not yet read
}

func (s *snappyReader) reset(src, buf []byte) {
	*s = snappyReader{blocks: src, buf: buf}
	if isXerial(src) {
		s.xerial, s.blocks = true, src[16:]
	}
}

func isXerial(src []byte) bool { return bytes.HasPrefix(src, xerialMagic) && len(src) >= 16 }

// snappyLargestBlock walks the framing of src: every block's decoded
// length is read from its header, checked against limit one by one and in
// total, and the largest is returned, the buffer to reserve.
func snappyLargestBlock(src []byte, limit int64) (int, error) {
	xerial := isXerial(src)
	if xerial {
		src = src[16:]
	}
	largest, total := 0, int64(0)
	for b := src; ; {
		block := b
		if xerial {
			if len(b) == 0 {
				break
			}
			if len(b) < 4 {
				return 0, io.ErrUnexpectedEOF
			}
			n := binary.BigEndian.Uint32(b)
			if uint64(n) > uint64(len(b)-4) {
				return 0, io.ErrUnexpectedEOF
			}
			block, b = b[4:4+n], b[4+n:]
		}
		n, err := snappy.DecodedLen(block)
		if err != nil {
			return 0, err
		}
		largest, total = max(largest, n), total+int64(n)
		if total > limit {
			return 0, tooLarge(limit)
		}
		if !xerial {
			break
		}
	}
	return largest, nil
}

func (s *snappyReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if len(s.blocks) == 0 {
			return 0, io.EOF
		}
		block := s.blocks
		if s.xerial {
			n := binary.BigEndian.Uint32(s.blocks) // checked before
			block, s.blocks = s.blocks[4:4+n], s.blocks[4+n:]
		} else {
			s.blocks = nil
		}
		// Strict: consumers' decoders (Java, librdkafka) do not know
		// s2's extensions.
		out, err := snappy.DecodeStrict(s.buf, block)
		if err != nil {
			return 0, err
		}
		s.out = out
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// Decompress returns an uncompressed copy of a compressed batch: the same
// header with the codec bits cleared, a batchLength and CRC that fit, and
// the decompressed records, which must be exactly size bytes (as
// ScanStored measured them). The decoder's memory and the output are
// reserved from budget (nil: DefaultBudget) while it runs. An uncompressed
// batch is returned as it is. batch must hold the whole batch; it is not
// modified. Decompressing into memory is for the log cleaner; the produce
// and fetch paths never do it.
func Decompress(batch []byte, size int64, budget *Budget) ([]byte, error) {
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
	if budget == nil {
		budget = DefaultBudget
	}
	if size < 0 || size > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d bytes", ErrDecompress, size)
	}
	extra := size + HeaderSize
	d, err := openDecoder(h.Codec(), batch[HeaderSize:h.Size()], size, extra, budget)
	if err != nil {
		return nil, err
	}
	defer d.close(extra)
	// One byte more than expected, to see the stream end where it should
	// (and its trailer checked).
	out := make([]byte, HeaderSize+int(size)+1)
	copy(out, batch[:HeaderSize])
	n, err := io.ReadFull(d, out[HeaderSize:])
	switch {
	case err == nil:
		err = fmt.Errorf("decompresses to more than %d bytes", size)
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		if int64(n) == size {
			err = nil
		} else {
			err = fmt.Errorf("decompresses to %d bytes, not %d", n, size)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: codec %d: %w", ErrDecompress, h.Codec(), err)
	}
	out = out[:HeaderSize+n]
	attrs := binary.BigEndian.Uint16(out[offAttributes:]) &^ CodecMask
	binary.BigEndian.PutUint16(out[offAttributes:], attrs)
	binary.BigEndian.PutUint32(out[offLength:], uint32(len(out)-LogOverhead))
	binary.BigEndian.PutUint32(out[offCRC:], Checksum(out))
	return out, nil
}
