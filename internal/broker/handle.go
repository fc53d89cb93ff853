package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/wire"
)

// handler answers one API. It runs on the connection's reader; anything
// that waits returns a Deferred response.
type handler func(b *Broker, ctx context.Context, c *wire.Conn, req *wire.Request) wire.Response

// api is everything the broker knows about one API on one listener, given
// in the API's own file (as franz-go's kfake keeps an API's checks beside
// its handler): adding an API is one register call there, and
// TestAPIDescriptors fails for an advertised API whose descriptor misses a
// part.
type api struct {
	key      kmsg.Key
	min, max int16 // the versions served
	// handle answers the request. For a forwarded API it is the active
	// controller's handler, which the client listener reaches through
	// forwardToController.
	handle handler
	// authorize is the API's authorization rule on its listener (authz.go
	// on the client listener, controllersecurity.go on the controller
	// listener).
	authorize authzRule
	// errors fills resp, the response to req, with code everywhere Kafka
	// puts an error for the request as a whole: the top-level error code
	// where the response has one, and an entry for each resource, topic or
	// partition req names. Rules refuse requests with it (and answer the
	// refused part of a request by calling it with that part); a forwarded
	// request no controller answered gets NOT_CONTROLLER from it.
	errors func(req kmsg.Request, resp kmsg.Response, code int16)
	// forwarded: clients' requests go to the active controller, which
	// answers them with handle on the controller listener.
	forwarded bool
	// controllerAuthorize is a forwarded API's rule on the controller
	// listener; nil: CLUSTER_ACTION on the cluster, as Kafka's Envelope.
	controllerAuthorize authzRule
	// staleCode, when set, is the error code besides NOT_CONTROLLER with
	// which a voter that is not the active controller answers a forwarded
	// request: the forwarding broker tries the next voter on either.
	staleCode int16
	// afterForward, when set, does the forwarding broker's part once the
	// controller answered a forwarded request.
	afterForward func(b *Broker, ctx context.Context, req kmsg.Request, resp kmsg.Response)
	// quota is how client quotas count the API's requests (quotas.go);
	// the controller listener's requests are not counted.
	quota *quotaRule
}

// apis are the client listeners' APIs, controllerAPIs the controller
// listener's (controllerapi.go), each filled by the APIs' files in init
// functions.
var (
	apis           = map[int16]*api{}
	controllerAPIs = map[int16]*api{}
)

// register adds an API to the client listeners; a forwarded one also to
// the controller listener.
func register(a api) {
	add(apis, a)
	if a.forwarded {
		c := a
		c.authorize = a.controllerAuthorize
		if c.authorize == nil {
			c.authorize = controllerRule(auth.OpClusterAction)
		}
		c.forwarded, c.controllerAuthorize, c.afterForward, c.quota = false, nil, nil, nil
		add(controllerAPIs, c)
	}
}

// registerController adds an API to the controller listener only.
func registerController(a api) { add(controllerAPIs, a) }

func add(table map[int16]*api, a api) {
	if _, dup := table[a.key.Int16()]; dup {
		panic(fmt.Sprintf("broker: API %s registered twice", kmsg.NameForKey(a.key.Int16())))
	}
	table[a.key.Int16()] = &a
}

func versionsOf(table map[int16]*api) map[int16]wire.VersionRange {
	out := make(map[int16]wire.VersionRange, len(table))
	for key, a := range table {
		out[key] = wire.VersionRange{Min: a.min, Max: a.max}
	}
	return out
}

func supportedVersions() map[int16]wire.VersionRange { return versionsOf(apis) }

// clientHandler is the API's handler on the client listeners.
func (a *api) clientHandler() handler {
	if a.forwarded {
		return (*Broker).forwardToController
	}
	return a.handle
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
	return b.enforceQuota(c, s, a, req, b.handleTimed(ctx, c, s, a, req))
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
