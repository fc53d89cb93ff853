package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

var (
	errClosedByHandler = errors.New("wire: handler closed the connection")
	errBadResponse     = errors.New("wire: bad response from handler")
)

// writeLoop writes responses in request order until the reader closes the
// queue. After a failure it keeps draining the queue, calling each
// response's Deferred and Done without writing, so the reader never blocks
// on a full queue and handlers release what they hold.
func (c *Conn) writeLoop() {
	var failed error
	for {
		var it *inflight
		var ok bool
		select {
		case it, ok = <-c.queue:
		default:
			// Nothing more is ready: send what is buffered.
			if failed == nil && c.bw.Buffered() > 0 {
				failed = c.fail(c.bw.Flush())
			}
			it, ok = <-c.queue
		}
		if !ok {
			break
		}
		failed = c.writeOne(it, failed)
	}
	if failed == nil {
		failed = c.fail(c.bw.Flush())
	}
	c.Close()
	c.log.Debug("wire: connection closed", "reason", failed)
	c.server.untrack(c)
}

// fail closes the connection after a write failure and returns err.
func (c *Conn) fail(err error) error {
	if err != nil {
		c.Close()
	}
	return err
}

// writeOne writes one response, or only releases it when failed is set,
// and returns the connection's failure, if any.
func (c *Conn) writeOne(it *inflight, failed error) error {
	resp := it.resp
	var remote time.Duration
	if resp.Deferred != nil {
		if failed == nil && c.bw.Buffered() > 0 {
			// Earlier responses should not wait with this one.
			failed = c.fail(c.bw.Flush())
		}
		start := time.Now()
		var ok bool
		if resp, ok = c.callDeferred(it); !ok {
			failed = errBadResponse
		}
		remote = time.Since(start)
	}
	start := time.Now()
	var written int64
	var err error
	if failed == nil && !resp.NoResponse {
		written, err = c.writeResponse(it, &resp)
		if err != nil {
			failed = c.fail(err)
		}
	}
	end := time.Now()
	ok := c.release(it, resp.Done)
	if it.resp.Deferred != nil && !c.release(it, it.resp.Done) {
		ok = false
	}
	if !ok {
		failed = errBadResponse
	}
	c.pending.Add(-1)
	if failed == nil {
		// The handler is done with the request's bytes.
		putFrame(it.frame)
	}
	c.observe(it, written, remote, start, end, failed)
	if failed == nil && (resp.Close || it.resp.Close) {
		failed = c.fail(c.bw.Flush())
		if failed == nil {
			failed = errClosedByHandler
			c.Close()
		}
	}
	return failed
}

// callDeferred runs a deferred response, recovering a panic.
func (c *Conn) callDeferred(it *inflight) (resp Response, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			c.panicked(&it.req, "Deferred", r)
			resp, ok = Response{}, false
		}
	}()
	resp = it.resp.Deferred()
	if resp.Deferred != nil {
		c.log.Error("wire: deferred response returned another deferred response; closing connection", requestAttrs(&it.req))
		c.Close()
		return Response{Done: resp.Done}, false
	}
	return resp, true
}

// release calls a response's Done, recovering a panic.
func (c *Conn) release(it *inflight, done func()) (ok bool) {
	if done == nil {
		return true
	}
	defer func() {
		if r := recover(); r != nil {
			c.panicked(&it.req, "Done", r)
			ok = false
		}
	}()
	done()
	return true
}

func (c *Conn) observe(it *inflight, written int64, remote time.Duration, start, end time.Time, failed error) {
	observe := c.server.cfg.Observe
	if observe == nil {
		return
	}
	o := Observation{
		ConnID:        c.id,
		Key:           it.req.Key,
		Version:       it.req.Version,
		ClientID:      it.req.ClientID,
		RequestBytes:  it.req.Size,
		ResponseBytes: written,
		Received:      it.req.Received,
		LocalTime:     it.localTime,
		RemoteTime:    remote,
		SendTime:      end.Sub(start),
		TotalTime:     end.Sub(it.req.Received),
		Err:           failed,
	}
	o.ResponseQueueTime = max(0, start.Sub(it.ready)-remote)
	observe(o)
}

