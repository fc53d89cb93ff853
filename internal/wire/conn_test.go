package wire

import (
	"context"
	"encoding/binary"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

func metadataRequest(version int16) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = version
	return req
}

func apiVersionsRequest(version int16) *kmsg.ApiVersionsRequest {
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = version
	req.ClientSoftwareName, req.ClientSoftwareVersion = "raw", "1"
	return req
}

// TestPipelining: requests written back to back in one write are all
// answered, in order, at their own versions.
func TestPipelining(t *testing.T) {
	srv := startServer(t, newTestHandler())
	c := dial(t, srv.addr)
	type sent struct {
		req  kmsg.Request
		corr int32
	}
	var batch []byte
	var all []sent
	for i := range 300 {
		var req kmsg.Request
		if i%3 == 0 {
			req = apiVersionsRequest(int16(i % 5))
		} else {
			req = metadataRequest(int16(i % 13))
		}
		b, corr := c.encode(req)
		batch = append(batch, b...)
		all = append(all, sent{req, corr})
	}
	c.write(batch)
	for _, s := range all {
		c.read(s.req, s.corr) // checks the correlation id, so the order
	}
}

// TestDeferredKeepsOrder: while a deferred response waits, later requests
// are handled, but their responses are written only after it.
func TestDeferredKeepsOrder(t *testing.T) {
	h := newTestHandler()
	release := make(chan struct{})
	var handled []int32
	var mu sync.Mutex
	h.intercept = func(ctx context.Context, _ *Conn, req *Request) (Response, bool) {
		mu.Lock()
		handled = append(handled, req.CorrelationID)
		mu.Unlock()
		if req.CorrelationID%10 != 1 {
			return Response{}, false
		}
		// Every tenth request waits, like an acks=all produce.
		return Response{Deferred: func() Response {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return Response{Body: req.Body.ResponseKind()}
		}}, true
	}
	var written sync.Map
	srv := startServer(t, h, func(c *Config) {
		c.Observe = func(o Observation) { written.Store(o.Key, true) }
	})
	c := dial(t, srv.addr)
	var reqs []kmsg.Request
	var batch []byte
	for i := range 30 {
		req := metadataRequest(int16(i % 13))
		b, _ := c.encode(req)
		batch = append(batch, b...)
		reqs = append(reqs, req)
	}
	c.write(batch)
	poll.Until(t, 10*time.Second, "all requests handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 30
	})
	if _, ok := written.Load(int16(3)); ok {
		t.Fatal("a response was written before the deferred one ahead of it")
	}
	if !slices.IsSorted(handled) {
		t.Fatalf("handled out of order: %v", handled)
	}
	close(release)
	for i, req := range reqs {
		c.read(req, int32(i+1))
	}
}

// TestNoResponseAndClose: an acks=0 style request writes nothing, and a
// Close response is written before the connection closes.
func TestNoResponseAndClose(t *testing.T) {
	h := newTestHandler()
	h.intercept = func(_ context.Context, _ *Conn, req *Request) (Response, bool) {
		switch req.CorrelationID {
		case 1:
			return Response{NoResponse: true}, true
		case 3:
			return Response{Body: req.Body.ResponseKind(), Close: true}, true
		}
		return Response{}, false
	}
	srv := startServer(t, h)
	c := dial(t, srv.addr)
	c.send(metadataRequest(1))
	req2 := metadataRequest(9)
	c.send(req2)
	req3 := metadataRequest(12)
	c.send(req3)
	c.send(metadataRequest(12)) // never read: the server closes first
	c.read(req2, 2)
	c.read(req3, 3)
	c.expectClosed()
}

// TestTrailingBytes: bytes after a decoded body are ignored, as Kafka does.
func TestTrailingBytes(t *testing.T) {
	srv := startServer(t, newTestHandler())
	c := dial(t, srv.addr)
	req := metadataRequest(12)
	b, corr := c.encode(req)
	b = append(b, 1, 2, 3, 4, 5)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	c.write(b)
	c.read(req, corr)
}

// TestOversizeFrame: frames whose size is out of bounds close the
// connection before a buffer of that size exists.
func TestOversizeFrame(t *testing.T) {
	srv := startServer(t, newTestHandler())
	for _, size := range []int32{DefaultMaxRequestSize + 1, 1<<31 - 1, -1, -1 << 31, 0, 3, minFrameSize - 1} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c := dial(t, srv.addr)
		c.write(binary.BigEndian.AppendUint32(nil, uint32(size)))
		c.expectClosed()
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
			t.Errorf("size %d: %d bytes allocated", size, grew)
		}
	}
	if st := srv.Stats(); st.FrameErrors != 7 {
		t.Errorf("FrameErrors = %d, want 7", st.FrameErrors)
	}
	if !strings.Contains(srv.logs.String(), "refusing frame") {
		t.Error("no log line for a refused frame")
	}
}

