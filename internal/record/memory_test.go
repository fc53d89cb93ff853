package record

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// TestDecoderMemoryWithinReservation decodes, with a new decoder, a stream that makes each codec's decoder as large as its
// reservation allows, and checks that it allocates no more than it
// reserved: the budget's accounting must be an upper bound.
func TestDecoderMemoryWithinReservation(t *testing.T) {
	big := make([]byte, 8<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>9) // compressible, not trivially
	}
	zstdWith := func(window int) []byte {
		var buf bytes.Buffer
		w, _ := zstd.NewWriter(&buf, zstd.WithWindowSize(window), zstd.WithEncoderConcurrency(1))
		w.Write(big)
		w.Close()
		return buf.Bytes()
	}
	lz4With := func(size lz4.BlockSize) []byte {
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		w.Apply(lz4.BlockSizeOption(size), lz4.ConcurrencyOption(1))
		w.Write(big)
		w.Close()
		return buf.Bytes()
	}
	gz, _ := Compress(nil, CodecGzip, big)
	var xerial []byte
	xerial = append(xerial, xerialMagic...)
	xerial = append(xerial, 0, 0, 0, 1, 0, 0, 0, 1)
	for b := big; len(b) > 0; b = b[min(len(b), 1<<20):] {
		enc, _ := Compress(nil, CodecSnappy, b[:min(len(b), 1<<20)])
		enc = enc[16:] // one block of the xerial framing
		xerial = append(xerial, enc...)
	}
	for _, c := range []struct {
		name  string
		codec int
		src   []byte
	}{
		{"gzip", CodecGzip, gz},
		{"snappy xerial", CodecSnappy, xerial},
		{"lz4 64k", CodecLz4, lz4With(lz4.Block64Kb)},
		{"lz4 4m", CodecLz4, lz4With(lz4.Block4Mb)},
		{"zstd 64k", CodecZstd, zstdWith(64 << 10)},
		{"zstd 2m", CodecZstd, zstdWith(2 << 20)},
		{"zstd 8m", CodecZstd, zstdWith(8 << 20)},
	} {
		runtime.GC()
		runtime.GC() // the second empties the sync.Pools' victim caches
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		budget := NewBudget(1 << 30)
		d, err := openDecoder(c.codec, c.src, 1<<30, 0, budget)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		reserved := budget.InUse()
		var w walker
		w.streamed(d, 1<<30, d.window)
		if !w.skip(int64(len(big))) || w.err != nil {
			t.Fatalf("%s: %v", c.name, w.err)
		}
		d.close(0)
		if budget.InUse() != 0 || budget.Idle() != reserved {
			t.Fatalf("%s: after close %d in use, %d idle; %d reserved", c.name, budget.InUse(), budget.Idle(), reserved)
		}
		runtime.ReadMemStats(&after)
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%s: allocated %d, reserved %d", c.name, alloc, reserved)
		// TotalAlloc counts the whole process: allow the test's own
		// noise.
		const noise = 16 << 10
		if alloc > reserved+noise {
			t.Errorf("%s: allocated %d bytes, more than the %d reserved", c.name, alloc, reserved)
		}
	}
}
