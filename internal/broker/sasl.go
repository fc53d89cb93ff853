package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/wire"
)

// SaslHandshake: v0-1. SaslAuthenticate: v0-2.
//
// A SASL listener's connection starts unauthenticated, as in Kafka's
// SaslServerAuthenticator: it may send ApiVersions and SaslHandshake, then
// SaslAuthenticate requests (handshake v1) or bare tokens (handshake v0,
// the pre-KIP-152 exchange kafka-python uses); any other request closes
// it, and its frames are limited to sasl.server.max.receive.size until it
// has authenticated. A failed authentication answers
// SASL_AUTHENTICATION_FAILED (v1 handshakes; a v0 exchange has no way to
// say so) after connection.failed.authentication.delay.ms and closes the
// connection; it is logged with the user name and the client's address.
// With connections.max.reauth.ms set, a session lasts that long
// (KIP-368): SaslAuthenticate v1+ tells the client (SessionLifetimeMillis),
// the client runs SaslHandshake and SaslAuthenticate again on the same
// connection before then, with the same mechanism and as the same
// principal, and a connection whose session expired is closed at its next
// request.
func init() {
	for _, a := range []api{
		{key: kmsg.SASLHandshake, min: 0, max: 1, handle: (*Broker).handleSaslHandshake, errors: saslHandshakeErrors},
		{key: kmsg.SASLAuthenticate, min: 0, max: 2, handle: (*Broker).handleSaslAuthenticate, errors: saslAuthenticateErrors},
	} {
		// Any connection may authenticate, on either listener.
		a.authorize = authorizeNothing
		registerController(a)
		a.quota = requestTime
		register(a)
	}
}

// supportedMechanisms are the SASL mechanisms Strata implements.
var supportedMechanisms = []string{auth.MechanismPlain, auth.MechanismScramSHA256, auth.MechanismScramSHA512, auth.MechanismOAuthBearer}

// saslListener is what a SASL listener needs: the mechanisms it offers and
// PLAIN's users.
type saslListener struct {
	mechanisms []string
	plainUsers auth.PlainUsers
	jwt        *auth.JWTValidator // OAUTHBEARER's
	jwks       *auth.JWKSFetcher  // keeps jwt's keys fresh from an https:// endpoint; nil for a file
}

// configureSASL reads a SASL listener's mechanisms and PLAIN users.
func (b *Broker) configureSASL(l config.Listener) (*saslListener, error) {
	sl := &saslListener{}
	for _, m := range b.cfg.ListenerList(l.Name, "sasl.enabled.mechanisms") {
		if slices.Contains(supportedMechanisms, m) {
			sl.mechanisms = append(sl.mechanisms, m)
		} else {
			b.logger.Warn("SASL mechanism not supported; not offered", "listener", l.Name, "mechanism", m)
		}
	}
	if len(sl.mechanisms) == 0 {
		return nil, fmt.Errorf("broker: listener %s (%s): sasl.enabled.mechanisms offers none of %v", l.Name, l.Protocol, supportedMechanisms)
	}
	if slices.Contains(sl.mechanisms, auth.MechanismPlain) {
		jaas := b.cfg.ListenerMechanismString(l.Name, auth.MechanismPlain, "sasl.jaas.config")
		if jaas == "" {
			return nil, fmt.Errorf("broker: listener %s offers PLAIN but has no sasl.jaas.config with its users (listener.name.%s.plain.sasl.jaas.config)", l.Name, toLower(l.Name))
		}
		users, _, _, err := auth.ParseJAASUsers(jaas)
		if err != nil {
			return nil, fmt.Errorf("broker: listener %s: %w", l.Name, err)
		}
		sl.plainUsers = users
	}
	if slices.Contains(sl.mechanisms, auth.MechanismOAuthBearer) {
		get := func(key string) string { return b.cfg.ListenerMechanismString(l.Name, auth.MechanismOAuthBearer, key) }
		jwks := get("sasl.oauthbearer.jwks.endpoint.url")
		scheme, _, _ := strings.Cut(strings.ToLower(jwks), "://")
		if jwks == "" || scheme == "http" {
			return nil, fmt.Errorf("broker: listener %s offers OAUTHBEARER: sasl.oauthbearer.jwks.endpoint.url must name a JWKS file (file:///path) or an https:// endpoint", l.Name)
		}
		skew, _ := strconv.Atoi(get("sasl.oauthbearer.clock.skew.seconds"))
		sl.jwt = &auth.JWTValidator{
			Audience:  config.SplitList(get("sasl.oauthbearer.expected.audience")),
			Issuer:    get("sasl.oauthbearer.expected.issuer"),
			SubClaim:  get("sasl.oauthbearer.sub.claim.name"),
			ClockSkew: time.Duration(skew) * time.Second,
		}
		if scheme != "https" {
			sl.jwt.Path = jwks
			if err := sl.jwt.Load(); err != nil {
				return nil, fmt.Errorf("broker: listener %s: %w", l.Name, err)
			}
			return sl, nil
		}
		ms := func(key string) time.Duration {
			n, _ := strconv.ParseInt(get(key), 10, 64)
			return time.Duration(n) * time.Millisecond
		}
		fetcher, err := auth.NewJWKSFetcher(sl.jwt, auth.JWKSFetcherOptions{
			URL:             jwks,
			JAAS:            b.cfg.ListenerMechanismString(l.Name, auth.MechanismOAuthBearer, "sasl.jaas.config"),
			Refresh:         ms("sasl.oauthbearer.jwks.endpoint.refresh.ms"),
			RetryBackoff:    ms("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"),
			RetryBackoffMax: ms("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"),
			Logger:          b.logger.With("listener", l.Name),
		})
		if err != nil {
			return nil, fmt.Errorf("broker: listener %s: %w", l.Name, err)
		}
		// As Kafka's RefreshingHttpsJwks.init: no keys, no listener. (The
		// fetch is bounded by its HTTP client's timeout.)
		if err := fetcher.Fetch(context.Background()); err != nil {
			return nil, fmt.Errorf("broker: listener %s: %w", l.Name, err)
		}
		sl.jwks = fetcher
	}
	return sl, nil
}

