package record_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
	rt "github.com/strata-io/strata/internal/record/recordtest"
)

const ts0 = 1_700_000_000_000

// badCase is a batch ValidateProduced must refuse, and how.
type badCase = rt.Case

func badCases() []badCase { return rt.Malformed() }

// checkRefusal checks err is the refusal c expects.
func checkRefusal(t *testing.T, err error, index int32, is error) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	var re *record.RecordError
	switch {
	case !errors.Is(err, is):
		t.Fatalf("error %v, want %v", err, is)
	case index >= 0 && (!errors.As(err, &re) || re.Index != index):
		t.Fatalf("error %v, want record %d named", err, index)
	case index < 0 && errors.As(err, &re):
		t.Fatalf("error %v names a record; want the batch's", err)
	}
}

// TestValidateProducedRefuses runs every malformed batch, uncompressed and
// in every codec (the compressed stream itself valid), through
// ValidateProduced, and the ones whose framing a log could hold through
// ScanStored.
func TestValidateProducedRefuses(t *testing.T) {
	for _, codec := range rt.Codecs {
		for _, c := range badCases() {
			t.Run(codec.Name+"/"+c.Name, func(t *testing.T) {
				batch := rt.Batch(codec.Codec, c.Section, c.Header)
				if c.MaxMessageBytes > 0 && len(batch) <= c.MaxMessageBytes {
					t.Skip("compressed below the limit")
				}
				_, err := record.ValidateProduced(batch, record.ValidateOptions{MaxMessageBytes: c.MaxMessageBytes, RequireKeys: c.Compacted})
				checkRefusal(t, err, c.Index, c.Err)
			})
		}
	}
	if n := record.DefaultBudget.InUse(); n != 0 {
		t.Fatalf("%d bytes of the budget still reserved", n)
	}
}

func TestValidateProducedAccepts(t *testing.T) {
	recs := []record.Rec{
		{Key: []byte("k1"), Value: []byte("v1"), Timestamp: ts0 + 5},
		{Key: []byte("k2"), Value: nil, Timestamp: ts0, Headers: []kmsg.Header{{Key: "h", Value: []byte("x")}, {Key: "", Value: nil}}},
		{Key: []byte{}, Value: bytes.Repeat([]byte("z"), 70_000), Timestamp: ts0 + 3},
	}
	plain := record.Build(nil, recs)
	for _, codec := range rt.Codecs {
		batch := plain
		if codec.Codec != record.CodecNone {
			batch = rt.Batch(codec.Codec, plain[record.HeaderSize:], rt.N(3, ts0+5))
		}
		two := append(bytes.Clone(batch), batch...)
		v, err := record.ValidateProduced(two, record.ValidateOptions{RequireKeys: true, MaxMessageBytes: 1 << 20})
		if err != nil {
			t.Fatalf("%s: %v", codec.Name, err)
		}
		if hs := v.Headers(); len(hs) != 2 || hs[1].NumRecords != 3 || hs[1].MaxTimestamp != ts0+5 || !bytes.Equal(v.Records(), two) {
			t.Fatalf("%s: headers %+v", codec.Name, hs)
		}
		record.SetBaseOffset(batch, 40)
		h, _ := record.ParseHeader(batch)
		var offsets, times []int64
		size, err := record.ScanStored(batch, &h, nil, func(o, ts int64) bool {
			offsets, times = append(offsets, o), append(times, ts)
			return true
		})
		if err != nil || len(offsets) != 3 || offsets[2] != 42 || times[0] != ts0+5 || times[1] != ts0 || size != int64(len(plain)-record.HeaderSize) {
			t.Fatalf("%s: ScanStored %v %v %d: %v", codec.Name, offsets, times, size, err)
		}
	}
}

// bombSize is how much every bomb inflates to.
const bombSize = 1 << 30

