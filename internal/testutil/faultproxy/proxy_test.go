package faultproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// frameServer answers every request frame with a response frame carrying
// its correlation id and the request's body, and counts the requests it
// received by API key.
type frameServer struct {
	ln net.Listener
	mu sync.Mutex
	n  map[int16]int
	wg sync.WaitGroup
}

func startFrameServer(t *testing.T) *frameServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &frameServer{ln: ln, n: map[int16]int{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					req, err := readFrame(r, 8)
					if err != nil {
						return
					}
					s.mu.Lock()
					s.n[int16(binary.BigEndian.Uint16(req[4:]))]++
					s.mu.Unlock()
					resp := binary.BigEndian.AppendUint32(nil, uint32(len(req)-8))
					resp = append(resp, req[8:]...) // correlation id, body
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *frameServer) count(key int16) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[key]
}

func startProxy(t *testing.T, target string, opts Options) *Proxy {
	p, err := Listen(opts)
	if err != nil {
		t.Fatal(err)
	}
	p.SetTarget(target)
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

func request(key int16, correlationID int32, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(correlationID))
	return append(b, body...)
}

// roundTrip sends a request and reads its response; ok is false when the
// connection closed instead.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, key int16, id int32, body []byte) (ok bool) {
	t.Helper()
	if _, err := c.Write(request(key, id, body)); err != nil {
		return false
	}
	resp, err := readFrame(r, 4)
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := int32(binary.BigEndian.Uint32(resp[4:])); got != id {
		t.Fatalf("response correlation id %d, want %d", got, id)
	}
	if string(resp[8:]) != string(body) {
		t.Fatalf("response body of %d bytes differs from the request's %d", len(resp)-8, len(body))
	}
	return true
}

func TestForwardsWholeFrames(t *testing.T) {
	s := startFrameServer(t)
	p := startProxy(t, s.ln.Addr().String(), Options{Seed: 1})
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i)
	}
	for i, body := range [][]byte{nil, []byte("x"), big, []byte("after")} {
		if !roundTrip(t, c, r, ProduceKey, int32(i), body) {
			t.Fatalf("request %d: connection closed", i)
		}
	}
	if p.Dropped() != 0 || p.Eligible() != 4 {
		t.Fatalf("dropped %d of %d", p.Dropped(), p.Eligible())
	}
}

// TestDropsResponseAfterForwarding: the request reaches the server, its
// response does not reach the client, and the connection closes; other
// API keys pass.
func TestDropsResponseAfterForwarding(t *testing.T) {
	s := startFrameServer(t)
	p := startProxy(t, s.ln.Addr().String(), Options{Seed: 1, DropRate: 1})
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	const metadataKey = 3
	if !roundTrip(t, c, r, metadataKey, 1, []byte("metadata")) {
		t.Fatal("metadata response dropped")
	}
	if roundTrip(t, c, r, ProduceKey, 2, []byte("produce")) {
		t.Fatal("produce response forwarded at drop rate 1")
	}
	if s.count(ProduceKey) != 1 {
		t.Fatalf("server received %d produce requests, want 1", s.count(ProduceKey))
	}
	if p.Dropped() != 1 {
		t.Fatalf("dropped %d", p.Dropped())
	}

	p.SetDropRate(0)
	c = dial(t, p.Addr())
	if !roundTrip(t, c, bufio.NewReader(c), ProduceKey, 3, []byte("produce")) {
		t.Fatal("produce response dropped at drop rate 0")
	}
}

// TestSeedFixesFaults: one client sending requests one at a time sees the
// same responses dropped for the same seed.
func TestSeedFixesFaults(t *testing.T) {
	s := startFrameServer(t)
	run := func(seed uint64) []int {
		p := startProxy(t, s.ln.Addr().String(), Options{Seed: seed, DropRate: 0.3})
		var dropped []int
		c := dial(t, p.Addr())
		r := bufio.NewReader(c)
		for i := range 50 {
			if !roundTrip(t, c, r, ProduceKey, int32(i), []byte("p")) {
				dropped = append(dropped, i)
				c = dial(t, p.Addr())
				r = bufio.NewReader(c)
			}
		}
		return dropped
	}
	a, b := run(7), run(7)
	if len(a) == 0 || len(a) == 50 {
		t.Fatalf("dropped %v of 50 at rate 0.3", a)
	}
	if len(a) != len(b) {
		t.Fatalf("seed 7 dropped %v, then %v", a, b)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 7 dropped %v, then %v", a, b)
		}
	}
}

func TestRefusesWithoutTarget(t *testing.T) {
	p, err := Listen(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p.Addr())
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a proxy with no target")
	}
}

// TestHoldRequest: a held request reaches the server only on Release,
// after requests sent later on other connections; its connection's later
// requests wait behind it; and a request whose client gave up on the
// connection while it was held still reaches the server, and is answered.
func TestHoldRequest(t *testing.T) {
	s := startFrameServer(t)
	p := startProxy(t, s.ln.Addr().String(), Options{Seed: 1})
	const endTxnKey, metadataKey = 26, 3
	h := p.HoldRequest(endTxnKey)

	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	done := make(chan bool)
	go func() {
		ok := roundTripQuiet(c, r, endTxnKey, 1, []byte("late"))
		done <- ok && roundTripQuiet(c, r, metadataKey, 2, []byte("behind it"))
	}()
	<-h.Arrived()
	// Another connection's requests pass meanwhile, the same key too.
	other := dial(t, p.Addr())
	if !roundTrip(t, other, bufio.NewReader(other), endTxnKey, 1, []byte("meanwhile")) {
		t.Fatal("a request on another connection did not pass")
	}
	if n := s.count(endTxnKey); n != 1 {
		t.Fatalf("the server saw %d EndTxn requests before the release, want 1", n)
	}
	if n := s.count(metadataKey); n != 0 {
		t.Fatalf("a request behind the held one reached the server first")
	}
	h.Release()
	if !h.AnsweredByBroker() {
		t.Fatal("the held request was not answered by the server")
	}
	if !<-done {
		t.Fatal("the held request or the one behind it got no response")
	}
	if s.count(endTxnKey) != 2 || s.count(metadataKey) != 1 {
		t.Fatalf("the server saw %d EndTxn and %d Metadata requests, want 2 and 1", s.count(endTxnKey), s.count(metadataKey))
	}

	// The client gives up on the connection while its request is held.
	h = p.HoldRequest(endTxnKey)
	c = dial(t, p.Addr())
	if _, err := c.Write(request(endTxnKey, 3, []byte("abandoned"))); err != nil {
		t.Fatal(err)
	}
	<-h.Arrived()
	c.Close()
	h.Release()
	if !h.AnsweredByBroker() {
		t.Fatal("the abandoned request was not answered by the server")
	}
	if n := s.count(endTxnKey); n != 3 {
		t.Fatalf("the server saw %d EndTxn requests, want the abandoned one too (3)", n)
	}
}

// roundTripQuiet is roundTrip for another goroutine: false on any failure.
func roundTripQuiet(c net.Conn, r *bufio.Reader, key int16, id int32, body []byte) bool {
	if _, err := c.Write(request(key, id, body)); err != nil {
		return false
	}
	resp, err := readFrame(r, 4)
	return err == nil && int32(binary.BigEndian.Uint32(resp[4:])) == id && string(resp[8:]) == string(body)
}
