package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/wire"
)

// The controller listener's security, as KRaft has it: the listener named
// first in controller.listener.names takes its protocol from
// listener.security.protocol.map (PLAINTEXT, SSL, SASL_PLAINTEXT or
// SASL_SSL) and its settings from listener.name.<name>.…; every node that
// dials it (a voter's Raft peers, a broker's controller client and
// metadata observer) uses the same listener's TLS settings and, on a SASL
// listener, authenticates with sasl.mechanism.controller.protocol and the
// username and password of that mechanism's sasl.jaas.config.
//
// What comes in is authorized as Kafka's ControllerApis authorizes it,
// when authorizer.class.name is set: a Raft connection needs CLUSTER_ACTION
// on the cluster (Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch and the
// raft Fetch), checked once it has authenticated and then every second
// while it is open (watchRaft); so do BrokerRegistration,
// BrokerHeartbeat, AlterPartition, AllocateProducerIds, the metadata Fetch
// and FetchSnapshot, and the admin requests brokers forward (the broker
// has authorized them as its client's principal, and forwarding needs
// CLUSTER_ACTION as Kafka's Envelope does). DescribeQuorum needs DESCRIBE
// (or CLUSTER_ACTION) on the cluster; ApiVersions and the SASL exchange
// need nothing. Refused requests are answered CLUSTER_AUTHORIZATION_FAILED.
// As in Kafka, the principals brokers and controllers use should be
// super.users: the ACLs live in the metadata log that these connections
// carry, so a node that starts knows none of them yet.

// controllerSecurity is how this node dials the controller listener.
type controllerSecurity struct {
	name, protocol string
	// tls is the listener's certificate store (also the client
	// certificate for a listener that requires one); nil without TLS.
	tls *auth.TLSStore
	// mechanism authenticates this node on a SASL listener; nil without.
	mechanism sasl.Mechanism
}

// setupControllerSecurity reads the controller listener's protocol and
// what this node needs to dial it. A node alone has none.
func (b *Broker) setupControllerSecurity() error {
	if b.cluster.Alone {
		return nil
	}
	var name string
	if l := b.cluster.Controller; l != nil {
		name = l.Name
	} else if names := b.cfg.List("controller.listener.names"); len(names) > 0 {
		name = strings.ToUpper(names[0])
	} else {
		return fmt.Errorf("broker: controller.listener.names is empty: the controllers' listener is unknown")
	}
	protocols, err := b.cfg.ProtocolMap()
	if err != nil {
		return err
	}
	cs := &controllerSecurity{name: name, protocol: protocols[name]}
	if cs.protocol == "" {
		return fmt.Errorf("broker: listener.security.protocol.map: the controller listener %s has no security protocol", name)
	}
	if config.IsTLS(cs.protocol) {
		settings, err := auth.ListenerTLS(b.cfg, name)
		if err != nil {
			return err
		}
		if cs.tls, err = auth.NewTLSStore(settings); err != nil {
			return fmt.Errorf("broker: controller listener %s: %w", name, err)
		}
	}
	if config.IsSASL(cs.protocol) {
		if cs.mechanism, err = b.clientMechanism(name, "sasl.mechanism.controller.protocol", "controller listener"); err != nil {
			return err
		}
	}
	b.controllerSec = cs
	return nil
}

// dialControllerTLS connects to a controller listener, in TLS when it has
// it.
func (b *Broker) dialControllerTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := b.dial(ctx, network, addr)
	if err != nil || b.controllerSec == nil || b.controllerSec.tls == nil {
		return conn, err
	}
	host, _, _ := net.SplitHostPort(addr)
	tc := tls.Client(conn, b.controllerSec.tls.ClientConfig(host))
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("broker: TLS to the controller listener at %s: %w", addr, err)
	}
	return tc, nil
}

// dialController connects to a controller listener for its Kafka
// protocol: in TLS when it has it, and authenticated on a SASL listener.
func (b *Broker) dialController(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := b.dialControllerTLS(ctx, network, addr)
	if err != nil || b.controllerSec == nil || b.controllerSec.mechanism == nil {
		return conn, err
	}
	lifetime, err := b.authenticateToController(ctx, conn, addr)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if lifetime > 0 {
		// Redial before the session ends, as Kafka clients re-authenticate
		// at 85-95% of it: the controller closes a connection whose
		// session expired at its next request.
		return &expiringConn{Conn: conn, expires: time.Now().Add(lifetime * 85 / 100)}, nil
	}
	return conn, nil
}

// expiringConn is a connection whose SASL session ends at expires; wire's
// Client redials rather than use it after that.
type expiringConn struct {
	net.Conn
	expires time.Time
}