// TestLargeFrameGrowsAsItArrives: a frame within the limit that announces
// 100 MiB but sends a little costs what it sent, not what it announced.
func TestLargeFrameGrowsAsItArrives(t *testing.T) {
	srv := startServer(t, newTestHandler())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c := dial(t, srv.addr)
	c.write(binary.BigEndian.AppendUint32(nil, DefaultMaxRequestSize))
	c.write(make([]byte, 3<<20))
	c.conn.Close()
	poll.Until(t, 10*time.Second, "the connection to close", func() bool { return srv.Stats().ConnectionsClosed == 1 })
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Errorf("%d bytes allocated for a 3 MiB partial frame", grew)
	}
}

// TestBadRequests: each bad request closes its connection with a log line
// naming it, and the server goes on serving other connections.
func TestBadRequests(t *testing.T) {
	frame := func(body ...[]byte) []byte {
		b := slices.Concat(body...)
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	}
	header := func(key, version int16, corr int32) []byte {
		h := binary.BigEndian.AppendUint16(nil, uint16(key))
		h = binary.BigEndian.AppendUint16(h, uint16(version))
		h = binary.BigEndian.AppendUint32(h, uint32(corr))
		return binary.BigEndian.AppendUint16(h, 0xffff) // null client id
	}
	tests := []struct {
		name    string
		frame   []byte
		log     string
		counter func(Stats) uint64
	}{
		{
			name:    "garbage metadata body",
			frame:   frame(header(3, 1, 7), []byte{0x7f, 0xff, 0xff, 0xff, 1, 2}),
			log:     "api=Metadata",
			counter: func(s Stats) uint64 { return s.DecodeErrors },
		},
		{
			name:    "truncated client id",
			frame:   frame(header(3, 1, 7)[:8], []byte{0, 9, 'a'}),
			log:     "malformed request header",
			counter: func(s Stats) uint64 { return s.DecodeErrors },
		},
		{
			name:    "bad header tags",
			frame:   frame(header(3, 12, 7), []byte{5}),
			log:     "malformed request header",
			counter: func(s Stats) uint64 { return s.DecodeErrors },
		},
		{
			name:    "unknown api key",
			frame:   frame(header(1000, 0, 7), make([]byte, 10)),
			log:     "unknown or unsupported API key",
			counter: func(s Stats) uint64 { return s.Unsupported },
		},
		{
			name:    "key the handler does not list",
			frame:   frame(header(0, 3, 7), make([]byte, 10)),
			log:     "api=Produce",
			counter: func(s Stats) uint64 { return s.Unsupported },
		},
		{
			name:    "metadata version too new",
			frame:   kmsg.NewRequestFormatter().AppendRequest(nil, metadataRequest(13), 7),
			log:     "Metadata v13, supported 0-12",
			counter: func(s Stats) uint64 { return s.Unsupported },
		},
		{
			name:    "fetch version too old",
			frame:   kmsg.NewRequestFormatter().AppendRequest(nil, &kmsg.FetchRequest{Version: 3}, 7),
			log:     "Fetch v3, supported 4-18",
			counter: func(s Stats) uint64 { return s.Unsupported },
		},
	}
	srv := startServer(t, newTestHandler())
	other := dial(t, srv.addr)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.counter(srv.Stats())
			c := dial(t, srv.addr)
			c.write(tc.frame)
			c.expectClosed()
			if got := tc.counter(srv.Stats()); got != before+1 {
				t.Errorf("counter went from %d to %d", before, got)
			}
			if !strings.Contains(srv.logs.String(), tc.log) {
				t.Errorf("log lacks %q", tc.log)
			}
			req := apiVersionsRequest(3)
			other.read(req, other.send(req))
		})
	}
}

