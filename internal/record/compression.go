package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Decompression is bounded three ways, so that a batch of a few hundred
// bytes that inflates to gigabytes (a bomb) costs little:
//
//   - Output: every decoder streams, and whoever reads it stops as soon as
//     the output passes UncompressedLimit, which follows from what the
//     header claims (the record count, max.message.bytes). Nothing decodes
//     a whole frame into memory and then looks at its size.
//   - Decoder memory: zstd decoders are created with a bounded window
//     (zstdClasses) and reused from small pools; LZ4 and snappy framing is
//     walked before decoding, so the block buffers are known in advance;
//     gzip's is fixed.
//   - All of it together: each decompression reserves its decoder's memory
//     (and the output, when the output is kept) from a Budget first, so N
//     concurrent bombs cost at most the budget.

// ErrDecompress is returned for records that do not decompress, that
// decompress to more than the limit, or whose decoder would need more
// memory than Strata allows.
var ErrDecompress = errors.New("record: cannot decompress batch")

// maxUncompressedFloor is the least UncompressedLimit allows a batch of
// many records, whatever max.message.bytes.
const maxUncompressedFloor = 64 << 20

// UncompressedLimit returns the most bytes the records section of a
// compressed batch claiming numRecords records may decompress to, on a
// topic with the given max.message.bytes (0 for none): max.message.bytes
// per record (a record that an uncompressed batch could not carry is not
// one a producer sends), and at most the greater of 64 MiB and 8 times
// max.message.bytes. Kafka sets no such limit; it is what keeps a bomb from
// costing more than a bounded amount of CPU.
func UncompressedLimit(numRecords int32, maxMessageBytes int) int64 {
	total := max(maxUncompressedFloor, 8*int64(maxMessageBytes))
	if maxMessageBytes <= 0 || numRecords < 0 {
		return total
	}
	return min(int64(numRecords)*int64(maxMessageBytes), total)
}

// xerialMagic starts snappy data framed the way the Java client frames it
// (8 bytes of magic, then a 4-byte version and a 4-byte compatible version,
// then blocks each prefixed with a 4-byte big-endian length).
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// Memory a decoder may hold, reserved from the budget.
const (
	// streamWindow is the buffer the records walker reads a decoder
	// through.
	streamWindow = 32 << 10
	// gzipMemory covers klauspost's inflater: its 32 KiB window, Huffman
	// tables and the gzip.Reader.
	gzipMemory = 96 << 10
	// lz4Overhead is the LZ4 reader itself, beside its two block buffers.
	lz4Overhead = 16 << 10
	// snappyOverhead is the snappy reader, beside its block buffer.
	snappyOverhead = 4 << 10
)

// zstdClass is a pool of zstd decoders whose window is bounded by window.
// A frame is decoded by the smallest class its window fits; a decoder keeps
// its history buffer (the window and two blocks) between uses, so memory is
// the class's, reserved whole.
type zstdClass struct {
	window uint64
	memory int64
	pool   chan *zstd.Decoder
}

// zstdMaxBlock is zstd's largest block.
const zstdMaxBlock = 128 << 10

// zstdClasses: 256 KiB covers franz-go's 64 KiB window and small batches
// of other clients (whose window shrinks to a known content size), 2 MiB
// libzstd's window at the default level for unknown sizes (the Java
// client), 8 MiB the largest window the zstd format asks decoders to
// support. A larger window is refused.
var zstdClasses = []*zstdClass{
	newZstdClass(256<<10, 8),
	newZstdClass(2<<20, 4),
	newZstdClass(8<<20, 2),
}

func newZstdClass(window uint64, pooled int) *zstdClass {
	// The history ring (window plus two blocks), the block decoder's
	// literal and sequence buffers, and slack.
	block := min(int64(window), zstdMaxBlock)
	memory := int64(window) + 2*block + 2*zstdMaxBlock + 64<<10
	return &zstdClass{window: window, memory: memory, pool: make(chan *zstd.Decoder, pooled)}
}

func (c *zstdClass) get() (*zstd.Decoder, error) {
	select {
	case d := <-c.pool:
		return d, nil
	default:
	}
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1), // decode on the caller's goroutine
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(c.window),
		zstd.WithDecoderMaxMemory(c.window))
}

func (c *zstdClass) put(d *zstd.Decoder) {
	d.Reset(nil) // drop the source
	select {
	case c.pool <- d:
	default:
		d.Close()
	}
}

