// Package faultproxy is a TCP proxy for tests that stands between a real
// Kafka client and a real broker and loses responses the broker has already
// produced, with a fixed seed: the fault an idempotent producer exists for
// ("the broker wrote the batch but the acknowledgement never arrived"). It
// can also hold one request back until the test lets it go (HoldRequest).
//
// The proxy reads the Kafka framing and nothing more: every request and
// response is a 4-byte big-endian size followed by that many bytes; a
// request's header starts with its API key (int16), API version (int16) and
// correlation id (int32), and a response's header with the correlation id.
// Requests are forwarded whole. When the broker's response to a request
// chosen for a fault arrives, the proxy swallows it and closes both sides of
// that connection, as a network or a client-side timeout would: the client
// sees its request fail after the broker acted on it, and retries on a new
// connection.
//
// Which responses are lost is decided by a pseudo-random source seeded with
// Options.Seed, one draw per eligible response in the order the responses
// arrive. With several connections that order depends on scheduling, so a
// run is reproducible in its rate of faults, not in their exact positions.
//
// With Options.ForgeRate the proxy commits the fault no correct broker may:
// it answers some Produce requests itself, with success, and never
// forwards them (see forge.go). That is a broker that acknowledges writes
// and loses them, for tests of checkers that must notice.
//
// HoldRequest holds one chosen request back until the test releases it
// (hold.go): a delay under the test's control, for exact interleavings
// such as a late EndTxn.
//
// The broker must advertise the proxy's address (advertised.listeners), or
// clients would follow the metadata to the broker directly.
package faultproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
)

// maxFrame bounds a frame's size before the proxy allocates for it: Kafka's
// socket.request.max.bytes default (100 MiB).
const maxFrame = 100 << 20

// ProduceKey is the Produce API key, the default kind of request whose
// responses are dropped.
const ProduceKey int16 = 0

// Options configure a Proxy.
type Options struct {
	// Seed seeds the fault decisions.
	Seed uint64
	// DropRate is the probability, in [0, 1], that the response to an
	// eligible request is dropped (and its connection closed).
	DropRate float64
	// APIKeys are the requests whose responses may be dropped; Produce
	// only when empty.
	APIKeys []int16
	// ForgeRate is the probability, in [0, 1], that a Produce request
	// (acks 1 or all) is not forwarded but answered by the proxy with
	// success, at offsets the broker already gave other records (forge.go).
	ForgeRate float64
}

// Proxy forwards connections from its listener to a target address. It is
// safe for concurrent use.
type Proxy struct {
	ln      net.Listener
	apiKeys []int16
	target  atomic.Pointer[string]

	mu       sync.Mutex // guards rng, dropRate, links, closed, holds
	rng      *rand.Rand
	dropRate float64
	links    map[*link]struct{}
	closed   bool
	holds    []*Hold // armed, not yet taken (hold.go)

	eligible atomic.Int64 // eligible responses seen
	dropped  atomic.Int64 // eligible responses dropped
	wg       sync.WaitGroup

	forging bool // ForgeRate > 0: requests are parsed and responses ordered
	forge   forgeState
}

// Listen starts a proxy on a free loopback port. Connections accepted
// before SetTarget are closed.
func Listen(opts Options) (*Proxy, error) {
	if opts.DropRate < 0 || opts.DropRate > 1 {
		return nil, fmt.Errorf("faultproxy: drop rate %v outside [0, 1]", opts.DropRate)
	}
	if opts.ForgeRate < 0 || opts.ForgeRate > 1 {
		return nil, fmt.Errorf("faultproxy: forge rate %v outside [0, 1]", opts.ForgeRate)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	keys := opts.APIKeys
	if len(keys) == 0 {
		keys = []int16{ProduceKey}
	}
	p := &Proxy{
		ln:       ln,
		apiKeys:  slices.Clone(keys),
		rng:      rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		dropRate: opts.DropRate,
		links:    map[*link]struct{}{},
		forging:  opts.ForgeRate > 0,
		forge:    forgeState{rate: opts.ForgeRate, lastBase: map[topicPartition]int64{}},
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients (and advertised.listeners) should use.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget sets the broker address new connections are forwarded to.
func (p *Proxy) SetTarget(addr string) { p.target.Store(&addr) }

// SetDropRate changes the probability of dropping an eligible response,
// for example to 0 while a test reads back what it produced.
func (p *Proxy) SetDropRate(rate float64) {
	p.mu.Lock()
	p.dropRate = rate
	p.mu.Unlock()
}

// Dropped is how many responses the proxy dropped.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Eligible is how many responses to eligible requests arrived, dropped or
// not.
func (p *Proxy) Eligible() int64 { return p.eligible.Load() }

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		target := p.target.Load()
		if target == nil {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c, *target)
	}
}

// link is one proxied connection: the client's and the broker's sides, and
// the API keys of the requests awaiting a response, by correlation id.
type link struct {
	client, broker net.Conn
	closeOnce      sync.Once
	closed         chan struct{} // closed by close

	mu      sync.Mutex
	pending map[int32]int16
	// held are the requests held (hold.go) and not yet answered, by
	// correlation id.
	held map[int32]*Hold
	// When forging: the requests awaiting a response, in order, forged
	// responses among them; and the versions of the Produce requests
	// forwarded, by correlation id. Writes to client hold mu, so that
	// forged and forwarded responses go out in request order.
	queue           []queued
	produceVersions map[int32]int16
}

func (l *link) close() {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.client.Close()
		l.broker.Close()
		// No answer can come now to a request held on the link.
		l.mu.Lock()
		held := l.held
		l.held = map[int32]*Hold{}
		l.mu.Unlock()
		for _, h := range held {
			h.answer(false)
		}
	})
}

