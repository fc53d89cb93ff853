package wire

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

func TestMaxConnectionsPerIP(t *testing.T) {
	s := startServer(t, newTestHandler(), func(c *Config) { c.MaxConnectionsPerIP = 2 })
	a, b := dial(t, s.addr), dial(t, s.addr)
	for _, c := range []*rawClient{a, b} {
		req := kmsg.NewPtrApiVersionsRequest()
		c.read(req, c.send(req))
	}
	third := dial(t, s.addr)
	third.expectClosed()
	if got := s.Stats().ConnectionsRefused; got != 1 {
		t.Fatalf("ConnectionsRefused = %d", got)
	}
	// A slot frees when a connection closes.
	a.conn.Close()
	poll.Until(t, 30*time.Second, "the closed connection to be uncounted", func() bool { return s.Stats().ConnectionsClosed >= 1 })
	d := dial(t, s.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	d.read(req, d.send(req))
}

func TestMaxConnectionsWaits(t *testing.T) {
	s := startServer(t, newTestHandler(), func(c *Config) { c.MaxConnections = 1 })
	a := dial(t, s.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	a.read(req, a.send(req))
	// The second connection is not accepted (served) until the first goes.
	b := dial(t, s.addr)
	corr := b.send(req)
	b.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := b.readFrame(); err == nil {
		t.Fatal("a connection beyond max.connections was served")
	}
	b.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	a.conn.Close()
	b.read(req, corr)
}

// TestQueuedRequestBytes: with the budget spent by a request the handler
// holds, other connections' requests are not read until it returns.
func TestQueuedRequestBytes(t *testing.T) {
	h := newTestHandler()
	release := make(chan struct{})
	var metadataHandled atomic.Int64
	h.intercept = func(ctx context.Context, c *Conn, req *Request) (Response, bool) {
		if _, ok := req.Body.(*kmsg.MetadataRequest); ok {
			metadataHandled.Add(1)
			if metadataHandled.Load() == 1 {
				<-release
			}
		}
		return Response{}, false
	}
	s := startServer(t, h, func(c *Config) { c.MaxQueuedRequestBytes = 16 })
	a, b := dial(t, s.addr), dial(t, s.addr)
	meta := kmsg.NewPtrMetadataRequest()
	ca := a.send(meta)
	poll.Until(t, 30*time.Second, "the first request to be in the handler", func() bool { return metadataHandled.Load() == 1 })
	cb := b.send(meta)
	// b's request waits for budget: it is not handled while a's holds it.
	b.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := b.readFrame(); err == nil {
		t.Fatal("a request was handled beyond queued.max.request.bytes")
	}
	if metadataHandled.Load() != 1 {
		t.Fatal("the second request reached the handler")
	}
	b.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	close(release)
	a.read(meta, ca)
	b.read(meta, cb)
}

func TestByteBudgetCancel(t *testing.T) {
	bb := newByteBudget(10)
	if !bb.acquire(context.Background(), 100) { // admitted: some budget was left
		t.Fatal("a frame larger than the budget was not admitted alone")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if bb.acquire(ctx, 1) {
		t.Fatal("acquired from a spent budget")
	}
	bb.release(100)
	if !bb.acquire(context.Background(), 5) {
		t.Fatal("released budget not available")
	}
}