// bombs returns each codec's bomb, with and without a size hint, of about
// 1 MiB or less compressed, and a batch of n claimed records around each.
func bombs(n int32) []struct {
	name  string
	batch []byte
} {
	var out []struct {
		name  string
		batch []byte
	}
	add := func(name string, codec int, payload []byte) {
		out = append(out, struct {
			name  string
			batch []byte
		}{name, rt.Wrap(codec, payload, rt.N(n, ts0))})
	}
	add("gzip", record.CodecGzip, rt.Bomb(record.CodecGzip, bombSize/2, false))
	add("zstd", record.CodecZstd, rt.Bomb(record.CodecZstd, bombSize, false))
	add("zstd with content size", record.CodecZstd, rt.Bomb(record.CodecZstd, bombSize, true))
	add("lz4", record.CodecLz4, rt.Bomb(record.CodecLz4, 200<<20, false))
	add("lz4 with content size", record.CodecLz4, rt.Bomb(record.CodecLz4, 200<<20, true))
	add("snappy", record.CodecSnappy, rt.Bomb(record.CodecSnappy, bombSize, true))
	add("snappy xerial", -record.CodecSnappy, rt.Bomb(-record.CodecSnappy, 16<<20, true))
	return out
}

// bombLimit is the decompressed-size limit the bomb tests set, so that
// each stops after a bounded amount of work.
const bombLimit = 8 << 20

// TestBombsStopAtTheLimit validates every bomb, claiming one record and
// many, under a budget whose MaxUncompressed is bombLimit, and checks each
// is refused as too large after at most that much output, allocating no
// more than a decoder.
func TestBombsStopAtTheLimit(t *testing.T) {
	budget := record.NewBudget(record.DefaultBudgetBytes).SetMaxUncompressed(bombLimit)
	for _, n := range []int32{1, 100_000} {
		for _, b := range bombs(n) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := record.ValidateProduced(b.batch, record.ValidateOptions{MaxMessageBytes: 2 << 20, Budget: budget})
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, record.ErrUncompressedTooLarge) || !errors.Is(err, record.ErrDecompress) {
				t.Fatalf("%s, %d records: %v", b.name, n, err)
			}
			if !strings.Contains(err.Error(), record.MaxUncompressedKey) || !strings.Contains(err.Error(), strconv.Itoa(bombLimit)) {
				t.Errorf("%s, %d records: %q does not name the limit and its key", b.name, n, err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 20<<20 {
				t.Errorf("%s, %d records: %d bytes allocated", b.name, n, alloc)
			}
			t.Logf("%s, %d records, %d bytes: refused in %v: %v", b.name, n, len(b.batch), elapsed, err)
		}
	}
	if n := budget.InUse(); n != 0 {
		t.Fatalf("%d bytes of the budget still reserved", n)
	}
	if got := record.DefaultBudget.MaxUncompressed(); got != 64<<20 {
		t.Fatalf("the default budget stops at %d bytes, want 64 MiB", got)
	}
}

// zeroRecords is a records section of n records whose values are size
// zero bytes, each with a key and a header, as producers send them.
func zeroRecords(n, size int) []byte {
	var b []byte
	value := make([]byte, size)
	for i := range n {
		b = rt.Fields{OffsetDelta: int64(i), Key: fmt.Appendf(nil, "key-%03d", i), Value: value,
			Headers: [][2][]byte{{[]byte("content-type"), []byte("application/octet-stream")}}}.Encode(b)
	}
	return b
}

