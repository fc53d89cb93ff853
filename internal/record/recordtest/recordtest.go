// Package recordtest builds record batches for tests, valid and not:
// records with any field malformed, and decompression bombs of every codec.
// It is imported by tests only.
package recordtest

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/pierrec/lz4/v4"

	"github.com/strata-io/strata/internal/record"
)

// Varint appends v zigzag-encoded.
func Varint(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) }

// Fields are one record's fields; Encode lays them out, with Length when
// it is not 0, else the true length.
type Fields struct {
	Length         int64
	Attributes     byte
	TimestampDelta int64
	OffsetDelta    int64
	Key, Value     []byte // nil: null (-1)
	Headers        [][2][]byte
	// Raw, when set, replaces everything after the length prefix.
	Raw []byte
}

// Encode appends the record.
func (f Fields) Encode(dst []byte) []byte {
	body := f.Raw
	if body == nil {
		body = append(body, f.Attributes)
		body = Varint(body, f.TimestampDelta)
		body = Varint(body, f.OffsetDelta)
		body = nullable(body, f.Key)
		body = nullable(body, f.Value)
		body = Varint(body, int64(len(f.Headers)))
		for _, h := range f.Headers {
			body = Varint(body, int64(len(h[0])))
			body = append(body, h[0]...)
			body = nullable(body, h[1])
		}
	}
	n := f.Length
	if n == 0 {
		n = int64(len(body))
	}
	return append(Varint(dst, n), body...)
}

func nullable(dst, b []byte) []byte {
	if b == nil {
		return Varint(dst, -1)
	}
	return append(Varint(dst, int64(len(b))), b...)
}

// Records returns a section of n valid records of value, offsets 0..n-1,
// timestamp deltas 0.
func Records(n int, value []byte) []byte {
	var b []byte
	for i := range n {
		b = Fields{OffsetDelta: int64(i), Key: []byte{byte(i)}, Value: value}.Encode(b)
	}
	return b
}

// Header is what Batch writes into a header besides the codec; zero
// values mean a plain producer batch of n records at timestamp Timestamp.
type Header struct {
	NumRecords, LastOffsetDelta int32
	Timestamp                   int64 // base and max timestamp
	ProducerID                  int64 // 0 means -1
	ProducerEpoch               int16
	BaseSequence                int32
	Attributes                  int16 // besides the codec
}

// Batch wraps section, compressed with codec (-record.CodecSnappy for the
// Java client's xerial framing), in a batch whose header claims h. The CRC
// is valid.
func Batch(codec int, section []byte, h Header) []byte {
	payload := section
	if codec != record.CodecNone {
		payload = Compress(codec, section)
	}
	return Wrap(codec, payload, h)
}

// Wrap is Batch for a payload already compressed (or crafted).
func Wrap(codec int, payload []byte, h Header) []byte {
	if codec < 0 {
		codec = -codec
	}
	pid := h.ProducerID
	if pid == 0 {
		pid = -1
	}
	seq, epoch := h.BaseSequence, h.ProducerEpoch
	if pid < 0 {
		seq, epoch = -1, -1
	}
	rh := record.Header{
		PartitionLeaderEpoch: -1,
		Attributes:           int16(codec) | h.Attributes,
		LastOffsetDelta:      h.LastOffsetDelta,
		BaseTimestamp:        h.Timestamp,
		MaxTimestamp:         h.Timestamp,
		ProducerID:           pid,
		ProducerEpoch:        epoch,
		BaseSequence:         seq,
		NumRecords:           h.NumRecords,
	}
	return record.AppendBatch(nil, &rh, payload)
}

// N is a Header of n records, one per offset, at timestamp ts.
func N(n int32, ts int64) Header {
	return Header{NumRecords: n, LastOffsetDelta: n - 1, Timestamp: ts}
}

// Compress compresses section with codec as producers frame it
// (-record.CodecSnappy: xerial).
func Compress(codec int, section []byte) []byte {
	switch codec {
	case -record.CodecSnappy:
		out, err := record.Compress(nil, record.CodecSnappy, section)
		if err != nil {
			panic(err)
		}
		return out
	case record.CodecSnappy:
		return s2.EncodeSnappy(nil, section)
	}
	out, err := record.Compress(nil, codec, section)
	if err != nil {
		panic(err)
	}
	return out
}

// Codecs are the codecs of every framing a producer may send, for tables.
var Codecs = []struct {
	Name  string
	Codec int
}{
	{"none", record.CodecNone}, {"gzip", record.CodecGzip}, {"snappy", record.CodecSnappy},
	{"snappy-xerial", -record.CodecSnappy}, {"lz4", record.CodecLz4}, {"zstd", record.CodecZstd},
}