// Expired implements what wire.Client asks of a connection before it
// sends on it.
func (c *expiringConn) Expired() bool { return !time.Now().Before(c.expires) }

// authenticateToController runs the client's side of a SASL exchange on a
// connection to the controller listener: SaslHandshake v1, then
// SaslAuthenticate until the mechanism is done. It returns the session's
// lifetime, zero when it does not expire.
func (b *Broker) authenticateToController(ctx context.Context, conn net.Conn, addr string) (time.Duration, error) {
	m := b.controllerSec.mechanism
	r := bufio.NewReader(conn)
	clientID := "strata-node-" + itoa(b.nodeID)
	corr := int32(0)
	exchange := func(req kmsg.Request) (kmsg.Response, error) {
		corr++
		return wire.Exchange(ctx, conn, r, clientID, corr, req, 1<<20)
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, m.Name()
	resp, err := exchange(hs)
	if err != nil {
		return 0, fmt.Errorf("broker: SaslHandshake with the controller listener at %s: %w", addr, err)
	}
	if err := kerr.ErrorForCode(resp.(*kmsg.SASLHandshakeResponse).ErrorCode); err != nil {
		return 0, fmt.Errorf("broker: SaslHandshake with the controller listener at %s (%s): %w", addr, m.Name(), err)
	}
	host, _, _ := net.SplitHostPort(addr)
	session, token, err := m.Authenticate(ctx, host)
	if err != nil {
		return 0, fmt.Errorf("broker: SASL %s: %w", m.Name(), err)
	}
	for {
		ar := kmsg.NewPtrSASLAuthenticateRequest()
		ar.Version, ar.SASLAuthBytes = 1, token
		resp, err := exchange(ar)
		if err != nil {
			return 0, fmt.Errorf("broker: SaslAuthenticate with the controller listener at %s: %w", addr, err)
		}
		r := resp.(*kmsg.SASLAuthenticateResponse)
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = *r.ErrorMessage
			}
			return 0, fmt.Errorf("broker: authenticating to the controller listener at %s with %s: %w: %s", addr, m.Name(), err, msg)
		}
		done, next, err := session.Challenge(r.SASLAuthBytes)
		if err != nil {
			return 0, fmt.Errorf("broker: SASL %s with the controller listener at %s: %w", m.Name(), addr, err)
		}
		if done {
			return time.Duration(r.SessionLifetimeMillis) * time.Millisecond, nil
		}
		token = next
	}
}

// raftDial and raftAuthenticate are the quorum transport's: TLS from the
// start, and the SASL exchange after Magic.
func (b *Broker) raftDial(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	return b.dialControllerTLS(ctx, network, addr)
}

func (b *Broker) raftAuthenticate() func(net.Conn) error {
	if b.controllerSec == nil || b.controllerSec.mechanism == nil {
		return nil
	}
	return func(conn net.Conn) error {
		ctx, cancel := context.WithTimeout(b.ctx, raftAuthTimeout)
		defer cancel()
		_, err := b.authenticateToController(ctx, conn, conn.RemoteAddr().String())
		return err
	}
}

// raftAuthTimeout bounds a Raft connection's authentication, both sides.
const raftAuthTimeout = 10 * time.Second

// errRaftRefused is returned for a Raft connection that did not
// authenticate or whose principal may not take part in the quorum.
var errRaftRefused = errors.New("broker: raft connection refused")

// admitRaft authenticates and authorizes a Raft connection on the
// controller listener, whose Magic has been read from r: a SASL exchange
// on a SASL listener, the client certificate's principal on an SSL
// listener (ANONYMOUS without one), then CLUSTER_ACTION on the cluster.
func (b *Broker) admitRaft(conn net.Conn, r *bufio.Reader) (auth.Principal, error) {
	bl := b.controllerBL
	host := ""
	if addr, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		host = addr.IP.String()
	}
	p := auth.Anonymous
	switch tc, isTLS := conn.(interface{ ConnectionState() tls.ConnectionState }); {
	case bl.sasl != nil:
		var err error
		if p, err = b.raftSASL(conn, r, bl.sasl); err != nil {
			return p, err
		}
	case isTLS:
		if st := tc.ConnectionState(); len(st.PeerCertificates) > 0 {
			name, err := b.principalMapper.Map(auth.SubjectDN(st.PeerCertificates[0]))
			if err != nil {
				return p, fmt.Errorf("%w: client certificate: %v", errRaftRefused, err)
			}
			p = auth.User(name)
		}
	}
	if !b.mayClusterAction(p, host) {
		return p, fmt.Errorf("%w: %v lacks CLUSTER_ACTION on the cluster", errRaftRefused, p)
	}
	return p, nil
}

