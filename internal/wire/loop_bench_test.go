package wire

import (
	"encoding/binary"
	"io"
	"testing"
)

// BenchmarkRequestLoop measures the connection loop's cost per small
// request: a client in this process writes Metadata v12 requests (no
// topics) in batches of 16 on one connection and reads the responses.
func BenchmarkRequestLoop(b *testing.B) {
	srv := startServer(b, newTestHandler())
	c := dial(b, srv.addr)
	frame, _ := c.encode(metadataRequest(12))
	const batchSize = 16
	done := make(chan error, 1)
	go func() {
		var size [4]byte
		for range b.N {
			if _, err := io.ReadFull(c.br, size[:]); err != nil {
				done <- err
				return
			}
			if _, err := c.br.Discard(int(binary.BigEndian.Uint32(size[:]))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.ReportAllocs()
	b.ResetTimer()
	batch := make([]byte, 0, batchSize*len(frame))
	for sent := 0; sent < b.N; {
		batch = batch[:0]
		for n := min(batchSize, b.N-sent); n > 0; n-- {
			batch = append(batch, frame...)
		}
		sent += len(batch) / len(frame)
		c.write(batch)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