// BombPrefix is the start of a bomb's records section: one record of
// exactly size bytes, nearly all of it a value, which the zeros after the
// prefix fill.
func BombPrefix(size int64) []byte {
	for value := size - 16; ; value-- {
		body := []byte{0}          // attributes
		body = Varint(body, 0)     // timestamp delta
		body = Varint(body, 0)     // offset delta
		body = Varint(body, -1)    // null key
		body = Varint(body, value) // the value: everything else
		body = append(body, 0)     // after the value: no headers
		prefix := append(Varint(nil, int64(len(body))+value), body[:len(body)-1]...)
		if int64(len(prefix))+value+1 <= size {
			// The zeros are the value and the header count.
			return prefix
		}
	}
}

// Bomb returns a compressed records section, for codec, that decompresses
// to size bytes (BombPrefix and zeros) though it is small: gzip as
// repeated members, zstd as RLE blocks, LZ4 as a repeated block, snappy as
// blocks whose headers claim the size. sizeHint writes the uncompressed
// size where the format has a place for it (zstd's frame content size,
// LZ4's content size); snappy always carries it.
func Bomb(codec int, size int64, sizeHint bool) []byte {
	prefix := BombPrefix(size)
	switch codec {
	case record.CodecGzip:
		return gzipBomb(prefix, size)
	case record.CodecZstd:
		return zstdFrame(prefix, size, sizeHint, 0, 1<<20)
	case record.CodecLz4:
		return lz4Bomb(prefix, size, sizeHint)
	case record.CodecSnappy:
		return snappyBomb(prefix, size)
	case -record.CodecSnappy:
		return xerialBomb(prefix, size)
	}
	panic("recordtest: no bomb for codec")
}

func gzipBomb(prefix []byte, size int64) []byte {
	const member = 4 << 20 // about 4 KiB compressed
	var out bytes.Buffer
	w, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	w.Write(prefix)
	w.Write(make([]byte, min(size, member)-int64(len(prefix))))
	w.Close()
	var zeros bytes.Buffer
	w.Reset(&zeros)
	w.Write(make([]byte, member))
	w.Close()
	for left := size - member; left > 0; left -= member {
		out.Write(zeros.Bytes())
	}
	return out.Bytes()
}

// ZstdBomb is Bomb for zstd, with a frame whose window is window bytes
// (a power of two), which the decoder must hold.
func ZstdBomb(size int64, window int, sizeHint bool) []byte {
	return zstdFrame(BombPrefix(size), size, sizeHint, 0, window)
}

