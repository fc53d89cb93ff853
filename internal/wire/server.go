package wire

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("wire: server closed")

// Defaults for Config fields left zero.
const (
	// DefaultIdleTimeout is Kafka's connections.max.idle.ms default.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultMaxInFlight is how many responses may wait to be written on
	// one connection before wire stops reading its requests. Kafka has no
	// per-connection equivalent (it handles one request per connection at
	// a time); clients keep at most a handful in flight (Java's
	// max.in.flight.requests.per.connection is 5).
	DefaultMaxInFlight = 100
)

// Config configures a Server.
type Config struct {
	// Handler answers requests. Required.
	Handler Handler

	// MaxRequestSize is the largest request frame accepted, in bytes,
	// without the size prefix: socket.request.max.bytes, default
	// 104857600 (100 MiB).
	MaxRequestSize int32

	// IdleTimeout closes a connection that sends no request for this long
	// while it has no response pending: connections.max.idle.ms, default
	// 600000 (10 minutes). Negative disables it.
	IdleTimeout time.Duration

	// MaxInFlight bounds the responses queued per connection; see
	// DefaultMaxInFlight.
	MaxInFlight int

	// MaxQueuedRequestBytes bounds the bytes of requests being read,
	// decoded and handled at once, across connections:
	// queued.max.request.bytes, default -1 (unbounded). See byteBudget.
	MaxQueuedRequestBytes int64

	// MaxConnections is max.connections: at most this many connections
	// are open; the accept loops wait for one to close. MaxConnectionsPerIP
	// is max.connections.per.ip: a connection beyond it is closed at
	// once. Zero or negative is unlimited (Kafka's default is
	// 2147483647).
	MaxConnections, MaxConnectionsPerIP int
	// ConnectionThrottle, when set, is asked for each accepted
	// connection's IP whether it is over its connection creation rate
	// (Kafka's connection_creation_rate ip quota): a positive answer
	// holds the connection unread for that long and closes it, as Kafka's
	// acceptor does, without counting it against MaxConnections. It is
	// called from the accept loops and must not block.
	ConnectionThrottle func(ip string) time.Duration

	// CopySplices sends spliced file regions by copying them through user
	// space (ReadAt and write) instead of sendfile(2). Strata-specific,
	// default false; it exists to compare the two paths. TLS and non-TCP
	// connections always copy.
	CopySplices bool

	// Logger receives connection errors (warn), handler panics (error),
	// and connection open and close (debug). Default slog.Default().
	Logger *slog.Logger

	// Observe, if set, is called once per request that reached the
	// handler (or was answered UNSUPPORTED_VERSION), after its response
	// was written or dropped, on that connection's writer goroutine. It is
	// called concurrently for different connections and must not block.
	Observe func(Observation)
}

// Observation describes one request's trip through a connection, with
// Kafka's request-metric names for the phases.
type Observation struct {
	ConnID       uint64
	Key, Version int16
	ClientID     string
	// RequestBytes is the frame size without the size prefix.
	RequestBytes int
	// ResponseBytes is the frame size written, with the size prefix; 0
	// when there was no response or it was dropped.
	ResponseBytes int64
	Received      time.Time
	// LocalTime is the time spent in Handle.
	LocalTime time.Duration
	// RemoteTime is the time spent in Deferred.
	RemoteTime time.Duration
	// ResponseQueueTime is the wait between the response being ready and
	// the writer starting on it (behind earlier responses).
	ResponseQueueTime time.Duration
	// SendTime is the time to write the response to the connection's
	// buffer or socket. Small responses written back to back are flushed
	// together after the last one.
	SendTime time.Duration
	// TotalTime is from Received to the end of SendTime.
	TotalTime time.Duration
	// Err is why the response was not written; nil when it was.
	Err error
}