// zstdClassFor picks the class of the first frame of src.
func zstdClassFor(src []byte) (*zstdClass, error) {
	var h zstd.Header
	if err := h.Decode(src); err != nil {
		return nil, err
	}
	window := h.WindowSize
	switch {
	case h.Skippable:
		window = zstdClasses[len(zstdClasses)-1].window // cannot tell: the largest
	case h.SingleSegment:
		window = h.FrameContentSize
	}
	for _, c := range zstdClasses {
		if window <= c.window {
			return c, nil
		}
	}
	return nil, fmt.Errorf("zstd window of %d bytes, more than the %d Strata decodes", window, zstdClasses[len(zstdClasses)-1].window)
}

var (
	gzipReaders = sync.Pool{}
	lz4Readers  = sync.Pool{New: func() any {
		r := lz4.NewReader(nil)
		if err := r.Apply(lz4.ConcurrencyOption(1)); err != nil {
			panic(err) // a valid option on a new reader
		}
		return r
	}}
	decoders = sync.Pool{New: func() any { return new(decoder) }}
)

// decoder is one decompression in flight: an io.Reader of a records
// section's uncompressed bytes, holding a budget reservation until close.
type decoder struct {
	src    bytes.Reader
	r      io.Reader
	gz     *gzip.Reader
	lz     *lz4.Reader
	zs     *zstd.Decoder
	zclass *zstdClass
	sn     snappyReader
	budget *Budget
	memory int64
}

// openDecoder returns a decoder of the compressed records src, reserving
// extra bytes from budget beside its own memory. limit is the output
// limit; snappy's framing is checked against it before anything is
// decoded. close must follow.
func openDecoder(codec int, src []byte, limit, extra int64, budget *Budget) (*decoder, error) {
	d := decoders.Get().(*decoder)
	d.src.Reset(src)
	var memory int64
	var err error
	switch codec {
	case CodecGzip:
		memory = gzipMemory
	case CodecSnappy:
		memory, err = d.sn.prepare(src, limit)
	case CodecLz4:
		var block int
		if block, err = lz4MaxBlock(src); err == nil {
			memory = 2*int64(block) + lz4Overhead
		}
	case CodecZstd:
		if d.zclass, err = zstdClassFor(src); err == nil {
			memory = d.zclass.memory
		}
	default:
		err = fmt.Errorf("%w: %d", ErrCodec, codec)
	}
	if err == nil {
		d.memory = memory + extra
		d.budget = budget
		if err = budget.acquire(d.memory); err != nil {
			d.budget = nil
		}
	}
	if err == nil {
		err = d.start(codec)
	}
	if err != nil {
		d.close()
		if errors.Is(err, ErrDecompress) || errors.Is(err, ErrCodec) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: codec %d: %w", ErrDecompress, codec, err)
	}
	return d, nil
}

// start makes the codec's reader, once the memory is reserved.
func (d *decoder) start(codec int) error {
	switch codec {
	case CodecGzip:
		gz, _ := gzipReaders.Get().(*gzip.Reader)
		if gz == nil {
			gz = new(gzip.Reader)
		}
		d.gz = gz
		// bytes.Reader is an io.ByteReader: the inflater reads it
		// directly, with no bufio.Reader of its own.
		if err := gz.Reset(&d.src); err != nil {
			return err
		}
		d.r = gz
	case CodecSnappy:
		d.r = &d.sn
	case CodecLz4:
		d.lz = lz4Readers.Get().(*lz4.Reader)
		d.lz.Reset(&d.src)
		d.r = d.lz
	case CodecZstd:
		zs, err := d.zclass.get()
		if err != nil {
			return err
		}
		d.zs = zs
		if err := zs.Reset(&d.src); err != nil {
			return err
		}
		d.r = zs
	}
	return nil
}

func (d *decoder) Read(p []byte) (int, error) { return d.r.Read(p) }

// close returns the decoder's state to its pools and its memory to the
// budget.
func (d *decoder) close() {
	if d.gz != nil {
		gzipReaders.Put(d.gz)
	}
	if d.lz != nil {
		d.lz.Reset(nil)
		lz4Readers.Put(d.lz)
	}
	if d.zs != nil {
		d.zclass.put(d.zs)
	}
	d.sn.reset()
	if d.budget != nil {
		d.budget.release(d.memory)
	}
	d.src.Reset(nil)
	*d = decoder{src: d.src, sn: d.sn}
	decoders.Put(d)
}

// snappyReader decodes a raw snappy block, or the xerial-framed blocks of
// the Java client, one block at a time into a buffer sized in advance.
type snappyReader struct {
	blocks []byte // what is left to decode
	xerial bool
	buf    []byte // the decoded block
	pos    int
}

