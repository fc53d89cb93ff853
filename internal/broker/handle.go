package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/wire"
)

// handler answers one API. It runs on the connection's reader; anything
// that waits returns a Deferred response.
type handler func(b *Broker, ctx context.Context, c *wire.Conn, req *wire.Request) wire.Response

// api is one implemented API key: its versions and its handler.
type api struct {
	min, max int16
	handle   handler
}

// apis is filled by each API's file in an init function, so the version
// ranges sit next to the code that implements them.
var apis = map[int16]api{}

func register(key int16, min, max int16, h handler) {
	if _, dup := apis[key]; dup {
		panic(fmt.Sprintf("broker: API key %d registered twice", key))
	}
	apis[key] = api{min: min, max: max, handle: h}
}

func supportedVersions() map[int16]wire.VersionRange {
	out := make(map[int16]wire.VersionRange, len(apis))
	for key, a := range apis {
		out[key] = wire.VersionRange{Min: a.min, Max: a.max}
	}
	return out
}

// Versions implements wire.Handler.
func (b *Broker) Versions() map[int16]wire.VersionRange { return b.versions }

// Handle implements wire.Handler.
func (b *Broker) Handle(ctx context.Context, c *wire.Conn, req *wire.Request) wire.Response {
	s, resp, done := b.admit(ctx, c, req)
	if done {
		return resp
	}
	a, ok := apis[req.Key]
	if !ok {
		// wire refuses keys outside Versions; reaching here is a bug.
		panic(fmt.Sprintf("broker: invariant: request for unregistered API key %d", req.Key))
	}
	return b.enforceQuota(c, s, req, b.handleTimed(ctx, c, s, req, a.handle))
}

// admit takes a request on any listener, the controller listener's
// included, as far as its connection's authentication allows: it returns
// the connection's session, or, with done, the answer to give instead of
// handling the request (closing a connection whose SASL session expired or
// that sends other requests before authenticating, and answering its raw
// SASL tokens).
func (b *Broker) admit(ctx context.Context, c *wire.Conn, req *wire.Request) (s *session, resp wire.Response, done bool) {
	s, err := b.sessionOf(c)
	if err != nil {
		b.logger.Info("refusing connection", "remote", c.RemoteAddr(), "listener", c.Listener(), "err", err)
		return nil, wire.Response{NoResponse: true, Close: true}, true
	}
	if b.sessionExpired(s, req.Key) {
		b.logger.Info("closing connection: SASL session expired without re-authentication", "remote", c.RemoteAddr(), "principal", s.principal, "listener", c.Listener())
		return nil, wire.Response{NoResponse: true, Close: true}, true
	}
	if s.saslPending {
		if !preAuthAllowed(req.Key) {
			// Kafka's SaslServerAuthenticator: an unexpected request
			// before authentication closes the connection.
			b.logger.Info("closing connection: request before SASL authentication", "remote", c.RemoteAddr(), "listener", c.Listener(), "api", apiName(req.Key))
			return nil, wire.Response{NoResponse: true, Close: true}, true
		}
		if req.Key == wire.RawTokenKey {
			return nil, b.handleRawToken(ctx, c, s, req.Raw), true
		}
	}
	return s, wire.Response{}, false
}

// respond wraps a body.
func respond(body kmsg.Response) wire.Response { return wire.Response{Body: body} }

// errorCode maps an error to its Kafka code: the *kerr.Error it wraps, or
// UNKNOWN_SERVER_ERROR.
func errorCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}

// errorMessage returns err's text for a response's ErrorMessage field, or
// nil for no error.
func errorMessage(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}

func itoa(v int32) string { return strconv.Itoa(int(v)) }