// TestHighlyCompressibleBatches: batches Kafka accepts whatever their
// compression ratio are accepted under the default limit, with the
// default max.message.bytes applied to the batch as sent, and read back
// whole: three 1 MiB records of zeros and one record of a 1,048,576-byte
// value, in every codec and framing. zstd compresses
// them 1000:1 or better and gzip (at its best level) near deflate's
// ceiling of 1032:1 (asserted); LZ4's format tops out near 250:1 and
// snappy's near 21:1, which the test logs.
func TestHighlyCompressibleBatches(t *testing.T) {
	const maxMessageBytes = 1048588 // Kafka's default
	for _, c := range []struct {
		name    string
		records int
		size    int
	}{
		{"three 1 MiB records of zeros", 3, 1 << 20},
		{"one record of a 1,048,576-byte value", 1, 1 << 20},
	} {
		section := zeroRecords(c.records, c.size)
		for _, codec := range rt.Codecs[1:] {
			payload := rt.Compress(codec.Codec, section)
			if codec.Codec == record.CodecGzip {
				payload = gzipBest(t, section)
			}
			batch := rt.Wrap(codec.Codec, payload, rt.N(int32(c.records), ts0))
			ratio := float64(len(section)) / float64(len(payload))
			t.Logf("%s, %s: %d bytes as sent, %.0f:1", c.name, codec.Name, len(batch), ratio)
			if want := map[int]float64{record.CodecGzip: 900, record.CodecZstd: 1000}[codec.Codec]; ratio < want {
				t.Errorf("%s, %s: a ratio of %.0f:1, want %.0f:1 or more", c.name, codec.Name, ratio, want)
			}
			v, err := record.ValidateProduced(batch, record.ValidateOptions{MaxMessageBytes: maxMessageBytes})
			if err != nil {
				t.Fatalf("%s, %s: %v", c.name, codec.Name, err)
			}
			if hs := v.Headers(); len(hs) != 1 || hs[0].NumRecords != int32(c.records) {
				t.Fatalf("%s, %s: headers %+v", c.name, codec.Name, hs)
			}
			h, _ := record.ParseHeader(batch)
			size, err := record.ScanStored(batch, &h, nil, nil)
			if err != nil || size != int64(len(section)) {
				t.Fatalf("%s, %s: ScanStored %d of %d: %v", c.name, codec.Name, size, len(section), err)
			}
			plain, err := record.Decompress(batch, size, nil)
			if err != nil || !bytes.Equal(plain[record.HeaderSize:], section) {
				t.Fatalf("%s, %s: decompressed batch differs (%v)", c.name, codec.Name, err)
			}
		}
	}
	if n := record.DefaultBudget.InUse(); n != 0 {
		t.Fatalf("%d bytes of the budget still reserved", n)
	}
}