// Stats are a server's counters since it started.
type Stats struct {
	ConnectionsOpened, ConnectionsClosed uint64
	// Requests counts requests decoded and passed to the handler.
	Requests uint64
	// FrameErrors counts frames refused for their size.
	FrameErrors uint64
	// DecodeErrors counts malformed headers and bodies.
	DecodeErrors uint64
	// Unsupported counts unknown API keys and unsupported versions,
	// including ApiVersions answered with UNSUPPORTED_VERSION.
	Unsupported uint64
	// Panics counts panics recovered in decoding, Handle, Deferred, Done
	// and response encoding.
	Panics uint64
	// ConnectionsRefused counts connections closed at once for
	// max.connections.per.ip.
	ConnectionsRefused uint64
	// ConnectionsThrottled counts connections held and closed for a
	// connection creation rate (Config.ConnectionThrottle).
	ConnectionsThrottled uint64
}

type counters struct {
	connectionsOpened, connectionsClosed             atomic.Uint64
	requests, frameErrors, decodeErrors, unsupported atomic.Uint64
	panics, connectionsRefused, connectionsThrottled atomic.Uint64
}

// Server accepts Kafka connections and serves them with a Handler.
type Server struct {
	handler  Handler
	versions *versionTable
	cfg      Config
	log      *slog.Logger

	// ctx is the parent of every connection's context; cancel ends them
	// all (Close, or Shutdown running out of time).
	ctx    context.Context
	cancel context.CancelFunc

	nextConnID atomic.Uint64
	stats      counters
	// budget is MaxQueuedRequestBytes, nil when unbounded; limits are
	// the connection limits.
	budget *byteBudget
	limits *connLimits

	mu           sync.Mutex
	shuttingDown bool // set once by Shutdown or Close
	listeners    map[net.Listener]struct{}
	conns        map[*Conn]struct{}
	connsDone    chan struct{} // closed when shuttingDown and conns is empty
}

// NewServer checks cfg and returns a server that is not yet serving.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, errors.New("wire: Config.Handler is nil")
	}
	versions, err := newVersionTable(cfg.Handler.Versions())
	if err != nil {
		return nil, err
	}
	if cfg.MaxRequestSize == 0 {
		cfg.MaxRequestSize = DefaultMaxRequestSize
	}
	if cfg.MaxRequestSize < minFrameSize {
		return nil, errors.New("wire: MaxRequestSize is smaller than a request header")
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{
		handler:   cfg.Handler,
		versions:  versions,
		cfg:       cfg,
		log:       cfg.Logger,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*Conn]struct{}),
		connsDone: make(chan struct{}),
	}
	if cfg.MaxQueuedRequestBytes > 0 {
		s.budget = newByteBudget(cfg.MaxQueuedRequestBytes)
	}
	s.limits = newConnLimits(cfg.MaxConnections, cfg.MaxConnectionsPerIP)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Serve accepts connections on l until Shutdown or Close, then returns
// ErrServerClosed; it returns other errors from l.Accept that are not
// temporary. It may be called for several listeners at once. Serve closes
// l when it returns.
func (s *Server) Serve(l net.Listener) error { return s.ServeListener(l, ListenerConfig{}) }

// ListenerConfig describes a listener for ServeListener.
type ListenerConfig struct {
	// Name is what Conn.Listener reports.
	Name string
	// MaxRequestSize, when set, is the largest frame a new connection
	// accepts until the handler raises it (Conn.SetMaxRequestSize): a
	// SASL listener's limit before authentication.
	MaxRequestSize int32
}

