package wire

import (
	"context"
	"net"
	"sync"
)

// byteBudget is queued.max.request.bytes: the bytes of request frames
// being read, decoded and handled, across all connections. A reader takes
// a frame's size before reading its body and gives it back once Handle
// has returned; while the budget is spent, readers wait, so the broker
// stops reading from sockets and TCP pushes back on clients (Kafka mutes
// the channels). As Kafka's SimpleMemoryPool in its non-strict mode, a
// frame is admitted whenever any budget is left, so one frame larger than
// the whole budget still gets through alone. Safe for concurrent use.
type byteBudget struct {
	mu      sync.Mutex
	avail   int64
	changed chan struct{} // closed and replaced when bytes come back
}

func newByteBudget(n int64) *byteBudget {
	return &byteBudget{avail: n, changed: make(chan struct{})}
}

// acquire takes n bytes, waiting while none are left; false when ctx
// ended first.
func (b *byteBudget) acquire(ctx context.Context, n int64) bool {
	for {
		b.mu.Lock()
		if b.avail > 0 {
			b.avail -= n
			b.mu.Unlock()
			return true
		}
		wait := b.changed
		b.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return false
		}
	}
}

// release gives n bytes back.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.avail += n
	close(b.changed)
	b.changed = make(chan struct{})
}

// connLimits are max.connections (a slot per connection; the accept loop
// waits for one, as Kafka's acceptor does) and max.connections.per.ip (a
// connection beyond it is closed at once).
type connLimits struct {
	slots chan struct{} // nil: unlimited
	perIP int           // <= 0: unlimited

	mu   sync.Mutex
	byIP map[string]int
}

func newConnLimits(maxConns, perIP int) *connLimits {
	l := &connLimits{perIP: perIP, byIP: map[string]int{}}
	if maxConns > 0 && maxConns < 1<<24 {
		l.slots = make(chan struct{}, maxConns)
	}
	return l
}

// waitSlot blocks until a connection may be accepted; false when ctx
// ended first.
func (l *connLimits) waitSlot(ctx context.Context) bool {
	if l.slots == nil {
		return true
	}
	select {
	case l.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// releaseSlot gives back a slot taken by waitSlot.
func (l *connLimits) releaseSlot() {
	if l.slots != nil {
		<-l.slots
	}
}

// admitIP counts a connection from addr's IP, or refuses it when the IP
// has max.connections.per.ip already.
func (l *connLimits) admitIP(addr net.Addr) (ip string, ok bool) {
	ip = ipOf(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perIP > 0 && l.byIP[ip] >= l.perIP {
		return ip, false
	}
	l.byIP[ip]++
	return ip, true
}

// leaveIP uncounts a connection admitted by admitIP.
func (l *connLimits) leaveIP(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

func ipOf(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	if addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}
