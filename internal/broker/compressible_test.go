package broker

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestHighlyCompressibleBatchesReadBack produces with franz-go, in each
// codec, what Kafka accepts however well it compresses: a batch of three
// 1 MiB records of zeros (a few KB as sent with gzip or zstd, 3 MiB
// decompressed) and one record of a 1,048,576-byte value, keys and headers
// included, under the default max.message.bytes (which applies to the
// batch as sent) and the default strata.decompressed.batch.max.bytes; every
// record is accepted and read back whole.
func TestHighlyCompressibleBatchesReadBack(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	zeros := make([]byte, 1<<20)
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"gzip", kgo.GzipCompression()},
		{"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := "zeros-" + c.name
			createTopic(t, adm, topic, 1, nil)
			// Records above the client's default 1 MB batch limit, which
			// it applies before compression; manual flushing puts the
			// three in one batch.
			cl := newClient(t, b.Addr(), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(c.codec),
				kgo.ProducerBatchMaxBytes(8<<20), kgo.ManualFlushing(), kgo.RecordRetries(1))
			ctx := testContext(t)
			var want []*kgo.Record
			for i := range 3 {
				want = append(want, &kgo.Record{Key: fmt.Appendf(nil, "three-%d", i), Value: zeros,
					Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/octet-stream")}}})
			}
			produce := func(what string, rs ...*kgo.Record) {
				errs := make(chan error, len(rs))
				for _, r := range rs {
					cl.Produce(ctx, r, func(_ *kgo.Record, err error) { errs <- err })
				}
				if err := cl.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				for range rs {
					if err := <-errs; err != nil {
						t.Fatalf("producing %s with %s: %v", what, c.name, err)
					}
				}
			}
			produce("three 1 MiB records of zeros", want...)
			if want[0].Offset != 0 || want[2].Offset != 2 {
				t.Fatalf("the three records at offsets %d..%d", want[0].Offset, want[2].Offset)
			}
			produce("a record of a 1,048,576-byte value", &kgo.Record{Key: []byte("one"), Value: zeros, Headers: want[0].Headers})
			got := consumeN(t, b.Addr(), 4, topic)
			for i, r := range got {
				if !bytes.Equal(r.Value, zeros) || r.Offset != int64(i) || len(r.Headers) != 1 {
					t.Fatalf("record %d at offset %d: %d bytes, %d headers", i, r.Offset, len(r.Value), len(r.Headers))
				}
			}
		})
	}
}