// ServeListener is Serve for a named listener: the connections it accepts
// report its name from Conn.Listener, so the handler can apply that
// listener's security protocol. A TLS listener (tls.NewListener) gives
// connections that handshake before their first request and copy spliced
// regions instead of sendfile(2).
func (s *Server) ServeListener(l net.Listener, lc ListenerConfig) error {
	s.mu.Lock()
	if s.shuttingDown {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()

	var backoff time.Duration
	for {
		if !s.limits.waitSlot(s.ctx) {
			return ErrServerClosed
		}
		nc, err := l.Accept()
		if err != nil {
			s.limits.releaseSlot()
			if s.closing() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors and the like: wait and retry, as
			// net/http does, rather than spin or give up.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("wire: accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
			}
			continue
		}
		backoff = 0
		if s.cfg.ConnectionThrottle != nil {
			if d := s.cfg.ConnectionThrottle(ipOf(nc.RemoteAddr())); d > 0 {
				s.limits.releaseSlot()
				s.stats.connectionsThrottled.Add(1)
				s.log.Debug("wire: holding a connection over its IP's connection creation rate, then closing it", "remote", addrString(nc.RemoteAddr()), "listener", lc.Name, "for", d)
				go s.closeAfter(nc, d)
				continue
			}
		}
		ip, ok := s.limits.admitIP(nc.RemoteAddr())
		if !ok {
			s.limits.releaseSlot()
			s.stats.connectionsRefused.Add(1)
			s.log.Info("wire: refusing connection: max.connections.per.ip reached", "remote", addrString(nc.RemoteAddr()), "listener", lc.Name, "limit", s.cfg.MaxConnectionsPerIP)
			nc.Close()
			continue
		}
		c := newConn(s, nc)
		c.ip = ip
		c.listener = lc.Name
		if lc.MaxRequestSize > 0 {
			c.SetMaxRequestSize(lc.MaxRequestSize)
		}
		if !s.track(c) {
			s.limits.leaveIP(ip)
			s.limits.releaseSlot()
			nc.Close()
			return ErrServerClosed
		}
		go c.serve()
	}
}

// closeAfter closes a throttled connection after d, or when the server
// closes.
func (s *Server) closeAfter(nc net.Conn, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.ctx.Done():
	}
	nc.Close()
}

func (s *Server) closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shuttingDown
}

// track adds c to the live connections, unless the server is shutting down.
func (s *Server) track(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown {
		return false
	}
	s.conns[c] = struct{}{}
	s.stats.connectionsOpened.Add(1)
	return true
}

// untrack removes c once both of its goroutines are done.
func (s *Server) untrack(c *Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	s.stats.connectionsClosed.Add(1)
	s.limits.leaveIP(c.ip)
	s.limits.releaseSlot()
	if s.shuttingDown && len(s.conns) == 0 {
		closeOnce(s.connsDone)
	}
}

// closeOnce closes ch unless it is closed. s.mu must be held.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// beginShutdown stops accepting and stops every connection reading.
func (s *Server) beginShutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shuttingDown = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.stopReading()
	}
	if len(s.conns) == 0 {
		closeOnce(s.connsDone)
	}
}

// Shutdown stops accepting connections and reading requests, lets every
// connection finish the requests it has already read (writing their
// responses, deferred ones included), and closes it; idle connections close
// at once. It returns when all connections are closed, or, when ctx is done
// first, closes the rest as Close does and returns ctx.Err().
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginShutdown()
	select {
	case <-s.connsDone:
		s.cancel()
		return nil
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
}

// Close stops accepting connections, cancels every connection's context and
// closes every connection, dropping unwritten responses (their Deferred and
// Done functions are still called). It does not wait.
func (s *Server) Close() error {
	s.beginShutdown()
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
	return nil
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{
		ConnectionsOpened:    s.stats.connectionsOpened.Load(),
		ConnectionsClosed:    s.stats.connectionsClosed.Load(),
		Requests:             s.stats.requests.Load(),
		FrameErrors:          s.stats.frameErrors.Load(),
		DecodeErrors:         s.stats.decodeErrors.Load(),
		Unsupported:          s.stats.unsupported.Load(),
		Panics:               s.stats.panics.Load(),
		ConnectionsRefused:   s.stats.connectionsRefused.Load(),
		ConnectionsThrottled: s.stats.connectionsThrottled.Load(),
	}
}
