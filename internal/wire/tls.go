package wire

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
)

// tlsConn is what the server needs of a TLS connection: *tls.Conn, or the
// connections of NewTLSListener.
type tlsConn interface {
	net.Conn
	ConnectionState() tls.ConnectionState
	HandshakeContext(ctx context.Context) error
}

// NewTLSListener is tls.NewListener whose connections write, after the
// handshake, each Write's TLS records to the socket at once: crypto/tls
// writes every record (16 KiB at most) with a write(2) of its own, so a
// 256 KiB fetch region cost 16 system calls; here it costs one. The
// handshake, and anything else written outside Write, goes out as
// crypto/tls writes it.
func NewTLSListener(inner net.Listener, cfg *tls.Config) net.Listener {
	return &tlsListener{Listener: inner, cfg: cfg}
}

type tlsListener struct {
	net.Listener
	cfg *tls.Config
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	raw := &batchedConn{Conn: c}
	return &batchedTLS{Conn: tls.Server(raw, l.cfg), raw: raw}, nil
}

// batchedTLS is a server TLS connection over a batchedConn: Write hands
// crypto/tls the bytes, which it writes as records into the batch, then
// sends the batch.
type batchedTLS struct {
	*tls.Conn
	raw *batchedConn
}

func (c *batchedTLS) HandshakeContext(ctx context.Context) error {
	if err := c.Conn.HandshakeContext(ctx); err != nil {
		return err
	}
	c.raw.batching.Store(true)
	return nil
}

func (c *batchedTLS) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if ferr := c.raw.flush(); err == nil {
		err = ferr
	}
	return n, err
}

// batchedConn is the socket under a batchedTLS. Before batching is set
// (during the handshake) writes go straight through; after, they collect
// in a pooled buffer until flush, which sends them and gives the buffer
// back: an idle connection holds none. What crypto/tls writes outside a
// Write (an alert, a key update) is sent by the next flush, or at Close.
type batchedConn struct {
	net.Conn
	batching atomic.Bool

	mu  sync.Mutex
	buf *[]byte
}

// batchSize holds a 256 KiB fetch region's records (16 KiB of data and
// 22 bytes of framing each) in one write.
const batchSize = 256<<10 + 16*64

var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, batchSize); return &b }}

func (c *batchedConn) Write(p []byte) (int, error) {
	if !c.batching.Load() {
		return c.Conn.Write(p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		c.buf = batchBufs.Get().(*[]byte)
	}
	if len(*c.buf)+len(p) > cap(*c.buf) {
		if err := c.send(); err != nil {
			return 0, err
		}
		if len(p) > cap(*c.buf) {
			return c.Conn.Write(p)
		}
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// send writes what is collected; c.mu is held.
func (c *batchedConn) send() error {
	b := *c.buf
	*c.buf = b[:0]
	if len(b) == 0 {
		return nil
	}
	_, err := c.Conn.Write(b)
	return err
}

func (c *batchedConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		return nil
	}
	err := c.send()
	batchBufs.Put(c.buf)
	c.buf = nil
	return err
}

func (c *batchedConn) Close() error {
	c.flush() // a close_notify alert, written just before
	return c.Conn.Close()
}