// maxPooledSnappy is the largest block buffer kept between uses.
const maxPooledSnappy = 1 << 20

// prepare walks the framing of src: every block's decoded length is read
// from its header, checked against limit one by one and in total, and the
// largest is the buffer to reserve.
func (s *snappyReader) prepare(src []byte, limit int64) (int64, error) {
	s.blocks, s.xerial, s.pos = src, false, 0
	s.buf = s.buf[:0]
	if bytes.HasPrefix(src, xerialMagic) && len(src) >= 16 {
		s.xerial, s.blocks = true, src[16:]
	}
	largest, total := 0, int64(0)
	for b := s.blocks; ; {
		block := b
		if s.xerial {
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
			return 0, fmt.Errorf("%w: snappy blocks decode to more than %d bytes", ErrDecompress, limit)
		}
		if !s.xerial {
			break
		}
	}
	if cap(s.buf) < largest {
		s.buf = make([]byte, 0, largest)
	}
	return int64(cap(s.buf)) + snappyOverhead, nil
}

func (s *snappyReader) Read(p []byte) (int, error) {
	for s.pos == len(s.buf) {
		if len(s.blocks) == 0 {
			return 0, io.EOF
		}
		block := s.blocks
		if s.xerial {
			n := binary.BigEndian.Uint32(s.blocks) // checked by prepare
			block, s.blocks = s.blocks[4:4+n], s.blocks[4+n:]
		} else {
			s.blocks = nil
		}
		// Strict: Strata's consumers' decoders (Java, librdkafka) do
		// not know s2's extensions.
		out, err := snappy.DecodeStrict(s.buf[:cap(s.buf)], block)
		if err != nil {
			return 0, err
		}
		s.buf, s.pos = out, 0
	}
	n := copy(p, s.buf[s.pos:])
	s.pos += n
	return n, nil
}

func (s *snappyReader) reset() {
	s.blocks = nil
	if cap(s.buf) > maxPooledSnappy {
		s.buf = nil
	}
	s.buf, s.pos = s.buf[:0], 0
}

// LZ4 frame format constants (lz4_Frame_format.md).
const (
	lz4FrameMagic     = 0x184D2204
	lz4SkippableMagic = 0x184D2A50 // the low four bits are free
)

// lz4MaxBlock walks the LZ4 frames of src, without decoding, and returns
// the largest block size their descriptors declare: the reader holds two
// buffers of it. Blocks larger than their frame allows, unknown flags and
// legacy frames (which Kafka never writes) are refused.
func lz4MaxBlock(src []byte) (int, error) {
	errFrame := errors.New("malformed LZ4 frame")
	largest := 0
	for p := 0; p < len(src); {
		if len(src)-p < 8 {
			return 0, errFrame
		}
		magic := binary.LittleEndian.Uint32(src[p:])
		if magic&^0xF == lz4SkippableMagic {
			n := int64(binary.LittleEndian.Uint32(src[p+4:]))
			if n > int64(len(src)-p-8) {
				return 0, errFrame
			}
			p += 8 + int(n)
			continue
		}
		if magic != lz4FrameMagic {
			return 0, errFrame
		}
		flg, bd := src[p+4], src[p+5]
		if flg>>6 != 1 || flg&0x02 != 0 || bd&0x8F != 0 || bd>>4 < 4 {
			return 0, errFrame
		}
		block := 1 << (2*int(bd>>4) + 8) // 4: 64 KiB … 7: 4 MiB
		largest = max(largest, block)
		p += 6 + 1 // magic, FLG, BD, header checksum
		if flg&0x08 != 0 {
			p += 8 // content size
		}
		if flg&0x01 != 0 {
			p += 4 // dictionary id
		}
		for {
			if len(src)-p < 4 {
				return 0, errFrame
			}
			n := binary.LittleEndian.Uint32(src[p:])
			p += 4
			if n == 0 {
				break // end mark
			}
			size := int(n &^ (1 << 31))
			if size > block || size > len(src)-p {
				return 0, errFrame
			}
			p += size
			if flg&0x10 != 0 {
				p += 4 // block checksum
			}
		}
		if flg&0x04 != 0 {
			p += 4 // content checksum
		}
		if p > len(src) {
			return 0, errFrame
		}
	}
	return largest, nil
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
	d, err := openDecoder(h.Codec(), batch[HeaderSize:h.Size()], size, size+HeaderSize, budget)
	if err != nil {
		return nil, err
	}
	defer d.close()
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