// TestUnsupportedApiVersions: an ApiVersions request at a version we do
// not speak gets Kafka's answer, a v0 response with UNSUPPORTED_VERSION and
// our ApiVersions range, and the connection stays open.
func TestUnsupportedApiVersions(t *testing.T) {
	srv := startServer(t, newTestHandler())
	c := dial(t, srv.addr)
	for _, version := range []int16{5, 100} {
		req := apiVersionsRequest(version)
		b, corr := c.encode(req)
		c.write(b)
		buf, err := c.readFrame()
		if err != nil {
			t.Fatal(err)
		}
		// Header v0 and a v0 body: the client reads the error code at
		// byte 1 of the body before it knows our versions.
		resp := decodeResponse(t, apiVersionsRequest(0), corr, buf).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("v%d: error %d, want UNSUPPORTED_VERSION", version, resp.ErrorCode)
		}
		want := []kmsg.ApiVersionsResponseApiKey{{ApiKey: 18, MinVersion: 0, MaxVersion: 4}}
		if !slices.EqualFunc(resp.ApiKeys, want, func(a, b kmsg.ApiVersionsResponseApiKey) bool {
			return a.ApiKey == b.ApiKey && a.MinVersion == b.MinVersion && a.MaxVersion == b.MaxVersion
		}) {
			t.Fatalf("v%d: ApiKeys %+v, want %+v", version, resp.ApiKeys, want)
		}
	}
	req := apiVersionsRequest(4)
	resp := c.read(req, c.send(req)).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 || len(resp.ApiKeys) != 3 {
		t.Fatalf("after downgrading: error %d, %d keys", resp.ErrorCode, len(resp.ApiKeys))
	}
}

// TestPanics: a panic in Handle, Deferred or Done closes that connection
// with a log line naming the request; the server goes on.
func TestPanics(t *testing.T) {
	for _, where := range []string{"Handle", "Deferred", "Done"} {
		t.Run(where, func(t *testing.T) {
			h := newTestHandler()
			h.intercept = func(_ context.Context, _ *Conn, req *Request) (Response, bool) {
				if req.ClientID != "panic" {
					return Response{}, false
				}
				switch where {
				case "Handle":
					panic("boom")
				case "Deferred":
					return Response{Deferred: func() Response { panic("boom") }}, true
				default:
					return Response{Body: req.Body.ResponseKind(), Done: func() { panic("boom") }}, true
				}
			}
			srv := startServer(t, h)
			other := dial(t, srv.addr)
			c := dial(t, srv.addr)
			c.f = kmsg.NewRequestFormatter(kmsg.FormatterClientID("panic"))
			c.send(metadataRequest(4))
			c.expectClosed()
			if st := srv.Stats(); st.Panics != 1 {
				t.Errorf("Panics = %d", st.Panics)
			}
			logs := srv.logs.String()
			for _, want := range []string{"panic in " + where, "api=Metadata", "api_version=4", "correlation_id=1", "client_id=panic", "boom"} {
				if !strings.Contains(logs, want) {
					t.Errorf("log lacks %q", want)
				}
			}
			req := metadataRequest(12)
			other.read(req, other.send(req))
		})
	}
}

// TestBadResponses: handler mistakes close the connection, not the server.
func TestBadResponses(t *testing.T) {
	f := writeTestFile(t, make([]byte, 100))
	tests := map[string]func(req *Request) Response{
		"no body":   func(*Request) Response { return Response{} },
		"wrong key": func(*Request) Response { return Response{Body: kmsg.NewPtrApiVersionsResponse()} },
		"missing cookie": func(req *Request) Response {
			return Response{Body: req.Body.ResponseKind(), Splices: []Splice{{Cookie: NewCookie(), Region: FileRegion{File: f, Len: 1}}}}
		},
		"region past end of file": func(req *Request) Response {
			cookie := NewCookie()
			resp := kmsg.NewPtrFetchResponse()
			rt := kmsg.NewFetchResponseTopic()
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.RecordBatches = cookie[:]
			rt.Partitions = append(rt.Partitions, rp)
			resp.Topics = append(resp.Topics, rt)
			return Response{Body: resp, Splices: []Splice{{Cookie: cookie, Region: FileRegion{File: f, Pos: 50, Len: 100}}}}
		},
		"deferred deferred": func(req *Request) Response {
			return Response{Deferred: func() Response { return Response{Deferred: func() Response { return Response{} }} }}
		},
	}
	for name, respond := range tests {
		t.Run(name, func(t *testing.T) {
			h := newTestHandler()
			h.intercept = func(_ context.Context, _ *Conn, req *Request) (Response, bool) {
				if req.Key != 1 {
					return Response{}, false
				}
				return respond(req), true
			}
			for _, copySplices := range []bool{false, true} {
				srv := startServer(t, h, func(c *Config) { c.CopySplices = copySplices })
				c := dial(t, srv.addr)
				c.send(&kmsg.FetchRequest{Version: 11})
				// The server may have written part of the frame before
				// the region came up short; it must not finish it.
				buf, err := c.readFrame()
				if err == nil {
					t.Fatalf("got a complete %d-byte response", len(buf))
				}
				c.expectClosed()
			}
		})
	}
}