// raftRecheckInterval is how often an admitted Raft connection's right to
// stay is checked (watchRaft).
const raftRecheckInterval = time.Second

// watchRaft closes an admitted Raft connection once its principal may no
// longer do CLUSTER_ACTION (its ACL was deleted: Kafka authorizes each
// Vote and raft Fetch, a Raft stream here is checked every
// raftRecheckInterval), and, on a SASL listener with
// connections.max.reauth.ms, once that has passed since it authenticated:
// the peer dials again and authenticates afresh, where a Kafka connection
// would re-authenticate (KIP-368). It returns the function that ends the
// watch.
func (b *Broker) watchRaft(conn net.Conn, p auth.Principal) func() {
	var expires time.Time
	if d := b.reauthLifetime(); d > 0 && b.controllerBL.sasl != nil {
		expires = b.now().Add(d)
	}
	if b.controllerAuthorizer() == nil && expires.IsZero() {
		return func() {}
	}
	host := ""
	if addr, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		host = addr.IP.String()
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(raftRecheckInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-b.ctx.Done():
				return
			case <-t.C:
			}
			switch {
			case !b.mayClusterAction(p, host):
				b.logger.Warn("closing a raft connection: its principal lost CLUSTER_ACTION on the cluster", "principal", p, "remote", conn.RemoteAddr().String())
			case !expires.IsZero() && b.now().After(expires):
				b.logger.Debug("closing a raft connection: connections.max.reauth.ms passed; the peer authenticates again", "principal", p, "remote", conn.RemoteAddr().String())
			default:
				continue
			}
			conn.Close()
			return
		}
	}()
	return func() { close(done) }
}

// raftVersions are the requests a Raft connection authenticates with.
var raftVersions = map[int16]wire.VersionRange{
	kmsg.ApiVersions.Int16():      {Min: 0, Max: 4},
	kmsg.SASLHandshake.Int16():    {Min: 1, Max: 1},
	kmsg.SASLAuthenticate.Int16(): {Min: 0, Max: 2},
}

// raftSASL runs the server's side of a Raft connection's SASL exchange
// and returns the principal it authenticated. A failure is answered
// SASL_AUTHENTICATION_FAILED after connection.failed.authentication.delay.ms.
func (b *Broker) raftSASL(conn net.Conn, r *bufio.Reader, sl *saslListener) (auth.Principal, error) {
	conn.SetDeadline(time.Now().Add(raftAuthTimeout))
	defer conn.SetDeadline(time.Time{})
	limit := int32(b.cfg.Int("sasl.server.max.receive.size"))
	var exchange auth.ServerExchange
	var mechanism string
	for {
		req, err := wire.ReadRequest(r, limit, raftVersions)
		if err != nil {
			return auth.Principal{}, fmt.Errorf("%w: %v", errRaftRefused, err)
		}
		switch body := req.Body.(type) {
		case *kmsg.ApiVersionsRequest:
			resp := body.ResponseKind().(*kmsg.ApiVersionsResponse)
			resp.ApiKeys = wire.ApiVersionsKeys(raftVersions)
			if err := wire.WriteResponse(conn, req, resp); err != nil {
				return auth.Principal{}, fmt.Errorf("%w: %v", errRaftRefused, err)
			}
		case *kmsg.SASLHandshakeRequest:
			resp := body.ResponseKind().(*kmsg.SASLHandshakeResponse)
			resp.SupportedMechanisms = sl.mechanisms
			var refused error
			switch {
			case exchange != nil:
				resp.ErrorCode, refused = kerr.IllegalSaslState.Code, errors.New("a second SaslHandshake")
			case !slices.Contains(sl.mechanisms, body.Mechanism):
				resp.ErrorCode, refused = kerr.UnsupportedSaslMechanism.Code, fmt.Errorf("mechanism %s not enabled", body.Mechanism)
			default:
				mechanism, exchange = body.Mechanism, b.newServerExchange(sl, body.Mechanism)
			}
			if err := wire.WriteResponse(conn, req, resp); err != nil || refused != nil {
				return auth.Principal{}, fmt.Errorf("%w: %v", errRaftRefused, errors.Join(refused, err))
			}
		case *kmsg.SASLAuthenticateRequest:
			resp := body.ResponseKind().(*kmsg.SASLAuthenticateResponse)
			if exchange == nil {
				resp.ErrorCode = kerr.IllegalSaslState.Code
				wire.WriteResponse(conn, req, resp)
				return auth.Principal{}, fmt.Errorf("%w: SaslAuthenticate before SaslHandshake", errRaftRefused)
			}
			reply, done, err := exchange.Step(body.SASLAuthBytes)
			if err != nil {
				b.logger.Info("failed authentication of a raft connection", "remote", conn.RemoteAddr(), "mechanism", mechanism, "user", exchange.Principal().Name, "err", err)
				b.authFailureDelay()
				resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
				msg := fmt.Sprintf("Authentication failed during authentication due to invalid credentials with SASL mechanism %s", mechanism)
				resp.ErrorMessage = &msg
				wire.WriteResponse(conn, req, resp)
				return auth.Principal{}, fmt.Errorf("%w: %v", errRaftRefused, err)
			}
			resp.SASLAuthBytes = reply
			if err := wire.WriteResponse(conn, req, resp); err != nil {
				return auth.Principal{}, fmt.Errorf("%w: %v", errRaftRefused, err)
			}
			if done {
				return exchange.Principal(), nil
			}
		}
	}
}

