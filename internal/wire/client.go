package wire

import (
	"bufio"
	"context"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Client sends requests to one Kafka-protocol server at exactly the
// version set on each request, one at a time over one connection that it
// redials after a failure. Brokers use it to reach the controller: a
// request forwarded from a client keeps that client's version, where
// franz-go's client would renegotiate it. Use kgo for anything else. It is
// safe for concurrent use; requests wait their turn.
type Client struct {
	addr     string
	clientID string
	// MaxResponseSize bounds a response frame before it is allocated; 100
	// MiB when zero.
	MaxResponseSize int32
	// Dial connects; net.Dialer.DialContext when nil. A connection it
	// returns that has an Expired() bool method is dropped and redialed,
	// before a request, once that says true (a SASL session's end).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu          sync.Mutex
	conn        net.Conn
	r           *bufio.Reader
	correlation int32
}

// NewClient returns a client of the server at addr.
func NewClient(addr, clientID string) *Client { return &Client{addr: addr, clientID: clientID} }

// Addr is the server's address.
func (c *Client) Addr() string { return c.addr }

// Request sends req, at req.GetVersion(), and returns the decoded response.
// ctx bounds the whole exchange. A failed exchange closes the connection.
func (c *Client) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.conn.(interface{ Expired() bool }); ok && e.Expired() {
		c.conn.Close()
		c.conn, c.r = nil, nil
	}
	if c.conn == nil {
		dial := c.Dial
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		conn, err := dial(ctx, "tcp", c.addr)
		if err != nil {
			return nil, err
		}
		c.conn, c.r = conn, bufio.NewReader(conn)
	}
	resp, err := c.exchange(ctx, req)
	if err != nil {
		c.conn.Close()
		c.conn, c.r = nil, nil
	}
	return resp, err
}

func (c *Client) exchange(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	c.correlation++
	return Exchange(ctx, c.conn, c.r, c.clientID, c.correlation, req, c.MaxResponseSize)
}

// Close closes the connection; a later Request dials again.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.r = nil, nil
	}
}
