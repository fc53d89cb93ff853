package wire

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Handler answers decoded requests. The broker implements it.
type Handler interface {
	// Versions returns the versions the handler implements for each API key
	// it answers. NewServer reads it once; wire refuses any other key or
	// version before Handle sees it (see the package doc). It must include
	// ApiVersions (key 18), and every range must lie within what kmsg can
	// encode and decode.
	Versions() map[int16]VersionRange

	// Handle answers one request. For one connection it is called in
	// arrival order and never concurrently; across connections it is called
	// concurrently. It must not block for long: a request that waits (for
	// replication, an fsync, fetch min bytes) returns a Deferred response.
	// ctx is canceled when the connection closes or the server is closed.
	//
	// req and its Body belong to the handler until the response has been
	// written (see the package doc on ownership); the handler may keep the
	// decoded strings, but must copy byte slices it keeps beyond that.
	Handle(ctx context.Context, c *Conn, req *Request) Response
}

// VersionRange is the inclusive range of versions a handler implements for
// one API key.
type VersionRange struct {
	Min, Max int16
}

// RawTokenKey is the Key of a Request that is a raw SASL token: after a
// SaslHandshake v0 the client sends its SASL tokens as bare size-prefixed
// frames, without a Kafka request header, and expects the server's tokens
// the same way (Kafka's pre-KIP-152 exchange, which kafka-python still
// uses). See Conn.SetRawTokens.
const RawTokenKey int16 = -1

// Request is one decoded request.
type Request struct {
	// Key and Version are the request's API key and version.
	Key, Version int16
	// CorrelationID is echoed in the response header.
	CorrelationID int32
	// ClientID is the header's client id; "" when the client sent null.
	ClientID string
	// Body is the decoded body, a kmsg.*Request matching Key, at Version.
	Body kmsg.Request
	// Raw is the frame of a RawTokenKey request; it aliases the frame
	// buffer like Body's byte fields.
	Raw []byte
	// Size is the frame size in bytes, without the 4-byte size prefix.
	Size int
	// Received is when the whole frame had been read.
	Received time.Time
}

// Response is a handler's answer to one request. Exactly one of Body,
// Deferred and NoResponse should be set.
type Response struct {
	// Body is the response; wire sets its version to the request's and
	// encodes it. Its key must match the request's.
	Body kmsg.Response

	// Splices replace cookies in the encoded Body with file regions, in
	// order; see Splice. Wire reads the files only until Done is called.
	Splices []Splice

	// Deferred, if set, is called by the connection's writer when this
	// response's turn to be written comes, off the goroutine that reads
	// and handles requests; its result is written in this response's
	// place. It may block (waiting for replication, an fsync, new data),
	// but must return soon after the ctx given to Handle is done: wire
	// calls every Deferred exactly once, also when the connection has
	// failed, so that waiters are released. A Deferred result that is
	// itself deferred is an error. Other fields of a response with
	// Deferred set are ignored, except Close and Done.
	Deferred func() Response

	// NoResponse writes nothing; for produce requests with acks=0. The
	// client does not expect an answer.
	NoResponse bool

	// RawToken writes Raw as a bare size-prefixed frame, with no response
	// header: the answer to a RawTokenKey request.
	RawToken bool
	Raw      []byte

	// Close closes the connection after this response (if any) is
	// written; wire reads no further requests once Handle returns it.
	Close bool

	// Done, if set, is called exactly once when wire no longer needs
	// anything in this response or its request: after the response was
	// written, or when it was dropped because the connection failed. The
	// handler releases what Splices refer to here (segment references).
	// It runs on the connection's writer goroutine and must not block.
	Done func()
}

// ApiVersionsKeys lists versions as the ApiKeys of an ApiVersions response,
// sorted by key, so the handler's ApiVersions answer and wire's
// UNSUPPORTED_VERSION answer advertise the same table.
func ApiVersionsKeys(versions map[int16]VersionRange) []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(versions))
	for key, r := range versions {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, r.Min, r.Max
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b kmsg.ApiVersionsResponseApiKey) int { return int(a.ApiKey) - int(b.ApiKey) })
	return keys
}
