package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

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
	// Dial connects; net.Dialer.DialContext when nil.
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
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	conn := c.conn
	conn.SetDeadline(deadline)
	// A deadline in the past when ctx ends unblocks reads and writes. The
	// callback may still run after the exchange (and Request may have
	// dropped c.conn by then), so it uses its own copy of the connection.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	c.correlation++
	corr := c.correlation
	frame := make([]byte, 4, 256)
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.GetVersion()))
	frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
	frame = binary.BigEndian.AppendUint16(frame, uint16(len(c.clientID)))
	frame = append(frame, c.clientID...)
	if req.IsFlexible() {
		frame = append(frame, 0) // no tagged fields
	}
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	if _, err := c.conn.Write(frame); err != nil {
		return nil, c.failed(ctx, err)
	}

	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		return nil, c.failed(ctx, err)
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	limit := c.MaxResponseSize
	if limit <= 0 {
		limit = 100 << 20
	}
	if n < 4 || n > limit {
		return nil, fmt.Errorf("wire: response of %d bytes from %s (limit %d)", n, c.addr, limit)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return nil, c.failed(ctx, err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		return nil, fmt.Errorf("wire: response correlation id %d from %s, want %d", got, c.addr, corr)
	}
	body = body[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && req.Key() != apiVersionsKey {
		var err error
		if body, err = skipTags(body); err != nil {
			return nil, fmt.Errorf("wire: response header from %s: %w", c.addr, err)
		}
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("wire: decoding %s v%d from %s: %w", kmsg.NameForKey(req.Key()), req.GetVersion(), c.addr, err)
	}
	return resp, nil
}

// failed returns ctx's error when it ended the exchange, else err.
func (c *Client) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(context.Cause(ctx), err)
	}
	return err
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
