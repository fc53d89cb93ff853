package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	readBufferSize  = 16 << 10
	writeBufferSize = 32 << 10
	// maxKeptEncodeBuffer is the largest response encoding buffer a
	// connection keeps between responses.
	maxKeptEncodeBuffer = 256 << 10
)

// Conn is one client connection. Handlers receive it with each request;
// its methods may be called from any goroutine.
type Conn struct {
	server   *Server
	id       uint64
	nc       net.Conn
	log      *slog.Logger
	listener string // ListenerConfig.Name
	ip       string // counted against max.connections.per.ip

	// maxRequestSize is the largest frame the reader accepts now: the
	// server's limit, or a smaller one the handler sets (SASL before
	// authentication).
	maxRequestSize atomic.Int32

	ctx    context.Context
	cancel context.CancelFunc

	// sock is the raw TCP socket for sendfile(2); nil when spliced regions
	// must be copied (TLS, non-TCP, Config.CopySplices).
	sock syscall.RawConn

	// queue carries handled requests from the reader to the writer, in
	// order. The reader closes it when it stops.
	queue chan *inflight
	// pending counts requests read and not yet answered; a connection
	// with responses pending is not idle.
	pending atomic.Int64

	// Owned by the reader goroutine.
	br           *bufio.Reader
	readDeadline time.Time
	lastClientID string

	// Owned by the writer goroutine.
	bw     *bufio.Writer
	enc    []byte
	points []splicePoint

	// stopping is set when the reader must read no further requests.
	stopping atomic.Bool
	// rawTokens makes the reader pass frames on as RawTokenKey requests.
	rawTokens atomic.Bool
	// mutedUntil (Unix nanoseconds) is when the reader may read the next
	// request of a throttled client; see Throttle.
	mutedUntil atomic.Int64

	mu    sync.Mutex // guards value, and deadline changes against stopping
	value any
}

// inflight is one request from decoding to its response being written.
type inflight struct {
	req         Request
	frame       *frame
	resp        Response
	respVersion int16
	localTime   time.Duration
	ready       time.Time // when resp was ready to be written
}

func newConn(s *Server, nc net.Conn) *Conn {
	c := &Conn{
		server: s,
		id:     s.nextConnID.Add(1),
		nc:     nc,
		queue:  make(chan *inflight, s.cfg.MaxInFlight),
		br:     bufio.NewReaderSize(nc, readBufferSize),
		bw:     bufio.NewWriterSize(nc, writeBufferSize),
	}
	c.maxRequestSize.Store(s.cfg.MaxRequestSize)
	c.log = s.log.With("conn", c.id, "remote", addrString(nc.RemoteAddr()))
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	if tcp, ok := nc.(*net.TCPConn); ok && canSendfile && !s.cfg.CopySplices {
		if raw, err := tcp.SyscallConn(); err == nil {
			c.sock = raw
		}
	}
	return c
}

// ID is unique among the server's connections.
func (c *Conn) ID() uint64 { return c.id }

// Listener is the name of the listener the connection came in on (see
// Server.ServeListener); "" for Serve.
func (c *Conn) Listener() string { return c.listener }

// SetMaxRequestSize changes the largest request frame the connection
// accepts from its next request on, capped at Config.MaxRequestSize. A
// handler lowers it before a client has authenticated, so that an
// unauthenticated client cannot make the broker allocate large frames
// (Kafka's sasl.server.max.receive.size), and raises it after.
func (c *Conn) SetMaxRequestSize(n int32) {
	c.maxRequestSize.Store(max(minFrameSize, min(n, c.server.cfg.MaxRequestSize)))
}

// SetRawTokens makes the reader pass the frames that follow to the
// handler undecoded, as RawTokenKey requests (on) or decode them as Kafka
// requests again (off), from the next frame on. A handler calls it while
// handling the request after which the mode changes: SaslHandshake v0,
// and the last raw token of the exchange.
func (c *Conn) SetRawTokens(on bool) { c.rawTokens.Store(on) }

