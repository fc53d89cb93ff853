package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/wire"
)

// brokerListener is one bound client listener (every entry of listeners
// that is not a controller listener) with its security protocol.
type brokerListener struct {
	config.Listener
	ln net.Listener // TLS-wrapped for SSL and SASL_SSL
	// advertised is what metadata tells clients that came in on this
	// listener, and other brokers when it is inter.broker.listener.name.
	advertised config.Listener
	// tls is the listener's certificate store; nil without TLS.
	tls *auth.TLSStore
	// sasl is the listener's SASL setup; nil without SASL.
	sasl *saslListener
}

// listen binds every client listener. The first is the client listener
// (Addr); the one named inter.broker.listener.name is what other brokers
// dial.
func (b *Broker) listen(c config.Cluster) error {
	for _, l := range c.Brokers {
		bl := &brokerListener{Listener: l}
		if config.IsTLS(l.Protocol) {
			settings, err := auth.ListenerTLS(b.cfg, l.Name)
			if err != nil {
				return err
			}
			if bl.tls, err = auth.NewTLSStore(settings); err != nil {
				return fmt.Errorf("broker: listener %s: %w", l.Name, err)
			}
		}
		if config.IsSASL(l.Protocol) {
			var err error
			if bl.sasl, err = b.configureSASL(l); err != nil {
				return err
			}
		}
		ln, err := net.Listen("tcp", l.Addr())
		if err != nil {
			return fmt.Errorf("broker: listening on %s (%s): %w", l.Addr(), l.Name, err)
		}
		bl.advertised = b.advertisedFor(l, ln.Addr().(*net.TCPAddr), l.Name == c.Client.Name)
		if bl.tls != nil {
			tcfg, err := bl.tls.ServerConfig()
			if err != nil {
				ln.Close()
				return fmt.Errorf("broker: listener %s: %w", l.Name, err)
			}
			ln = wire.NewTLSListener(ln, tcfg)
		}
		bl.ln = ln
		b.listeners = append(b.listeners, bl)
	}
	b.advertised = b.listeners[0].advertised
	b.interBroker = b.advertised
	if ib := c.InterBroker; ib != nil {
		for _, bl := range b.listeners {
			if bl.Name == ib.Name {
				b.interBroker = bl.advertised
				b.interBrokerListener = bl
			}
		}
		if b.interBrokerListener == nil {
			return fmt.Errorf("broker: inter.broker.listener.name: %s is a controller listener", ib.Name)
		}
	}
	return nil
}

// advertisedFor is the advertised.listeners entry of the listener's name
// (for the client listener, the first entry when none has its name), or
// the bound listener with its real port (listeners may say port 0) and,
// for a wildcard host, this machine's name.
func (b *Broker) advertisedFor(l config.Listener, bound *net.TCPAddr, client bool) config.Listener {
	if adv, err := config.ParseListeners(b.cfg.List("advertised.listeners")); err == nil && len(adv) > 0 {
		for _, a := range adv {
			if a.Name == l.Name {
				return a
			}
		}
		if client {
			return adv[0]
		}
	}
	l.Port = int32(bound.Port)
	return b.advertisedListenerNamed(l)
}

// listenerOf returns the listener a connection came in on.
func (b *Broker) listenerOf(c *wire.Conn) *brokerListener {
	for _, bl := range b.listeners {
		if bl.Name == c.Listener() {
			return bl
		}
	}
	if bl := b.controllerBL; bl != nil && bl.Name == c.Listener() {
		return bl
	}
	return nil
}

// clientListenerName is the listener whose endpoints metadata answers a
// connection with: the one it came in on, as Kafka does.
func (b *Broker) clientListenerName(c *wire.Conn) string {
	if c == nil || c.Listener() == "" {
		return b.advertised.Name
	}
	return c.Listener()
}

// interBrokerOpts are the client options of connections to other brokers
// (replica fetchers): TLS when inter.broker.listener.name's protocol has it.
// They dial with Options.Dial (kgo's Dialer, which excludes its
// DialTLSConfig), wrapping the connection in TLS here.
func (b *Broker) interBrokerOpts() ([]kgo.Opt, error) {
	bl := b.interBrokerListener
	if bl == nil || (bl.tls == nil && bl.sasl == nil) {
		return []kgo.Opt{kgo.Dialer(b.dial)}, nil
	}
	var opts []kgo.Opt
	if bl.tls == nil {
		opts = append(opts, kgo.Dialer(b.dial))
	} else {
		store := bl.tls
		opts = append(opts, kgo.Dialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := b.dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			host, _, _ := net.SplitHostPort(addr)
			tc := tls.Client(conn, store.ClientConfig(host))
			if err := tc.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			return tc, nil
		}))
	}
	if bl.sasl != nil {
		opt, err := b.interBrokerSASL(bl)
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	}
	return opts, nil
}

// serveConfig is how wire serves a listener: SASL listeners take small
// frames until the client has authenticated.
func (b *Broker) serveConfig(bl *brokerListener) wire.ListenerConfig {
	lc := wire.ListenerConfig{Name: bl.Name}
	if bl.sasl != nil {
		lc.MaxRequestSize = int32(b.cfg.Int("sasl.server.max.receive.size"))
	}
	return lc
}

// closeListeners closes every client listener.
func (b *Broker) closeListeners() error {
	var errs []error
	for _, bl := range b.listeners {
		errs = append(errs, bl.ln.Close())
	}
	return errors.Join(errs...)
}