// gzipBest compresses section with gzip at its best level, as a producer
// with compression.gzip.level=9 does.
func gzipBest(t *testing.T, section []byte) []byte {
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(section)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestLimitIsTheBudgetsNotTheRecordCounts: the limit on decompressed size
// is the budget's, whatever the batch claims: a batch one byte past it is
// refused naming the limit, one at it accepted.
func TestLimitIsTheBudgetsNotTheRecordCounts(t *testing.T) {
	section := zeroRecords(2, 1<<20)
	for _, codec := range rt.Codecs[1:] {
		batch := rt.Batch(codec.Codec, section, rt.N(2, ts0))
		at := record.NewBudget(record.DefaultBudgetBytes).SetMaxUncompressed(int64(len(section)))
		if _, err := record.ValidateProduced(batch, record.ValidateOptions{Budget: at}); err != nil {
			t.Fatalf("%s: at the limit: %v", codec.Name, err)
		}
		below := record.NewBudget(record.DefaultBudgetBytes).SetMaxUncompressed(int64(len(section) - 1))
		_, err := record.ValidateProduced(batch, record.ValidateOptions{Budget: below})
		if !errors.Is(err, record.ErrUncompressedTooLarge) || !strings.Contains(err.Error(), record.MaxUncompressedKey) {
			t.Fatalf("%s: a byte past the limit: %v", codec.Name, err)
		}
	}
}

// TestEndlessStreams: each codec's size hint claims just the records, but
// the stream goes on; the batch is refused after the records and a byte.
func TestEndlessStreams(t *testing.T) {
	section := rt.Records(3, []byte("value"))
	for _, codec := range []int{record.CodecGzip, record.CodecSnappy, record.CodecLz4, record.CodecZstd} {
		batch := rt.Wrap(codec, rt.Endless(codec, section, 4<<20), rt.N(3, ts0))
		_, err := record.ValidateProduced(batch, record.ValidateOptions{MaxMessageBytes: 1 << 20})
		if !errors.Is(err, record.ErrDecompress) && !errors.Is(err, record.ErrRecord) {
			t.Fatalf("codec %d: %v", codec, err)
		}
		var re *record.RecordError
		if errors.As(err, &re) {
			t.Fatalf("codec %d: %v names a record; the records were all valid", codec, err)
		}
	}
}

// TestCompressedGarbage: corrupt compressed payloads are ErrDecompress,
// and trailing bytes after a valid stream are refused.
func TestCompressedGarbage(t *testing.T) {
	section := rt.Records(3, []byte("value"))
	for _, codec := range rt.Codecs[1:] {
		good := rt.Compress(codec.Codec, section)
		flipped := bytes.Clone(good)
		for i := len(flipped) / 3; i < len(flipped); i += 5 {
			flipped[i] ^= 0x55
		}
		for name, payload := range map[string][]byte{
			"garbage":  bytes.Repeat([]byte{0x42}, 64),
			"flipped":  flipped,
			"trailing": append(bytes.Clone(good), 1, 2, 3, 4, 5, 6, 7, 8),
			"cut":      good[:len(good)-2],
			"empty":    nil,
		} {
			_, err := record.ValidateProduced(rt.Wrap(codec.Codec, payload, rt.N(3, ts0)), record.ValidateOptions{})
			if err == nil {
				t.Errorf("%s %s: accepted", codec.Name, name)
			}
		}
	}
}

func TestBudgetFirstComeFirstServed(t *testing.T) {
	b := record.NewBudget(100)
	// The walker's reservations are internal; drive them through
	// Decompress, whose reservation is the output plus the decoder: here,
	// through the exported surface, check the capacity refusal only.
	batch := rt.Batch(record.CodecGzip, rt.Records(1, []byte("v")), rt.N(1, ts0))
	if _, err := record.Decompress(batch, 10, b); !errors.Is(err, record.ErrDecompress) {
		t.Fatalf("a reservation larger than the budget: %v", err)
	}
	// Many concurrent validations sharing a small budget all finish, and
	// leave nothing reserved.
	small := record.NewBudget(4 << 20)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		codec := []int{record.CodecGzip, record.CodecLz4, record.CodecZstd, record.CodecSnappy}[i%4]
		batch := rt.Batch(codec, rt.Records(50, []byte("some value")), rt.N(50, ts0))
		wg.Go(func() {
			_, err := record.ValidateProduced(batch, record.ValidateOptions{Budget: small})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := small.InUse(); n != 0 {
		t.Fatalf("%d bytes still reserved", n)
	}
}

// FuzzValidateProduced runs the validator over a fuzzed records section
// sent uncompressed, in each codec, and (as a fuzzed compressed payload)
// raw: it never panics, gives back its whole budget, decides alike for
// every codec, and what it accepts kmsg's decoder and the log cleaner's
// reader read record by record.
func FuzzValidateProduced(f *testing.F) {
	for _, c := range badCases() {
		f.Add(c.Section, c.Header.NumRecords, int64(0))
	}
	f.Add(rt.Records(3, []byte("value")), int32(3), int64(0))
	f.Add(record.Build(nil, []record.Rec{{Key: []byte("k"), Value: []byte("v"), Headers: []kmsg.Header{{Key: "a", Value: []byte("b")}}, Timestamp: 7}})[record.HeaderSize:], int32(1), int64(7))
	f.Add(rt.Compress(record.CodecZstd, rt.Records(2, nil)), int32(2), int64(0))
	f.Add(rt.Compress(record.CodecLz4, rt.Records(2, nil)), int32(2), int64(0))
	f.Add(rt.Compress(record.CodecGzip, rt.Records(2, nil)), int32(2), int64(0))
	f.Add(rt.Compress(-record.CodecSnappy, rt.Records(2, nil)), int32(2), int64(0))
	budget := record.NewBudget(64 << 20)
	f.Fuzz(func(t *testing.T, section []byte, count int32, maxTS int64) {
		opts := record.ValidateOptions{MaxMessageBytes: 1 << 20, Budget: budget}
		h := rt.N(count, 0)
		var first error
		for i, codec := range rt.Codecs {
			batch := rt.Batch(codec.Codec, section, h)
			binary.BigEndian.PutUint64(batch[35:], uint64(maxTS))
			binary.BigEndian.PutUint32(batch[17:], record.Checksum(batch))
			_, err := record.ValidateProduced(batch, opts)
			if i == 0 {
				first = err
				if err == nil {
					checkReadable(t, batch)
				}
			} else if (err == nil) != (first == nil) || recordIndex(err) != recordIndex(first) {
				t.Fatalf("%s decided %v; uncompressed %v", codec.Name, err, first)
			}
			// The section as a compressed payload of each codec.
			if codec.Codec != record.CodecNone {
				record.ValidateProduced(rt.Wrap(codec.Codec, section, h), opts)
			}
		}
		if n := budget.InUse(); n != 0 {
			t.Fatalf("%d bytes still reserved", n)
		}
	})
}

func recordIndex(err error) int32 {
	var re *record.RecordError
	if errors.As(err, &re) {
		return re.Index
	}
	return -1
}

// checkReadable reads an accepted uncompressed batch with kmsg and
// ScanRecords, which must agree with the validator.
func checkReadable(t *testing.T, batch []byte) {
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(batch); err != nil {
		t.Fatalf("kmsg: %v", err)
	}
	rest := kb.Records
	for i := range kb.NumRecords {
		n, w := binary.Varint(rest)
		var r kmsg.Record
		if err := r.ReadFrom(rest[:w+int(n)]); err != nil || r.OffsetDelta != i {
			t.Fatalf("kmsg record %d: %v (offset delta %d)", i, err, r.OffsetDelta)
		}
		rest = rest[w+int(n):]
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes after the records", len(rest))
	}
	if err := record.ScanRecords(batch[record.HeaderSize:], kb.NumRecords, func(*record.RawRecord) error { return nil }); err != nil {
		t.Fatalf("ScanRecords: %v", err)
	}
}

// TestLargeBatchCRC: a batch large enough that its CRC is computed as the
// walk passes is accepted when whole, refused with ErrCRC when a byte is
// changed anywhere (even where the walk then fails), and refused naming
// the record when a record is malformed under a valid CRC.
func TestLargeBatchCRC(t *testing.T) {
	good := rt.Batch(record.CodecNone, rt.Records(1000, bytes.Repeat([]byte("v"), 100)), rt.N(1000, ts0))
	if len(good) < 64<<10 {
		t.Fatalf("a batch of %d bytes is not large", len(good))
	}
	if _, err := record.ValidateProduced(good, record.ValidateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{30, record.HeaderSize + 5, len(good) / 2, len(good) - 1} {
		bad := bytes.Clone(good)
		bad[at] ^= 0xff
		if _, err := record.ValidateProduced(bad, record.ValidateOptions{}); !errors.Is(err, record.ErrCRC) {
			t.Errorf("byte %d changed: %v, want a CRC mismatch", at, err)
		}
	}
	section := rt.Records(1000, bytes.Repeat([]byte("v"), 100))
	section = append(section, rt.Fields{Length: -3}.Encode(nil)...) // record 1000 malformed
	bad := rt.Batch(record.CodecNone, section, rt.N(1001, ts0))
	var re *record.RecordError
	if _, err := record.ValidateProduced(bad, record.ValidateOptions{}); !errors.As(err, &re) || re.Index != 1000 {
		t.Fatalf("malformed record 1000 under a valid CRC: %v", err)
	}
}
