package broker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

// BenchmarkProduce measures the broker's CPU per record for produce
// requests of one batch of 100 records of 100 bytes, uncompressed, LZ4
// and zstd, compressed as franz-go compresses them (LZ4 frames of the
// library's default blocks, zstd frames of a 64 KiB window). The requests
// are built once and sent, acks=1, over four connections to four
// partitions, eight in flight on each, so that the client costs next to
// nothing: cpu-ns/record is this process's user+system CPU (getrusage)
// per record, nearly all of it the broker's. b.N is records.
//
//	go test ./internal/broker -run XXX -bench 'Produce$' -count 5
func BenchmarkProduce(b *testing.B) {
	for _, codec := range []struct {
		name  string
		codec int
	}{{"none", record.CodecNone}, {"lz4", record.CodecLz4}, {"zstd", record.CodecZstd}} {
		b.Run(codec.name, func(b *testing.B) { benchProduce(b, codec.codec, nil) })
	}
}

// BenchmarkProduceDurable is BenchmarkProduce, uncompressed, with
// log.flush.interval.messages=1: every append is fsynced before it is
// answered, and the eight requests in flight on each partition can share
// fsyncs (group commit).
//
//	go test ./internal/broker -run XXX -bench 'ProduceDurable$' -count 5
func BenchmarkProduceDurable(b *testing.B) {
	benchProduce(b, record.CodecNone, map[string]string{"log.flush.interval.messages": "1"})
}

// BenchmarkProduceRolling is BenchmarkProduce, uncompressed, with
// log.segment.bytes=1048576: each partition rolls every ~10,000 records,
// so the figure includes the rolls and their segments' background flush
// (the storage Manager's roll flusher), which must not slow the appends.
//
//	go test ./internal/broker -run XXX -bench 'ProduceRolling$' -benchtime 200000x
func BenchmarkProduceRolling(b *testing.B) {
	benchProduce(b, record.CodecNone, map[string]string{"log.segment.bytes": "1048576"})
}

func benchProduce(b *testing.B, codec int, settings map[string]string) {
	benchProduceWith(b, codec, settings, nil)
}

// benchProduceWith is benchProduce with setup run on the broker before
// the clock starts (nil: none).
func benchProduceWith(b *testing.B, codec int, settings map[string]string, setup func(*testBroker)) {
	const (
		partitions = 4
		perBatch   = 100
	)
	tb := startBroker(b, settings)
	createTopic(b, newAdmin(b, tb.Addr()), "bench", partitions, nil)
	if setup != nil {
		setup(tb)
	}
	batch := benchBatch(b, codec, perBatch)
	frames := make([][]byte, partitions)
	for p := range frames {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 9, 1, 30_000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "bench"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = int32(p), batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		var rh kmsg.RequestFormatter
		frames[p] = rh.AppendRequest(nil, req, 1)
	}
	conns := make([]net.Conn, partitions)
	for p := range conns {
		c, err := net.Dial("tcp", tb.Addr())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[p] = c
		sendAll(b, c, frames[p], 1) // warm the connection and the partition
	}
	requests := (b.N + perBatch - 1) / perBatch
	b.SetBytes(100)
	b.ResetTimer()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	for p := range partitions {
		n := requests / partitions
		if p < requests%partitions {
			n++
		}
		wg.Go(func() { sendAll(b, conns[p], frames[p], n) })
	}
	wg.Wait()
	cpu := cpuTime() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(requests*perBatch), "cpu-ns/record")
}

// sendAll sends frame n times on c, inFlight at a time, and checks each
// response.
func sendAll(b *testing.B, c net.Conn, frame []byte, n int) {
	const inFlight = 8
	c.SetDeadline(time.Now().Add(10 * time.Minute))
	w := bufio.NewWriterSize(c, 8*len(frame))
	r := bufio.NewReaderSize(c, 64<<10)
	var size [4]byte
	var buf []byte
	for sent, got := 0, 0; got < n; {
		for sent < n && sent-got < inFlight {
			w.Write(frame)
			sent++
		}
		if err := w.Flush(); err != nil {
			b.Error(err)
			return
		}
		for got < sent {
			if _, err := io.ReadFull(r, size[:]); err != nil {
				b.Error(err)
				return
			}
			buf = append(buf[:0], make([]byte, binary.BigEndian.Uint32(size[:]))...)
			if _, err := io.ReadFull(r, buf); err != nil {
				b.Error(err)
				return
			}
			resp := kmsg.NewPtrProduceResponse()
			resp.Version = 9
			if err := resp.ReadFrom(buf[5:]); err != nil { // correlation id, empty tags
				b.Error(err)
				return
			}
			if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
				b.Errorf("produce error %d", code)
				return
			}
			got++
		}
	}
}

// benchBatch returns a producer batch of n records of 100 random lowercase
// letters, compressed as franz-go compresses.
func benchBatch(b *testing.B, codec, n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]record.Rec, n)
	now := time.Now().UnixMilli()
	for i := range recs {
		v := make([]byte, 100)
		for j := range v {
			v[j] = byte('a' + rng.IntN(26))
		}
		recs[i] = record.Rec{Value: v, Timestamp: now}
	}
	plain := record.Build(nil, recs)
	if codec == record.CodecNone {
		return plain
	}
	var comp []byte
	switch codec {
	case record.CodecLz4:
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		w.Write(plain[record.HeaderSize:])
		w.Close()
		comp = buf.Bytes()
	case record.CodecZstd:
		enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(64<<10), zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
		if err != nil {
			b.Fatal(err)
		}
		comp = enc.EncodeAll(plain[record.HeaderSize:], nil)
	default:
		b.Fatal(fmt.Sprint("codec ", codec))
	}
	h, err := record.ParseHeader(plain)
	if err != nil {
		b.Fatal(err)
	}
	h.Attributes |= int16(codec)
	return record.AppendBatch(nil, &h, comp)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
