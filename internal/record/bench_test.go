package record_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/strata-io/strata/internal/record"
)

// BenchmarkValidateProduced measures the validator alone on a batch of
// 100 records of 100 random lowercase letters, compressed as franz-go
// compresses, and on an uncompressed batch of 9,000. b.N is records.
func BenchmarkValidateProduced(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]record.Rec, 100)
	for i := range recs {
		v := make([]byte, 100)
		for j := range v {
			v[j] = byte('a' + rng.IntN(26))
		}
		recs[i] = record.Rec{Value: v, Timestamp: 1000}
	}
	plain := record.Build(nil, recs)
	h, _ := record.ParseHeader(plain)
	section := plain[record.HeaderSize:]
	var lz bytes.Buffer
	w := lz4.NewWriter(&lz)
	w.Write(section)
	w.Close()
	enc, _ := zstd.NewWriter(nil, zstd.WithWindowSize(64<<10), zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
	var big []record.Rec
	for range 90 {
		big = append(big, recs...)
	}
	for _, c := range []struct {
		name  string
		batch []byte
	}{
		{"none", plain},
		{"none-9000", record.Build(nil, big)}, // a batch as franz-go fills it, about 1 MB
		{"lz4", func() []byte { h := h; h.Attributes = record.CodecLz4; return record.AppendBatch(nil, &h, lz.Bytes()) }()},
		{"zstd", func() []byte {
			h := h
			h.Attributes = record.CodecZstd
			return record.AppendBatch(nil, &h, enc.EncodeAll(section, nil))
		}()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(100)
			h, _ := record.ParseHeader(c.batch)
			for i := 0; i < b.N; i += int(h.NumRecords) {
				if _, err := record.ValidateProduced(c.batch, record.ValidateOptions{MaxMessageBytes: 1 << 20}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