// startJWKSRefresh keeps the https:// JWKS of every OAUTHBEARER listener
// fresh until the broker closes.
func (b *Broker) startJWKSRefresh() {
	for _, bl := range b.listeners {
		if bl.sasl == nil || bl.sasl.jwks == nil {
			continue
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			bl.sasl.jwks.Run(b.ctx)
		}()
	}
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// interBrokerSASL returns the client option that authenticates this
// broker to the inter-broker listener, when it is a SASL listener.
func (b *Broker) interBrokerSASL(bl *brokerListener) (kgo.Opt, error) {
	m, err := b.clientMechanism(bl.Name, "sasl.mechanism.inter.broker.protocol", "inter.broker.listener.name")
	if err != nil {
		return nil, err
	}
	return kgo.SASL(m), nil
}

// clientMechanism is the SASL mechanism this node authenticates to a SASL
// listener with: the one mechanismKey names (sasl.mechanism.inter.broker.protocol,
// sasl.mechanism.controller.protocol), with the username and password of
// its sasl.jaas.config for that listener. role names the listener in
// errors.
func (b *Broker) clientMechanism(listener, mechanismKey, role string) (sasl.Mechanism, error) {
	mech := b.cfg.ListenerString(listener, mechanismKey)
	jaas := b.cfg.ListenerMechanismString(listener, mech, "sasl.jaas.config")
	_, user, pass, err := auth.ParseJAASUsers(jaas)
	if jaas == "" || err != nil || user == "" {
		return nil, fmt.Errorf("broker: %s %s is a SASL listener: its %s sasl.jaas.config needs username and password (%v)", role, listener, mech, err)
	}
	switch mech {
	case auth.MechanismPlain:
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case auth.MechanismScramSHA256:
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case auth.MechanismScramSHA512:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("broker: %s=%s is not supported (%s, %s, %s)", mechanismKey, mech, auth.MechanismPlain, auth.MechanismScramSHA256, auth.MechanismScramSHA512)
}

// preAuthAllowed are the requests a SASL connection may send before it
// has authenticated.
func preAuthAllowed(key int16) bool {
	switch key {
	case kmsg.ApiVersions.Int16(), kmsg.SASLHandshake.Int16(), kmsg.SASLAuthenticate.Int16(), wire.RawTokenKey:
		return true
	}
	return false
}

func (b *Broker) handleSaslHandshake(_ context.Context, c *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.SASLHandshakeRequest)
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	s, _ := b.sessionOf(c)
	reauth := !s.saslPending && s.listener != nil && s.listener.sasl != nil && b.reauthLifetime() > 0 && r.Version >= 1
	if (!s.saslPending && !reauth) || s.exchange != nil {
		// Not a SASL listener, or a second handshake.
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return wire.Response{Body: resp, Close: s.saslPending || reauth}
	}
	sl := s.listener.sasl
	resp.SupportedMechanisms = sl.mechanisms
	if reauth && r.Mechanism != s.mechanism {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		b.logger.Info("failed re-authentication: another mechanism", "remote", c.RemoteAddr(), "principal", s.principal, "mechanism", r.Mechanism, "was", s.mechanism)
		return wire.Response{Body: resp, Close: true}
	}
	s.reauthenticating = reauth
	if !slices.Contains(sl.mechanisms, r.Mechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		b.logger.Info("failed authentication: unsupported SASL mechanism", "remote", c.RemoteAddr(), "listener", c.Listener(), "mechanism", r.Mechanism)
		return wire.Response{Body: resp, Close: true}
	}
	s.mechanism = r.Mechanism
	s.exchange = b.newServerExchange(sl, r.Mechanism)
	if r.Version == 0 {
		s.rawTokens = true
		c.SetRawTokens(true)
	}
	return respond(resp)
}

// newServerExchange starts the server's side of a SASL exchange with one
// of the listener's mechanisms.
func (b *Broker) newServerExchange(sl *saslListener, mechanism string) auth.ServerExchange {
	switch mechanism {
	case auth.MechanismPlain:
		return auth.NewPlainServer(sl.plainUsers)
	case auth.MechanismOAuthBearer:
		return auth.NewOAuthBearerServer(sl.jwt, b.now)
	default:
		m, _ := auth.ScramMechanismByName(mechanism)
		return auth.NewScramServer(m, b.scramLookup)
	}
}

// scramLookup finds a SCRAM credential in the metadata image.
func (b *Broker) scramLookup(user string, m auth.ScramMechanism) (auth.ScramCredential, bool) {
	c, ok := b.image.Load().ScramCredentialOf(user, int8(m))
	if !ok {
		return auth.ScramCredential{}, false
	}
	return auth.ScramCredential{Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey, Iterations: c.Iterations}, true
}

func (b *Broker) handleSaslAuthenticate(ctx context.Context, c *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.SASLAuthenticateRequest)
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	s, _ := b.sessionOf(c)
	if (!s.saslPending && !s.reauthenticating) || s.exchange == nil || s.rawTokens {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		msg := "SaslAuthenticate outside a SASL exchange"
		resp.ErrorMessage = &msg
		return wire.Response{Body: resp, Close: s.saslPending}
	}
	reply, done, err := s.exchange.Step(r.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := fmt.Sprintf("Authentication failed during authentication due to invalid credentials with SASL mechanism %s", s.mechanism)
		resp.ErrorMessage = &msg
		return b.failAuthentication(ctx, c, s, err, wire.Response{Body: resp, Close: true})
	}
	resp.SASLAuthBytes = reply
	if done {
		if s.reauthenticating && s.exchange.Principal() != s.principal {
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			msg := "re-authentication as another principal"
			resp.ErrorMessage = &msg
			return b.failAuthentication(ctx, c, s, fmt.Errorf("%w: re-authenticated as %v, was %v", auth.ErrAuthenticationFailed, s.exchange.Principal(), s.principal), wire.Response{Body: resp, Close: true})
		}
		b.authenticated(c, s)
		resp.SessionLifetimeMillis = b.reauthLifetime().Milliseconds()
	}
	return respond(resp)
}

