package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// compressBatch re-encodes an uncompressed batch with codec, as a producer
// would have sent it.
func compressBatch(t testing.TB, batch []byte, codec int) []byte {
	t.Helper()
	recs := batch[HeaderSize:]
	var buf bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case CodecGzip:
		w = gzip.NewWriter(&buf)
	case CodecSnappy:
		buf.Write(s2.EncodeSnappy(nil, recs))
	case -CodecSnappy: // the Java client's xerial framing, two blocks
		buf.Write(xerialMagic)
		buf.Write([]byte{0, 0, 0, 1, 0, 0, 0, 1})
		half := len(recs) / 2
		for _, part := range [][]byte{recs[:half], recs[half:]} {
			enc := s2.EncodeSnappy(nil, part)
			buf.Write(binary.BigEndian.AppendUint32(nil, uint32(len(enc))))
			buf.Write(enc)
		}
		codec = CodecSnappy
	case CodecLz4:
		w = lz4.NewWriter(&buf)
	case CodecZstd:
		zw, _ := zstd.NewWriter(&buf)
		w = zw
	}
	if w != nil {
		w.Write(recs)
		w.Close()
	}
	out := append(bytes.Clone(batch[:HeaderSize]), buf.Bytes()...)
	binary.BigEndian.PutUint16(out[offAttributes:], uint16(codec))
	binary.BigEndian.PutUint32(out[offLength:], uint32(len(out)-LogOverhead))
	binary.BigEndian.PutUint32(out[offCRC:], Checksum(out))
	return out
}

// decompressAll decompresses a whole batch as the log cleaner does:
// measured by ScanStored first.
func decompressAll(batch []byte) ([]byte, error) {
	h, err := ParseHeader(batch)
	if err != nil {
		return nil, err
	}
	size, err := ScanStored(batch, &h, nil, nil)
	if err != nil {
		return nil, err
	}
	return Decompress(batch, size, nil)
}

func TestDecompressEveryCodec(t *testing.T) {
	var recs []Rec
	for i := range 50 {
		recs = append(recs, Rec{Key: []byte{byte(i)}, Value: bytes.Repeat([]byte{byte(i)}, 100), Timestamp: int64(1000 + i)})
	}
	plain := Build(nil, recs)
	SetBaseOffset(plain, 7)
	for _, codec := range []int{CodecGzip, CodecSnappy, -CodecSnappy, CodecLz4, CodecZstd} {
		c := compressBatch(t, plain, codec)
		if _, err := Validate(c, 0); err != nil {
			t.Fatal(err)
		}
		d, err := decompressAll(c)
		if err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		if _, err := Validate(d, 0); err != nil || !bytes.Equal(d, plain) {
			t.Fatalf("codec %d: decompressed batch differs (%v)", codec, err)
		}
		n := 0
		Records(d, func(off, ts int64, r *kmsg.Record) error {
			if off != 7+int64(n) || ts != int64(1000+n) {
				t.Fatalf("codec %d: record %d at %d ts %d", codec, n, off, ts)
			}
			n++
			return nil
		})
		if n != 50 {
			t.Fatalf("codec %d: %d records", codec, n)
		}
		if _, err := Decompress(c, 100, nil); !errors.Is(err, ErrDecompress) {
			t.Fatalf("codec %d: limit not enforced: %v", codec, err)
		}
		garbled := bytes.Clone(c)
		for i := HeaderSize; i < len(garbled); i += 3 {
			garbled[i] ^= 0x5a
		}
		if _, err := decompressAll(garbled); err == nil {
			t.Logf("codec %d: garbled input decompressed (allowed, but unusual)", codec)
		}
	}
	if d, err := Decompress(plain, 10, nil); err != nil || &d[0] != &plain[0] {
		t.Fatal("uncompressed batch not returned as is")
	}
}

// FuzzValidate checks the batch validator never panics, and that what it
// accepts is self-consistent: the CRC matches, the batch fits, the counts
// agree, and the other readers of the header agree with it.
func FuzzValidate(f *testing.F) {
	plain := Build(nil, []Rec{{Key: []byte("k"), Value: []byte("v"), Timestamp: 5}, {Value: []byte("w"), Timestamp: 6}})
	f.Add(plain)
	f.Add(compressBatch(f, plain, CodecGzip))
	f.Add(compressBatch(f, plain, CodecZstd))
	f.Add(append(bytes.Clone(plain), plain...))
	f.Add(plain[:HeaderSize])
	f.Add(plain[:len(plain)-1])
	bad := bytes.Clone(plain)
	bad[offMagic] = 1
	f.Add(bad)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Validate(b, 0)
		ph, perr := ParseHeader(b)
		if err != nil {
			if _, err2 := ValidateProduced(b, ValidateOptions{}); err2 == nil {
				t.Fatal("ValidateProduced accepted what Validate rejected")
			}
			return
		}
		if perr != nil || ph != h {
			t.Fatalf("ParseHeader disagrees: %v", perr)
		}
		size := h.Size()
		if size > len(b) || size < HeaderSize {
			t.Fatalf("accepted size %d of %d bytes", size, len(b))
		}
		if Checksum(b[:size]) != h.CRC {
			t.Fatal("accepted a bad CRC")
		}
		if h.NumRecords < 0 || h.LastOffsetDelta < 0 || int64(h.NumRecords) > int64(h.LastOffsetDelta)+1 ||
			h.Codec() > CodecZstd {
			t.Fatalf("accepted header %+v", h)
		}
		n := 0
		if err := Batches(b[:size], func(Header, []byte) bool { n++; return true }); err != nil || n != 1 {
			t.Fatalf("Batches over one valid batch: %d, %v", n, err)
		}
		// Internal readers may not panic on what validation lets through.
		d, err := decompressAll(b[:size])
		if err == nil {
			Records(d, func(int64, int64, *kmsg.Record) error { return nil })
			ScanRecords(d[HeaderSize:], h.NumRecords, func(r *RawRecord) error {
				AppendRetimed(nil, r, r.TimestampDelta-1)
				return nil
			})
		}
		// Writing offsets and the epoch keeps the batch valid.
		c := bytes.Clone(b[:size])
		SetBaseOffset(c, 1<<40)
		SetLeaderEpoch(c, 9)
		if _, err := Validate(c, 0); err != nil {
			t.Fatalf("offset assignment broke the batch: %v", err)
		}
		SetLogAppendTime(c, 12345)
		if h2, err := Validate(c, 0); err != nil || h2.MaxTimestamp != 12345 {
			t.Fatalf("log-append time broke the batch: %v", err)
		}
	})
}