// zstdFrame crafts one zstd frame declaring window: a raw block of prefix,
// then RLE blocks of zeros up to size bytes in all, then, when extra > 0,
// extra more zero bytes past what the frame content size (written when
// sizeHint) claims.
func zstdFrame(prefix []byte, size int64, sizeHint bool, extra int64, window int) []byte {
	out := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	if sizeHint {
		// Frame header descriptor: 8-byte content size, a window.
		out = append(out, 0xC0, windowDescriptor(window))
		out = binary.LittleEndian.AppendUint64(out, uint64(size))
	} else {
		out = append(out, 0x00, windowDescriptor(window))
	}
	block := func(typ int, n int, last bool) {
		hdr := uint32(n)<<3 | uint32(typ)<<1
		if last {
			hdr |= 1
		}
		out = append(out, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	}
	total := size + extra
	block(0, len(prefix), total == int64(len(prefix)))
	out = append(out, prefix...)
	for left := total - int64(len(prefix)); left > 0; {
		n := min(left, 128<<10)
		left -= n
		block(1, int(n), left == 0)
		out = append(out, 0)
	}
	return out
}

// windowDescriptor encodes a power-of-two window of at least 1 KiB.
func windowDescriptor(window int) byte {
	exp := 0
	for 1<<(10+exp) < window {
		exp++
	}
	return byte(exp << 3)
}

func lz4Bomb(prefix []byte, size int64, sizeHint bool) []byte {
	const block = 4 << 20
	var hdr bytes.Buffer
	w := lz4.NewWriter(&hdr)
	opts := []lz4.Option{lz4.BlockSizeOption(lz4.Block4Mb), lz4.ChecksumOption(false), lz4.ConcurrencyOption(1)}
	if sizeHint {
		opts = append(opts, lz4.SizeOption(uint64(size)))
	}
	if err := w.Apply(opts...); err != nil {
		panic(err)
	}
	w.Flush() // the frame header alone
	out := bytes.Clone(hdr.Bytes())
	first := append(bytes.Clone(prefix), make([]byte, block-len(prefix))...)
	out = lz4Block(out, first)
	zeros := lz4Block(nil, make([]byte, block))
	for left := size - block; left > 0; left -= block {
		out = append(out, zeros...)
	}
	return binary.LittleEndian.AppendUint32(out, 0) // end mark
}

func lz4Block(dst, src []byte) []byte {
	buf := make([]byte, lz4.CompressBlockBound(len(src)))
	n, err := lz4.CompressBlock(src, buf, nil)
	if err != nil || n == 0 {
		panic("recordtest: lz4 block")
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	return append(dst, buf[:n]...)
}

func snappyBomb(prefix []byte, size int64) []byte {
	// The decoded length claims size; the rest need not be there: the
	// claim alone must be refused.
	out := binary.AppendUvarint(nil, uint64(size))
	return append(out, s2.EncodeSnappy(nil, prefix)[1:]...) // prefix's literal, its own length dropped
}

func xerialBomb(prefix []byte, size int64) []byte {
	const blockSize = 64 << 10
	out := append([]byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}, 0, 0, 0, 1, 0, 0, 0, 1)
	first := s2.EncodeSnappy(nil, append(bytes.Clone(prefix), make([]byte, blockSize-len(prefix))...))
	out = binary.BigEndian.AppendUint32(out, uint32(len(first)))
	out = append(out, first...)
	zeros := s2.EncodeSnappy(nil, make([]byte, blockSize))
	for left := size - blockSize; left > 0; left -= blockSize {
		out = binary.BigEndian.AppendUint32(out, uint32(len(zeros)))
		out = append(out, zeros...)
	}
	return out
}

// Endless returns a compressed section, for codec, whose size hint (zstd's
// content size, LZ4's, snappy's decoded length, gzip's trailer) claims
// only section, which holds the batch's records, but whose stream goes on
// with extra more bytes of zeros.
func Endless(codec int, section []byte, extra int64) []byte {
	switch codec {
	case record.CodecZstd:
		return zstdFrame(section, int64(len(section)), true, extra, 1<<20)
	case record.CodecLz4:
		var out bytes.Buffer
		w := lz4.NewWriter(&out)
		if err := w.Apply(lz4.SizeOption(uint64(len(section))), lz4.ChecksumOption(false)); err != nil {
			panic(err)
		}
		w.Flush()
		b := lz4Block(bytes.Clone(out.Bytes()), append(bytes.Clone(section), make([]byte, min(extra, 4<<20-int64(len(section))))...))
		return binary.LittleEndian.AppendUint32(b, 0)
	case record.CodecSnappy:
		whole := s2.EncodeSnappy(nil, append(bytes.Clone(section), make([]byte, extra)...))
		_, n := binary.Uvarint(whole)
		return append(binary.AppendUvarint(nil, uint64(len(section))), whole[n:]...)
	case record.CodecGzip:
		var out bytes.Buffer
		w := gzip.NewWriter(&out)
		w.Write(section)
		w.Write(make([]byte, extra))
		w.Close()
		b := out.Bytes()
		// The trailer's size (mod 2^32) claims the section only.
		binary.LittleEndian.PutUint32(b[len(b)-4:], uint32(len(section)))
		return b
	}
	panic("recordtest: no endless stream for codec")
}

// Case is a malformed producer batch: what it holds, and how
// record.ValidateProduced refuses it.
type Case struct {
	Name    string
	Section []byte // the records, uncompressed
	Header  Header
	// Compacted says the topic is compacted (keys required).
	Compacted bool
	// MaxMessageBytes, when set, is the limit the batch exceeds.
	MaxMessageBytes int
	// Index is the record a *record.RecordError names; -1 when the
	// error is the batch's.
	Index int32
	Err   error // what the error wraps
}

// raw builds a record whose body (after the length) is given part by
// part: ints as varints, bytes as they are.
func raw(parts ...any) []byte {
	var body []byte
	for _, p := range parts {
		switch v := p.(type) {
		case int:
			body = Varint(body, int64(v))
		case []byte:
			body = append(body, v...)
		case byte:
			body = append(body, v)
		}
	}
	return Fields{Raw: body}.Encode(nil)
}

// Malformed returns every kind of malformed batch a producer (buggy or
// hostile) may send, at timestamp ts0.
func Malformed() []Case {
	const ts0 = 1_700_000_000_000
	one := Records(1, []byte("v"))
	overflow64 := append(bytes.Repeat([]byte{0xff}, 9), 0x02) // 10 bytes, 65 bits
	tooLong := append(bytes.Repeat([]byte{0xff}, 10), 0x01)   // 11 bytes
	overflow32 := []byte{0xff, 0xff, 0xff, 0xff, 0x1f}        // 35 bits
	rec := func(name string, section []byte, n int32, index int32) Case {
		return Case{Name: name, Section: section, Header: N(n, ts0), Index: index, Err: record.ErrRecord}
	}
	return []Case{
		{Name: "count zero", Header: Header{NumRecords: 0, LastOffsetDelta: 0, Timestamp: ts0}, Index: -1, Err: record.ErrRecordCount},
		{Name: "count zero, delta -1", Header: Header{NumRecords: 0, LastOffsetDelta: -1, Timestamp: ts0}, Index: -1, Err: record.ErrRecordCount},
		{Name: "count disagrees with delta", Section: one, Header: Header{NumRecords: 1, LastOffsetDelta: 3, Timestamp: ts0}, Index: -1, Err: record.ErrRecordCount},
		rec("claims 2^31-1 records, holds one", one, math.MaxInt32, 1),
		rec("claims 1000 records, holds one", one, 1000, 1),
		rec("garbage records", bytes.Repeat([]byte{0x5a, 0xa5, 0x33}, 40), 3, 0),
		rec("negative record length", Fields{Length: -5, Value: []byte("v")}.Encode(nil), 1, 0),
		rec("zero record length", append(Varint(nil, 0), one...), 1, 0),
		rec("record length past the records", Fields{Length: 200, Value: []byte("v")}.Encode(nil), 1, 0),
		rec("record length beyond its fields", append(Fields{Length: 12, Value: []byte("v")}.Encode(nil), 0, 0, 0, 0, 0, 0), 1, 0),
		rec("negative key length", raw(byte(0), 0, 0, -2, 1, []byte("v"), 0), 1, 0),
		rec("negative value length", raw(byte(0), 0, 0, -1, -3, 0), 1, 0),
		rec("key past the record", raw(byte(0), 0, 0, 90, []byte("k"), -1, 0), 1, 0),
		rec("negative header key length", raw(byte(0), 0, 0, -1, -1, 1, -1, -1), 1, 0),
		rec("header value length -2", raw(byte(0), 0, 0, -1, -1, 1, 1, []byte("h"), -2), 1, 0),
		rec("header count larger than the bytes left", raw(byte(0), 0, 0, -1, -1, 1000, 0, -1), 1, 0),
		rec("negative header count", raw(byte(0), 0, 0, -1, -1, -1), 1, 0),
		rec("timestamp varint overflows 64 bits", raw(byte(0), overflow64, 0, -1, -1, 0), 1, 0),
		rec("timestamp varint of 11 bytes", raw(byte(0), tooLong, 0, -1, -1, 0), 1, 0),
		rec("offset delta varint overflows 32 bits", raw(byte(0), 0, overflow32, -1, -1, 0), 1, 0),
		rec("length varint overflows 32 bits", append(bytes.Clone(overflow32), one[1:]...), 1, 0),
		rec("offset deltas out of order", Fields{OffsetDelta: 1, Value: []byte("b")}.Encode(Fields{Value: []byte("a")}.Encode(Fields{OffsetDelta: 0}.Encode(nil))), 3, 1),
		rec("offset deltas from 1", Fields{OffsetDelta: 2}.Encode(Fields{OffsetDelta: 1}.Encode(nil)), 2, 0),
		{Name: "max timestamp below the records'", Section: Fields{TimestampDelta: 5}.Encode(nil), Header: N(1, ts0), Index: -1, Err: record.ErrTimestamp},
		{Name: "max timestamp above the records'", Section: Fields{TimestampDelta: -5}.Encode(nil), Header: N(1, ts0), Index: -1, Err: record.ErrTimestamp},
		rec("timestamp delta overflows", Fields{TimestampDelta: math.MaxInt64}.Encode(nil), 1, 0),
		{Name: "bytes after the last record", Section: append(bytes.Clone(one), 0), Header: N(1, ts0), Index: -1, Err: record.ErrRecord},
		{Name: "a record after the last", Section: Records(2, []byte("v")), Header: N(1, ts0), Index: -1, Err: record.ErrRecord},
		{Name: "null key on a compacted topic", Section: Fields{OffsetDelta: 1}.Encode(Fields{Key: []byte{}}.Encode(nil)), Header: N(2, ts0), Compacted: true, Index: 1, Err: record.ErrNullKey},
		{Name: "control batch", Section: one, Header: Header{NumRecords: 1, Timestamp: ts0, Attributes: record.AttrControl}, Index: -1, Err: record.ErrControl},
		{Name: "larger than max.message.bytes", Section: Records(10, bytes.Repeat([]byte("x"), 100)), Header: N(10, ts0), MaxMessageBytes: 500, Index: -1, Err: record.ErrTooLarge},
	}
}