// handleRawToken answers one bare SASL token of a v0 handshake's exchange.
func (b *Broker) handleRawToken(ctx context.Context, c *wire.Conn, s *session, token []byte) wire.Response {
	reply, done, err := s.exchange.Step(token)
	if err != nil {
		return b.failAuthentication(ctx, c, s, err, wire.Response{NoResponse: true, Close: true})
	}
	if done {
		c.SetRawTokens(false)
		s.rawTokens = false
		b.authenticated(c, s)
	}
	return wire.Response{RawToken: true, Raw: reply}
}

// authenticated ends a connection's SASL exchange successfully.
func (b *Broker) authenticated(c *wire.Conn, s *session) {
	s.principal = s.exchange.Principal()
	s.saslPending, s.exchange, s.reauthenticating = false, nil, false
	if d := b.reauthLifetime(); d > 0 {
		s.expires = b.now().Add(d)
	}
	c.SetMaxRequestSize(int32(b.cfg.Int("socket.request.max.bytes")))
	b.logger.Debug("authenticated", "principal", s.principal, "mechanism", s.mechanism, "remote", c.RemoteAddr(), "listener", c.Listener())
}

// reauthLifetime is connections.max.reauth.ms; 0 when sessions do not
// expire.
func (b *Broker) reauthLifetime() time.Duration {
	return time.Duration(b.cfg.Int("connections.max.reauth.ms")) * time.Millisecond
}

// sessionExpired reports a SASL session past its lifetime that has not
// re-authenticated; its connection is closed (KIP-368).
func (b *Broker) sessionExpired(s *session, key int16) bool {
	if s.expires.IsZero() || s.reauthenticating || !b.now().After(s.expires) {
		return false
	}
	return key != kmsg.SASLHandshake.Int16() && key != kmsg.SASLAuthenticate.Int16()
}

// failAuthentication logs a failed authentication and holds its answer
// back by connection.failed.authentication.delay.ms, as Kafka does.
func (b *Broker) failAuthentication(ctx context.Context, c *wire.Conn, s *session, err error, resp wire.Response) wire.Response {
	user := ""
	if p := s.exchange.Principal(); p.Name != "" {
		user = p.Name
	}
	level := "invalid credentials"
	if errors.Is(err, auth.ErrBadMessage) {
		level = "malformed exchange"
	}
	b.logger.Info("failed authentication: "+level, "remote", c.RemoteAddr(), "listener", c.Listener(), "mechanism", s.mechanism, "user", user, "err", err)
	s.exchange = nil
	delay := time.Duration(b.cfg.Int("connection.failed.authentication.delay.ms")) * time.Millisecond
	if delay <= 0 {
		return resp
	}
	return wire.Response{Close: true, Deferred: func() wire.Response {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return resp
	}}
}

func saslHandshakeErrors(_ kmsg.Request, resp kmsg.Response, code int16) {
	resp.(*kmsg.SASLHandshakeResponse).ErrorCode = code
}

func saslAuthenticateErrors(_ kmsg.Request, resp kmsg.Response, code int16) {
	resp.(*kmsg.SASLAuthenticateResponse).ErrorCode = code
}