// authFailureDelay waits connection.failed.authentication.delay.ms, or
// until the node stops.
func (b *Broker) authFailureDelay() {
	delay := time.Duration(b.cfg.Int("connection.failed.authentication.delay.ms")) * time.Millisecond
	if delay <= 0 {
		return
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.ctx.Done():
	}
}

// controllerAuthorizer is the authorizer, nil with authorization off.
// Before this node has a metadata image (its voter starting, before the
// quorum has replayed the log that holds the ACLs) it knows only
// super.users, as Kafka's StandardAuthorizer serves the controller
// listener before its first load.
func (b *Broker) controllerAuthorizer() *auth.Authorizer {
	if !b.authzOn {
		return nil
	}
	if b.image.Load() == nil {
		return auth.NewAuthorizer(nil, splitSuperUsers(b.cfg.String("super.users")), false)
	}
	return b.authorizerNow()
}

// mayClusterAction reports whether p, from host, may do CLUSTER_ACTION on
// the cluster: always with authorization off.
func (b *Broker) mayClusterAction(p auth.Principal, host string) bool {
	az := b.controllerAuthorizer()
	if az == nil {
		return true
	}
	subject := az.Subject(p)
	return subject.Super() || az.Check(subject, host, auth.OpClusterAction, auth.ResourceCluster, auth.ClusterName)
}

// authorizeController authorizes a request on the controller listener's
// Kafka side with its API's rule; see the file's doc.
func (b *Broker) authorizeController(ctx context.Context, c *wire.Conn, s *session, a *api, req *wire.Request) wire.Response {
	az := b.controllerAuthorizer()
	if az == nil {
		return a.handle(b, ctx, c, req)
	}
	subject := az.Subject(s.principal)
	if subject.Super() {
		return a.handle(b, ctx, c, req)
	}
	return a.authorize(b, access{az: az, p: s.principal, subject: subject, host: s.host, img: b.image.Load(), api: a}, ctx, c, req, a.handle)
}

// controllerRule is the rule of a controller-listener API: any of ops on
// the cluster, or CLUSTER_AUTHORIZATION_FAILED.
func controllerRule(ops ...int8) authzRule {
	return func(b *Broker, a access, ctx context.Context, c *wire.Conn, req *wire.Request, next handler) wire.Response {
		for _, op := range ops {
			if a.cluster(op) {
				return next(b, ctx, c, req)
			}
		}
		b.logger.Info("refusing a controller request: no CLUSTER_ACTION on the cluster", "api", kmsg.NameForKey(req.Key), "principal", a.p, "remote", c.RemoteAddr())
		return a.refuse(req, clusterDenied)
	}
}

// peekedTLSConn is a peekedConn over TLS: wire sees its TLS state.
type peekedTLSConn struct {
	*peekedConn
	tls interface {
		ConnectionState() tls.ConnectionState
		HandshakeContext(ctx context.Context) error
	}
}

func (c *peekedTLSConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }
func (c *peekedTLSConn) HandshakeContext(ctx context.Context) error {
	return c.tls.HandshakeContext(ctx)
}

// handOver wraps a controller-listener connection whose first bytes were
// read into r for the Kafka-protocol server.
func handOver(conn net.Conn, r *bufio.Reader) net.Conn {
	pc := &peekedConn{Conn: conn, r: r}
	if tc, ok := conn.(interface {
		ConnectionState() tls.ConnectionState
		HandshakeContext(ctx context.Context) error
	}); ok {
		return &peekedTLSConn{peekedConn: pc, tls: tc}
	}
	return pc
}

// handleControllerApiVersions answers ApiVersions on the controller
// listener with the controller's APIs.
func (b *Broker) handleControllerApiVersions(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	resp := req.Body.(*kmsg.ApiVersionsRequest).ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = wire.ApiVersionsKeys(controllerHandler{b}.Versions())
	return respond(resp)
}