// TestShutdown: Shutdown closes idle connections at once, answers what was
// already read (deferred responses included), then returns.
func TestShutdown(t *testing.T) {
	h := newTestHandler()
	release := make(chan struct{})
	h.intercept = func(_ context.Context, _ *Conn, req *Request) (Response, bool) {
		if req.ClientID != "slow" {
			return Response{}, false
		}
		return Response{Deferred: func() Response {
			<-release
			return Response{Body: req.Body.ResponseKind()}
		}}, true
	}
	srv := startServer(t, h)
	idle := dial(t, srv.addr)
	busy := dial(t, srv.addr)
	busy.f = kmsg.NewRequestFormatter(kmsg.FormatterClientID("slow"))
	req := metadataRequest(7)
	corr := busy.send(req)
	poll.Until(t, 10*time.Second, "the request to be handled", func() bool { return h.handled.Load() == 1 })

	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	idle.expectClosed()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a response pending", err)
	default:
	}
	close(release)
	busy.read(req, corr)
	busy.expectClosed()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestShutdownTimesOut: when ctx ends first, Shutdown closes connections,
// cancels handler contexts and returns ctx's error.
func TestShutdownTimesOut(t *testing.T) {
	h := newTestHandler()
	h.intercept = func(ctx context.Context, _ *Conn, req *Request) (Response, bool) {
		return Response{Deferred: func() Response {
			<-ctx.Done()
			return Response{Body: req.Body.ResponseKind()}
		}}, true
	}
	srv := startServer(t, h)
	c := dial(t, srv.addr)
	c.send(metadataRequest(7))
	poll.Until(t, 10*time.Second, "the request to be handled", func() bool { return h.handled.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Shutdown(ctx); err != context.Canceled {
		t.Fatalf("Shutdown = %v", err)
	}
	c.expectClosed()
	poll.Until(t, 10*time.Second, "the connection to finish", func() bool { return srv.Stats().ConnectionsClosed == 1 })
}

// TestIdleTimeout: an idle connection is closed; one waiting for its own
// deferred response is not idle.
func TestIdleTimeout(t *testing.T) {
	h := newTestHandler()
	release := make(chan struct{})
	h.intercept = func(_ context.Context, _ *Conn, req *Request) (Response, bool) {
		if req.ClientID != "slow" {
			return Response{}, false
		}
		return Response{Deferred: func() Response {
			<-release
			return Response{Body: req.Body.ResponseKind()}
		}}, true
	}
	// Long enough that the busy connection's request arrives well within
	// it on a loaded machine; the idle connection is closed after it.
	srv := startServer(t, h, func(c *Config) { c.IdleTimeout = time.Second })
	busy := dial(t, srv.addr)
	busy.f = kmsg.NewRequestFormatter(kmsg.FormatterClientID("slow"))
	req := metadataRequest(7)
	corr := busy.send(req)
	idle := dial(t, srv.addr)
	idle.expectClosed()
	if !strings.Contains(srv.logs.String(), "connection idle") {
		t.Error("no log line for the idle connection")
	}
	close(release)
	busy.read(req, corr)
	busy.read(req, busy.send(req))
}

// TestObserve: the metrics hook sees each request with plausible numbers.
func TestObserve(t *testing.T) {
	var mu sync.Mutex
	var seen []Observation
	srv := startServer(t, newTestHandler(), func(c *Config) {
		c.Observe = func(o Observation) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, o)
		}
	})
	c := dial(t, srv.addr)
	req := metadataRequest(12)
	b, corr := c.encode(req)
	c.write(b)
	c.read(req, corr)
	poll.Until(t, 10*time.Second, "an observation", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
	o := seen[0]
	if o.Key != 3 || o.Version != 12 || o.ClientID != "raw" || o.RequestBytes != len(b)-4 || o.ResponseBytes < 8 || o.Err != nil {
		t.Fatalf("observation %+v", o)
	}
	if o.TotalTime <= 0 || o.TotalTime < o.LocalTime+o.SendTime {
		t.Fatalf("times %+v", o)
	}
}

// TestConnValue: the value slot keeps per-connection state between
// requests and is not shared between connections.
func TestConnValue(t *testing.T) {
	h := newTestHandler()
	h.intercept = func(_ context.Context, c *Conn, req *Request) (Response, bool) {
		n, _ := c.Value().(int)
		c.SetValue(n + 1)
		resp := kmsg.NewPtrMetadataResponse()
		resp.Version = req.Version
		id := strings.Repeat("x", n+1) // the count, in the cluster id
		resp.ClusterID = &id
		return Response{Body: resp}, true
	}
	srv := startServer(t, h)
	for range 2 {
		c := dial(t, srv.addr)
		for i := range 3 {
			req := metadataRequest(12)
			resp := c.read(req, c.send(req)).(*kmsg.MetadataResponse)
			if got := len(*resp.ClusterID); got != i+1 {
				t.Fatalf("request %d saw count %d", i+1, got)
			}
		}
	}
}