func (p *Proxy) serve(client net.Conn, target string) {
	defer p.wg.Done()
	broker, err := net.Dial("tcp", target)
	if err != nil {
		// The client sees the connection close, as if the broker were
		// down, which it probably is.
		client.Close()
		return
	}
	l := &link{client: client, broker: broker, closed: make(chan struct{}), pending: map[int32]int16{},
		held: map[int32]*Hold{}, produceVersions: map[int32]int16{}}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()

	done := make(chan struct{})
	go func() {
		defer close(done)
		defer l.close()
		p.requests(l)
	}()
	p.responses(l)
	l.close()
	<-done
}

// requests forwards the client's requests, noting which ones are eligible
// before the broker can answer them.
func (p *Proxy) requests(l *link) {
	r := bufio.NewReaderSize(l.client, 64<<10)
	for {
		frame, err := readFrame(r, 8)
		if err != nil {
			// A request released late is answered before the link goes.
			l.awaitHeldAnswers()
			return
		}
		key := int16(binary.BigEndian.Uint16(frame[4:]))
		if h := p.takeHold(key); h != nil && !p.hold(l, h, frame) {
			return
		}
		if p.forging {
			answered, err := p.forgeOrQueue(l, key, frame)
			if err != nil {
				return
			}
			if answered {
				continue
			}
		}
		if slices.Contains(p.apiKeys, key) {
			// Produce with acks=0 gets no response and leaves its id
			// here; ids are per connection and the map goes with it.
			l.mu.Lock()
			l.pending[int32(binary.BigEndian.Uint32(frame[8:]))] = key
			l.mu.Unlock()
		}
		if _, err := l.broker.Write(frame); err != nil {
			return
		}
	}
}

// responses forwards the broker's responses, dropping the chosen ones.
func (p *Proxy) responses(l *link) {
	r := bufio.NewReaderSize(l.broker, 64<<10)
	for {
		frame, err := readFrame(r, 4)
		if err != nil {
			return
		}
		id := int32(binary.BigEndian.Uint32(frame[4:]))
		l.answered(id)
		l.mu.Lock()
		_, eligible := l.pending[id]
		delete(l.pending, id)
		l.mu.Unlock()
		if p.forging {
			p.learn(l, id, frame)
		}
		if eligible && p.drop() {
			return
		}
		if p.forging {
			if err := p.respondInOrder(l, id, frame); err != nil {
				return
			}
			continue
		}
		if _, err := l.client.Write(frame); err != nil {
			return
		}
	}
}

// drop draws whether to drop an eligible response, and counts it.
func (p *Proxy) drop() bool {
	p.eligible.Add(1)
	p.mu.Lock()
	drop := p.rng.Float64() < p.dropRate
	p.mu.Unlock()
	if drop {
		p.dropped.Add(1)
	}
	return drop
}

// errFrame is returned for a frame too short for its header or too large.
var errFrame = errors.New("faultproxy: bad frame size")

// readFrame reads one size-prefixed frame, returning it with its size
// prefix; the frame must hold at least minHeader bytes after the prefix.
func readFrame(r io.Reader, minHeader int) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < int32(minHeader) || n > maxFrame {
		return nil, fmt.Errorf("%w: %d", errFrame, n)
	}
	frame := make([]byte, 4+int(n))
	copy(frame, size[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, err
	}
	return frame, nil
}