// writeResponse encodes resp and writes it, splicing its file regions, and
// returns the bytes written. A handler's mistake (no body, a body for
// another key, a splice that does not match the body) is logged here.
func (c *Conn) writeResponse(it *inflight, resp *Response) (int64, error) {
	if resp.RawToken {
		var size [4]byte
		binary.BigEndian.PutUint32(size[:], uint32(len(resp.Raw)))
		if _, err := c.bw.Write(size[:]); err != nil {
			return 0, err
		}
		n, err := c.bw.Write(resp.Raw)
		return int64(n) + 4, err
	}
	enc, flexible, err := c.encode(it, resp)
	if err != nil {
		c.log.Error("wire: cannot encode response; closing connection", requestAttrs(&it.req), "err", err)
		return 0, err
	}
	defer c.keepEncodeBuffer(enc)
	if len(resp.Splices) == 0 {
		if len(enc)-4 > math.MaxInt32 {
			err := fmt.Errorf("%w: response of %d bytes exceeds a frame", errBadResponse, len(enc)-4)
			c.log.Error("wire: cannot write response; closing connection", requestAttrs(&it.req), "err", err)
			return 0, err
		}
		binary.BigEndian.PutUint32(enc, uint32(len(enc)-4))
		n, err := c.bw.Write(enc)
		return int64(n), err
	}
	points, size, err := planSplices(enc, c.headerLen(it, flexible), resp.Splices, flexible, c.points[:0])
	c.points = points[:0]
	if err != nil {
		c.log.Error("wire: cannot splice response; closing connection", requestAttrs(&it.req), "err", err)
		return 0, err
	}
	binary.BigEndian.PutUint32(enc, uint32(size))
	prev := 0
	for i := range points {
		p := &points[i]
		if _, err := c.bw.Write(enc[prev:p.prefixStart]); err != nil {
			return 0, err
		}
		if _, err := c.bw.Write(p.prefix[:p.prefixLen]); err != nil {
			return 0, err
		}
		if err := c.writeRegion(p.region); err != nil {
			var re *regionError
			if errors.As(err, &re) {
				c.log.Error("wire: cannot read spliced region; closing connection", requestAttrs(&it.req), "err", err)
			}
			return 0, err
		}
		prev = p.cookieEnd
	}
	if _, err := c.bw.Write(enc[prev:]); err != nil {
		return 0, err
	}
	return size + 4, nil
}

// headerLen is the size of the size prefix and response header.
func (c *Conn) headerLen(it *inflight, flexible bool) int {
	if flexible && it.req.Key != apiVersionsKey {
		return 9
	}
	return 8
}

// encode appends the size prefix (to be filled in), the response header and
// the body to the connection's encoding buffer. It returns the encoding and
// whether the body's version is flexible.
func (c *Conn) encode(it *inflight, resp *Response) (enc []byte, flexible bool, err error) {
	body := resp.Body
	if body == nil {
		return nil, false, fmt.Errorf("%w: no body", errBadResponse)
	}
	if body.Key() != it.req.Key {
		return nil, false, fmt.Errorf("%w: a key %d response to a key %d request", errBadResponse, body.Key(), it.req.Key)
	}
	defer func() {
		if r := recover(); r != nil {
			c.server.stats.panics.Add(1)
			err = fmt.Errorf("%w: panic encoding: %v", errBadResponse, r)
		}
	}()
	body.SetVersion(it.respVersion)
	flexible = body.IsFlexible()
	enc = append(c.enc[:0], 0, 0, 0, 0)
	enc = binary.BigEndian.AppendUint32(enc, uint32(it.req.CorrelationID))
	if flexible && it.req.Key != apiVersionsKey {
		enc = append(enc, 0) // header v1: no tagged fields
	}
	return body.AppendTo(enc), flexible, nil
}

func (c *Conn) keepEncodeBuffer(enc []byte) {
	if cap(enc) <= maxKeptEncodeBuffer {
		c.enc = enc[:0]
	} else {
		c.enc = nil
	}
}

// regionError is a failure to read a spliced file region, as opposed to a
// failure to write the socket.
type regionError struct{ err error }

func (e *regionError) Error() string { return e.err.Error() }
func (e *regionError) Unwrap() error { return e.err }

// writeRegion sends r after what is buffered: by sendfile(2) when the
// connection and the file allow it, else by copying.
func (c *Conn) writeRegion(r FileRegion) error {
	if r.Len == 0 {
		return nil
	}
	if c.sock != nil {
		if fd := r.File.Fd(); fd != NoFd {
			if err := c.bw.Flush(); err != nil {
				return err
			}
			return sendfile(c.sock, r, int(fd))
		}
	}
	return copyRegion(c.bw, r)
}
