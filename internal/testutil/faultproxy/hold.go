package faultproxy

import (
	"encoding/binary"
	"sync"
)

// Holding: HoldRequest makes the proxy hold back the next request with a
// given API key, on whichever connection it comes, instead of forwarding
// it: the network delaying one request for as long as a test wants. The
// test waits for Arrived (the client sent it; the broker has not seen
// it), does whatever must happen meanwhile (the client times out, retries
// on another connection, begins its next transaction), then Releases it:
// the broker receives it late, on its original connection, and Answered
// says when the broker's response came back. That orders a late request
// against everything else deterministically, with no sleeps: KAFKA-17754's
// late EndTxn and late produce.
//
// The connection a request is held on stalls behind it, as TCP would: the
// client's later requests on it wait. If the client gives up on the
// connection (closes it) while its request is held, the request is still
// delivered on Release, and the proxy keeps the broker's side open until
// the broker answers it, so that the broker acts on it as on any request,
// not as on one whose client left.

// Hold is one request held back; see HoldRequest.
type Hold struct {
	key      int16
	arrived  chan struct{}
	release  chan struct{}
	answered chan struct{}

	releaseOnce, answerOnce sync.Once
	byBroker                bool // written before answered is closed
}

// HoldRequest arms a hold for the next request with API key key that
// reaches the proxy from a client. Holds for the same key are taken in
// the order they were armed.
func (p *Proxy) HoldRequest(key int16) *Hold {
	h := &Hold{key: key, arrived: make(chan struct{}), release: make(chan struct{}), answered: make(chan struct{})}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h
}

// Arrived is closed once the held request reached the proxy (and was held).
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Release forwards the held request to the broker; before it arrived, it
// lets it through unheld. Releasing twice does nothing.
func (h *Hold) Release() { h.releaseOnce.Do(func() { close(h.release) }) }

// Answered is closed once the broker's response to the held request
// reached the proxy (it is forwarded to the client if the client's side
// is still open), or the broker closed the connection first.
func (h *Hold) Answered() <-chan struct{} { return h.answered }

// AnsweredByBroker, once Answered is closed, says whether the broker
// answered the held request (it received it and acted), rather than the
// connection closing first.
func (h *Hold) AnsweredByBroker() bool {
	<-h.answered
	return h.byBroker
}

func (h *Hold) answer(byBroker bool) {
	h.answerOnce.Do(func() {
		h.byBroker = byBroker
		close(h.answered)
	})
}

// takeHold returns the first armed hold for key, disarmed, or nil.
func (p *Proxy) takeHold(key int16) *Hold {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, h := range p.holds {
		if h.key == key {
			p.holds = append(p.holds[:i:i], p.holds[i+1:]...)
			return h
		}
	}
	return nil
}

// hold waits, on a link's request path, for the release of the hold
// on frame, and notes whose response answers it. It returns false if the
// proxy closed first.
func (p *Proxy) hold(l *link, h *Hold, frame []byte) bool {
	l.mu.Lock()
	l.held[int32(binary.BigEndian.Uint32(frame[8:]))] = h
	l.mu.Unlock()
	close(h.arrived)
	select {
	case <-h.release:
		return true
	case <-l.closed:
		h.answer(false) // if close ran before h was noted in l.held
		return false
	}
}

// answered signals the hold whose request the response with correlation
// id answers, if any.
func (l *link) answered(id int32) {
	l.mu.Lock()
	h := l.held[id]
	delete(l.held, id)
	l.mu.Unlock()
	if h != nil {
		h.answer(true)
	}
}

// awaitHeldAnswers waits until the broker answered every released request
// of the link, or the link closed. The request path calls it when the
// client's side ends, before the link closes.
func (l *link) awaitHeldAnswers() {
	l.mu.Lock()
	var hs []*Hold
	for _, h := range l.held {
		hs = append(hs, h)
	}
	l.mu.Unlock()
	for _, h := range hs {
		select {
		case <-h.answered:
		case <-l.closed:
			return
		}
	}
}
