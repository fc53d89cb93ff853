package broker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

// hostileRSSBound is how much the test process's resident memory (broker
// and clients together) may grow while 1,000 hostile connections are
// open: what their buffers may cost, not what they announce (up to 1 GB of
// half-sent frames, 200 MiB decompression bombs).
const hostileRSSBound = 384 << 20

func rss(t *testing.T) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// zstdBomb is a produce request for topic whose one batch claims one
// record and decompresses to size bytes of zeros.
func zstdBomb(t *testing.T, topic string, size int) []byte {
	var compressed bytes.Buffer
	enc, err := zstd.NewWriter(&compressed)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for written := 0; written < size; written += len(chunk) {
		if _, err := enc.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	h := record.Header{Attributes: 4, NumRecords: 1, BaseTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	batch := record.AppendBatch(nil, &h, compressed.Bytes())
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, 1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	var rf kmsg.RequestFormatter
	return rf.AppendRequest(nil, req, 1)
}

// TestHostileClients opens 1,000 connections at once that send what an
// attacker would: sizes beyond socket.request.max.bytes, array counts of
// two billion, frames announced at 1 MB and left half sent, zstd bombs,
// unknown API keys. The broker keeps serving a normal client, its memory
// stays bounded, and nothing is written.
func TestHostileClients(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "victim", 1, nil)
	createTopic(t, adm, "normal", 1, nil)

	bomb := zstdBomb(t, "victim", 200<<20)
	var hugeArray []byte
	{
		// Metadata v1: header, then a topics array count of 2^31-1.
		var rf kmsg.RequestFormatter
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 1
		frame := rf.AppendRequest(nil, req, 1)
		// The empty request ends with its array count (-1 for null).
		binary.BigEndian.PutUint32(frame[len(frame)-4:], 0x7fffffff)
		hugeArray = frame
	}
	kinds := []func(c net.Conn){
		func(c net.Conn) { c.Write([]byte{0x7f, 0xff, 0xff, 0xff, 0, 18, 0, 0}) },               // 2 GiB announced
		func(c net.Conn) { c.Write(hugeArray) },                                                 // 2^31-1 topics
		func(c net.Conn) { c.Write(append([]byte{0, 0x0f, 0x42, 0x40}, make([]byte, 100)...)) }, // 1,000,000 bytes announced, 100 sent
		func(c net.Conn) { c.Write(bomb) },                                                      // decompression bomb
		func(c net.Conn) { c.Write([]byte{0, 0, 0, 10, 0x27, 0x0f, 0, 0, 0, 0, 0, 1, 0, 0}) },   // unknown API key 9999
	}

	base := rss(t)
	var peak atomic.Int64
	peak.Store(base)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r := rss(t); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	const n = 1000
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	var dialFailures atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", b.Addr(), 10*time.Second)
			if err != nil {
				dialFailures.Add(1)
				return
			}
			conns[i] = c
			c.SetDeadline(time.Now().Add(60 * time.Second))
			kinds[i%len(kinds)](c)
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if f := dialFailures.Load(); f > 0 {
		t.Fatalf("%d of %d hostile connections could not connect", f, n)
	}

	// A normal client is served meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := newClient(t, b.Addr())
	for i := range 100 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "normal", Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatalf("a normal produce among hostile clients: %v", err)
		}
	}
	if got := consumeN(t, b.Addr(), 100, "normal"); len(got) != 100 {
		t.Fatalf("consumed %d", len(got))
	}

	// The bombs were answered (with an error) or their connections closed.
	answered := 0
	for i := 3; i < n; i += len(kinds) {
		conns[i].SetReadDeadline(time.Now().Add(30 * time.Second))
		var size [4]byte
		if _, err := io.ReadFull(bufio.NewReader(conns[i]), size[:]); err == nil {
			answered++
		}
	}
	close(stopSampling)
	<-sampled
	growth := peak.Load() - base
	t.Logf("RSS %d MiB before, peak %d MiB with %d hostile connections (+%d MiB); %d bombs answered", base>>20, peak.Load()>>20, n, growth>>20, answered)
	if growth > hostileRSSBound {
		t.Errorf("RSS grew by %d MiB, bound %d MiB", growth>>20, hostileRSSBound>>20)
	}

	b.partitionsMu.RLock()
	p := b.partitions[tp{"victim", 0}]
	b.partitionsMu.RUnlock()
	if hw := p.HighWatermark(); hw != 0 {
		t.Fatalf("the bombs wrote: victim's high watermark is %d", hw)
	}
	st := b.server.Stats()
	t.Logf("wire stats: %+v", st)
	if st.FrameErrors == 0 || st.DecodeErrors == 0 {
		t.Fatalf("hostile frames not refused as such: %+v", st)
	}
}