// Throttle mutes the connection for d: the reader reads no further
// request until d has passed, as Kafka mutes a channel whose client is
// over its quota (KIP-219: the response, carrying throttle_time_ms, is
// sent at once; the client is expected to wait that long, and the broker
// does not read what it sends meanwhile).
func (c *Conn) Throttle(d time.Duration) {
	if d <= 0 {
		return
	}
	until := time.Now().Add(d).UnixNano()
	for {
		cur := c.mutedUntil.Load()
		if cur >= until || c.mutedUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// waitMuted waits out a Throttle; false when the connection closed first.
func (c *Conn) waitMuted() bool {
	d := time.Until(time.Unix(0, c.mutedUntil.Load()))
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// RemoteAddr is the client's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr is the address the client connected to.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// TLS returns the connection's TLS state, or nil if it is not TLS.
func (c *Conn) TLS() *tls.ConnectionState {
	if tc, ok := c.nc.(tlsConn); ok {
		st := tc.ConnectionState()
		return &st
	}
	return nil
}

// Value returns what SetValue last stored: per-connection state of the
// handler's (the SASL exchange, the principal).
func (c *Conn) Value() any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.value
}

// SetValue stores v in the connection's value slot.
func (c *Conn) SetValue(v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.value = v
}

// Close closes the connection now: responses not yet written are dropped
// (their Deferred and Done are still called) and the context given to
// Handle is canceled.
func (c *Conn) Close() error {
	c.stopping.Store(true)
	c.cancel()
	return c.nc.Close()
}

// stopReading makes the reader stop before the next request, for Shutdown.
// Requests already read are still answered.
func (c *Conn) stopReading() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopping.Store(true)
	_ = c.nc.SetReadDeadline(time.Unix(1, 0)) // wakes a blocked read
}

// armReadDeadline pushes the idle deadline forward when it has come within
// 7/8 of the timeout, so a busy connection does not pay for a deadline
// change on every request.
func (c *Conn) armReadDeadline() {
	idle := c.server.cfg.IdleTimeout
	if idle <= 0 {
		return
	}
	now := time.Now()
	if c.readDeadline.Sub(now) >= idle-idle/8 {
		return
	}
	c.readDeadline = now.Add(idle)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopping.Load() { // after stopReading, its deadline must stay
		_ = c.nc.SetReadDeadline(c.readDeadline)
	}
}

// serve runs the reader (on the calling goroutine) and the writer.
func (c *Conn) serve() {
	c.log.Debug("wire: connection opened", "local", addrString(c.nc.LocalAddr()))
	if tc, ok := c.nc.(tlsConn); ok && !c.handshake(tc) {
		c.Close()
		c.server.untrack(c)
		return
	}
	go c.writeLoop()
	defer close(c.queue)
	for {
		it, ok := c.readRequest()
		if !ok {
			return
		}
		c.pending.Add(1)
		c.queue <- it
		if it.resp.Close {
			c.stopping.Store(true)
			return
		}
	}
}

// handshake runs a TLS connection's handshake before its first request,
// within the idle timeout (a client that connects and says nothing is
// idle), so that a refused certificate is logged as such.
func (c *Conn) handshake(tc tlsConn) bool {
	ctx := c.ctx
	if idle := c.server.cfg.IdleTimeout; idle > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, idle)
		defer cancel()
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		// Kafka logs a failed SSL handshake as a failed authentication.
		c.log.Info("wire: TLS handshake failed; closing connection", "listener", c.listener, "err", err)
		return false
	}
	return true
}

// readRequest reads, decodes and handles the next request. It returns false
// when the connection must read no further: the client left, the server is
// shutting down, or the request was bad (logged here).
func (c *Conn) readRequest() (*inflight, bool) {
	s := c.server
	if !c.waitMuted() {
		return nil, false
	}
	for {
		if c.stopping.Load() {
			return nil, false
		}
		c.armReadDeadline()
		_, err := c.br.Peek(4)
		if err == nil {
			break
		}
		if isTimeout(err) && !c.stopping.Load() && c.pending.Load() > 0 {
			continue // waiting on our own responses is not idling
		}
		c.readFailed(err)
		return nil, false
	}
	budgeted, ok := c.takeBudget()
	if !ok {
		return nil, false
	}
	defer c.releaseBudget(budgeted) // once Handle has returned
	f, err := readFrame(c.br, c.maxRequestSize.Load())
	if err != nil {
		c.readFailed(err)
		return nil, false
	}
	it := &inflight{frame: f}
	it.req.Received = time.Now()
	if c.rawTokens.Load() {
		it.req.Key, it.req.Raw, it.req.Size = RawTokenKey, f.buf, len(f.buf)
		resp, ok := c.handle(it)
		if !ok {
			return nil, false
		}
		it.resp, it.ready = resp, time.Now()
		return it, true
	}
	if err := c.decode(f.buf, &it.req); err != nil {
		if errors.Is(err, errUnsupported) && it.req.Key == apiVersionsKey {
			s.stats.unsupported.Add(1)
			c.log.Debug("wire: answering unsupported ApiVersions version", requestAttrs(&it.req), "err", err)
			it.resp = Response{Body: unsupportedApiVersions(s.versions)}
			it.ready = time.Now()
			return it, true // respVersion 0
		}
		putFrame(f)
		c.decodeFailed(&it.req, err)
		return nil, false
	}
	c.lastClientID = it.req.ClientID
	it.respVersion = it.req.Version
	s.stats.requests.Add(1)
	resp, ok := c.handle(it)
	if !ok {
		return nil, false // the frame is not recycled: the handler may hold it
	}
	it.resp = resp
	it.ready = time.Now()
	return it, true
}

