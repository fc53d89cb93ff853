package wire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testHandler is a small real Handler: it answers ApiVersions, Metadata
// (with no brokers or topics) and Fetch, whose partitions are served as
// spliced regions of test files. Tests change behavior per request with
// intercept.
type testHandler struct {
	versions map[int16]VersionRange

	// regions are the records of fetched partitions, by partition number;
	// every topic has the same ones.
	regions map[int32]FileRegion

	// intercept, if set, may answer a request instead of the defaults.
	intercept func(ctx context.Context, c *Conn, req *Request) (Response, bool)

	handled atomic.Int64 // requests handled
	done    atomic.Int64 // Response.Done calls
}

func newTestHandler() *testHandler {
	return &testHandler{versions: map[int16]VersionRange{
		18: {0, 4},  // ApiVersions
		3:  {0, 12}, // Metadata
		1:  {4, 18}, // Fetch: v4 is the first with record batches (magic 2)
	}}
}

func (h *testHandler) Versions() map[int16]VersionRange { return h.versions }

func (h *testHandler) Handle(ctx context.Context, c *Conn, req *Request) Response {
	h.handled.Add(1)
	if h.intercept != nil {
		if resp, ok := h.intercept(ctx, c, req); ok {
			return resp
		}
	}
	done := func() { h.done.Add(1) }
	switch body := req.Body.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := body.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = ApiVersionsKeys(h.versions)
		return Response{Body: resp, Done: done}
	case *kmsg.MetadataRequest:
		return Response{Body: body.ResponseKind(), Done: done}
	case *kmsg.FetchRequest:
		resp, splices := h.fetch(body)
		return Response{Body: resp, Splices: splices, Done: done}
	}
	panic("testHandler: unexpected request " + kmsg.NameForKey(req.Key))
}

// fetch answers every requested partition with its region, spliced.
func (h *testHandler) fetch(req *kmsg.FetchRequest) (*kmsg.FetchResponse, []Splice) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	var splices []Splice
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			region, ok := h.regions[p.Partition]
			if !ok {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else {
				cookie := NewCookie()
				rp.RecordBatches = cookie[:]
				rp.HighWatermark, rp.LastStableOffset = 100, 100
				splices = append(splices, Splice{Cookie: cookie, Region: region})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, splices
}

// logBuffer collects a server's log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type testServer struct {
	*Server
	addr string
	logs *logBuffer
}

// startServer serves h on a loopback port until the test ends.
func startServer(t testing.TB, h Handler, configure ...func(*Config)) *testServer {
	t.Helper()
	logs := new(logBuffer)
	cfg := Config{
		Handler: h,
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range configure {
		f(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs)
		}
	})
	return &testServer{Server: s, addr: l.Addr().String(), logs: logs}
}

// rawClient speaks the Kafka framing by hand over one connection, so tests
// control exactly what is sent.
type rawClient struct {
	t    testing.TB
	conn net.Conn
	br   *bufio.Reader
	f    *kmsg.RequestFormatter
	corr int32
}

func dial(t testing.TB, addr string) *rawClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{t: t, conn: conn, br: bufio.NewReader(conn), f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw"))}
}

// encode frames req with the next correlation id.
func (c *rawClient) encode(req kmsg.Request) ([]byte, int32) {
	c.corr++
	return c.f.AppendRequest(nil, req, c.corr), c.corr
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) send(req kmsg.Request) int32 {
	c.t.Helper()
	b, corr := c.encode(req)
	c.write(b)
	return corr
}

// readFrame reads one response frame, without its size prefix.
func (c *rawClient) readFrame() ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		return nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c.br, buf)
	return buf, err
}

// read reads the response to req sent with corr and decodes it.
func (c *rawClient) read(req kmsg.Request, corr int32) kmsg.Response {
	c.t.Helper()
	buf, err := c.readFrame()
	if err != nil {
		c.t.Fatalf("reading response to %s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return decodeResponse(c.t, req, corr, buf)
}

// decodeResponse checks a response frame's header and decodes its body.
func decodeResponse(t testing.TB, req kmsg.Request, corr int32, buf []byte) kmsg.Response {
	t.Helper()
	if got := int32(binary.BigEndian.Uint32(buf)); got != corr {
		t.Fatalf("correlation id %d, want %d", got, corr)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	body := buf[4:]
	if resp.IsFlexible() && req.Key() != apiVersionsKey {
		if body[0] != 0 {
			t.Fatalf("response header has %d tagged fields", body[0])
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("decoding %s v%d response: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

// expectClosed reads until the server closes the connection.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	_, err := io.Copy(io.Discard, c.br)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "connection reset") {
		c.t.Fatalf("waiting for the server to close: %v", err)
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// makeBatch encodes a valid record batch (magic 2, uncompressed) holding
// values, with kmsg.
func makeBatch(baseOffset int64, values ...string) []byte {
	var records []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // Length 0 is one varint byte
		records = r.AppendTo(records)
	}
	b := kmsg.RecordBatch{
		FirstOffset:     baseOffset,
		Magic:           2,
		LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp:  1700000000000,
		MaxTimestamp:    1700000000000,
		ProducerID:      -1,
		ProducerEpoch:   -1,
		FirstSequence:   -1,
		NumRecords:      int32(len(values)),
		Records:         records,
	}
	b.Length = int32(len(b.AppendTo(nil)) - 12)
	enc := b.AppendTo(nil)
	b.CRC = int32(crc32.Checksum(enc[21:], castagnoli))
	return b.AppendTo(nil)
}

// readBatches decodes the values in a run of record batches, checking each
// batch's CRC.
func readBatches(t testing.TB, data []byte) []string {
	t.Helper()
	var values []string
	for len(data) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(data); err != nil {
			t.Fatalf("decoding record batch: %v", err)
		}
		n := 12 + int(b.Length)
		if got := crc32.Checksum(data[21:n], castagnoli); int32(got) != b.CRC {
			t.Fatalf("batch at offset %d: CRC %x, want %x", b.FirstOffset, got, uint32(b.CRC))
		}
		records := b.Records
		for i := int32(0); i < b.NumRecords; i++ {
			var r kmsg.Record
			if err := r.ReadFrom(records); err != nil {
				t.Fatalf("decoding record: %v", err)
			}
			length, m := binary.Varint(records)
			records = records[m+int(length):]
			values = append(values, string(r.Value))
		}
		data = data[n:]
	}
	return values
}

// writeTestFile writes data at the start of a new file and returns it open.
func writeTestFile(t testing.TB, data []byte) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "00000000000000000000.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	return f
}

// memFile is a File without a descriptor, like a file of an in-memory
// file system; wire must copy it.
type memFile struct{ *bytes.Reader }

func (memFile) Fd() uintptr { return NoFd }
