package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The functions here run a few Kafka requests on a connection that is then
// handed to another protocol: the controller listener's Raft connections
// authenticate with SaslHandshake and SaslAuthenticate before their Raft
// stream. A Server's and a Client's connections do not need them.

// ReadRequest reads one request frame from r and decodes it, refusing a
// frame larger than maxSize before allocating for it, and a key or version
// outside versions. The request's byte fields are its own.
func ReadRequest(r *bufio.Reader, maxSize int32, versions map[int16]VersionRange) (*Request, error) {
	table, err := newVersionTable(versions)
	if err != nil {
		return nil, err
	}
	f, err := readFrame(r, maxSize)
	if err != nil {
		return nil, err
	}
	// Copied out of the pooled frame: the body's byte fields alias it.
	buf := append([]byte(nil), f.buf...)
	putFrame(f)
	req := &Request{Received: time.Now()}
	if err := decodeRequest(buf, table, "", req); err != nil {
		return nil, err
	}
	return req, nil
}

// WriteResponse encodes resp, at req's version, as the answer to req and
// writes it to w in one Write.
func WriteResponse(w io.Writer, req *Request, resp kmsg.Response) error {
	if resp.Key() != req.Key {
		return fmt.Errorf("%w: a key %d response to a key %d request", errBadResponse, resp.Key(), req.Key)
	}
	resp.SetVersion(req.Version)
	enc := binary.BigEndian.AppendUint32(make([]byte, 4, 64), uint32(req.CorrelationID))
	if resp.IsFlexible() && req.Key != apiVersionsKey {
		enc = append(enc, 0) // header v1: no tagged fields
	}
	enc = resp.AppendTo(enc)
	binary.BigEndian.PutUint32(enc, uint32(len(enc)-4))
	_, err := w.Write(enc)
	return err
}

// Exchange sends req, at req.GetVersion(), on conn with the given
// correlation id and reads its response through r (which reads conn),
// refusing a response frame larger than maxResponse. ctx bounds the
// exchange; conn is the caller's, also when the exchange fails.
func Exchange(ctx context.Context, conn net.Conn, r *bufio.Reader, clientID string, correlation int32, req kmsg.Request, maxResponse int32) (kmsg.Response, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	conn.SetDeadline(deadline)
	// A deadline in the past when ctx ends unblocks reads and writes. Once
	// the exchange is over the deadline is cleared, unless ctx ended
	// meanwhile: the connection is then left to fail.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if stop() {
			conn.SetDeadline(time.Time{})
		}
	}()

	frame := make([]byte, 4, 256)
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.GetVersion()))
	frame = binary.BigEndian.AppendUint32(frame, uint32(correlation))
	frame = binary.BigEndian.AppendUint16(frame, uint16(len(clientID)))
	frame = append(frame, clientID...)
	if req.IsFlexible() {
		frame = append(frame, 0) // no tagged fields
	}
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	if _, err := conn.Write(frame); err != nil {
		return nil, exchangeFailed(ctx, err)
	}

	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, exchangeFailed(ctx, err)
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if maxResponse <= 0 {
		maxResponse = 100 << 20
	}
	if n < 4 || n > maxResponse {
		return nil, fmt.Errorf("wire: response of %d bytes from %s (limit %d)", n, conn.RemoteAddr(), maxResponse)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, exchangeFailed(ctx, err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != correlation {
		return nil, fmt.Errorf("wire: response correlation id %d from %s, want %d", got, conn.RemoteAddr(), correlation)
	}
	body = body[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && req.Key() != apiVersionsKey {
		var err error
		if body, err = skipTags(body); err != nil {
			return nil, fmt.Errorf("wire: response header from %s: %w", conn.RemoteAddr(), err)
		}
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("wire: decoding %s v%d from %s: %w", kmsg.NameForKey(req.Key()), req.GetVersion(), conn.RemoteAddr(), err)
	}
	return resp, nil
}

// exchangeFailed returns ctx's error when it ended the exchange, else err.
func exchangeFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %v", context.Cause(ctx), err)
	}
	return err
}