// takeBudget takes the next frame's size from queued.max.request.bytes,
// waiting while it is spent; a size outside the frame limits takes
// nothing (readFrame refuses it). It returns what it took.
func (c *Conn) takeBudget() (int64, bool) {
	b := c.server.budget
	if b == nil {
		return 0, true
	}
	head, err := c.br.Peek(4)
	if err != nil {
		return 0, true // readFrame reports it
	}
	size := int64(int32(binary.BigEndian.Uint32(head)))
	if size < minFrameSize || size > int64(c.maxRequestSize.Load()) {
		return 0, true
	}
	if !b.acquire(c.ctx, size) {
		return 0, false
	}
	return size, true
}

func (c *Conn) releaseBudget(n int64) {
	if n > 0 {
		c.server.budget.release(n)
	}
}

// decode decodes a frame, turning a panic in kmsg into an error.
func (c *Conn) decode(buf []byte, req *Request) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.server.stats.panics.Add(1)
			err = fmt.Errorf("%w: panic: %v", errMalformedBody, r)
			c.log.Error("wire: panic decoding request", requestAttrs(req), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	return decodeRequest(buf, c.server.versions, c.lastClientID, req)
}

// handle calls the handler, recovering a panic.
func (c *Conn) handle(it *inflight) (resp Response, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			c.panicked(&it.req, "Handle", r)
			ok = false
		}
	}()
	start := time.Now()
	resp = c.server.handler.Handle(c.ctx, c, &it.req)
	it.localTime = time.Since(start)
	return resp, true
}

// panicked logs a recovered panic with the request and closes the
// connection.
func (c *Conn) panicked(req *Request, where string, r any) {
	c.server.stats.panics.Add(1)
	c.log.Error("wire: panic in "+where+"; closing connection", requestAttrs(req), "panic", r, "stack", string(debug.Stack()))
	c.Close()
}

// readFailed logs why the reader stopped.
func (c *Conn) readFailed(err error) {
	var sizeErr *frameSizeError
	switch {
	case c.stopping.Load():
		// Shutdown, Close, or a Close response: nothing to report.
	case errors.As(err, &sizeErr):
		c.server.stats.frameErrors.Add(1)
		c.log.Warn("wire: refusing frame; closing connection", "err", err)
	case err == io.EOF || errors.Is(err, net.ErrClosed):
		// The client closed the connection between requests.
	case isTimeout(err):
		c.log.Debug("wire: connection idle; closing", "timeout", c.server.cfg.IdleTimeout)
	default:
		c.log.Debug("wire: read failed; closing connection", "err", err)
	}
}

// decodeFailed counts and logs a request that could not be decoded or is
// not supported.
func (c *Conn) decodeFailed(req *Request, err error) {
	if errors.Is(err, errUnknownKey) || errors.Is(err, errUnsupported) {
		c.server.stats.unsupported.Add(1)
	} else {
		c.server.stats.decodeErrors.Add(1)
	}
	c.log.Warn("wire: bad request; closing connection", requestAttrs(req), "err", err)
}

// addrString formats an address that some connections (Unix sockets)
// may not have.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// requestAttrs names a request in log lines.
func requestAttrs(req *Request) slog.Attr {
	return slog.Group("request",
		"api", kmsg.NameForKey(req.Key),
		"api_key", req.Key,
		"api_version", req.Version,
		"correlation_id", req.CorrelationID,
		"client_id", req.ClientID,
	)
}

// unsupportedApiVersions is Kafka's answer to an ApiVersions request at a
// version it does not know (KIP-511): a v0 response with
// UNSUPPORTED_VERSION and the ApiVersions range, so the client retries at
// the highest version both speak.
func unsupportedApiVersions(versions *versionTable) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	key := kmsg.NewApiVersionsResponseApiKey()
	r := versions[apiVersionsKey].VersionRange
	key.ApiKey, key.MinVersion, key.MaxVersion = apiVersionsKey, r.Min, r.Max
	resp.ApiKeys = append(resp.ApiKeys, key)
	return resp
}
