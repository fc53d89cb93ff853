package storage

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// BenchmarkClean measures the log cleaner's throughput: a first cleaning
// of a 64 MiB compacted log on real files (page cache warm), batches of 16
// records with 1 KiB values (hex text, which zstd halves) over 20,000 keys,
// so most records go. MB/s counts the sealed segments' bytes before
// cleaning.
func BenchmarkClean(b *testing.B) {
	for _, c := range []struct {
		name  string
		codec int
	}{{"none", record.CodecNone}, {"zstd", record.CodecZstd}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Compact, cfg.Delete = true, false
			cfg.SegmentBytes = 16 << 20
			src := filepath.Join(b.TempDir(), "src-0")
			l := openTestLog(b, vfs.Default, src, cfg, LogOptions{})
			rng := rand.New(rand.NewPCG(9, 9))
			const keys = 20000
			for l.Size() < 64<<20 {
				kvs := make([]kv, 16)
				for i := range kvs {
					k := rng.IntN(keys)
					kvs[i] = kv{key: fmt.Sprintf("key-%07d", k), value: value(rng)}
				}
				mustAppend(b, l, kvBatch(b, batchOpts{codec: c.codec, ts: 1000}, kvs...), leader(1))
			}
			segs := l.segmentList()
			sealed := l.Size() - segs[len(segs)-1].size.Load()
			if err := l.Flush(l.LogEndOffset()); err != nil {
				b.Fatal(err)
			}
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(sealed)
			b.ReportAllocs()
			b.ResetTimer()
			var after int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dst := filepath.Join(b.TempDir(), "dst-0")
				copyDir(b, src, dst)
				l := openTestLog(b, vfs.Default, dst, cfg, LogOptions{CleanShutdown: true})
				b.StartTimer()
				res, err := l.Clean(context.Background(), CleanOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				after = res.BytesAfter
				l.Close()
				os.RemoveAll(dst)
				b.StartTimer()
			}
			b.ReportMetric(float64(after)/float64(sealed)*100, "%kept")
		})
	}
}

// value is 1000 bytes of random hex digits.
func value(rng *rand.Rand) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 1000)
	for i := range b {
		b[i] = hex[rng.IntN(16)]
	}
	return string(b)
}

func copyDir(b *testing.B, src, dst string) {
	b.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		b.Fatal(err)
	}
	names, err := os.ReadDir(src)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range names {
		in, err := os.Open(filepath.Join(src, n.Name()))
		if err != nil {
			b.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, n.Name()))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			b.Fatal(err)
		}
		in.Close()
		out.Close()
	}
}
