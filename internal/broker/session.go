package broker

import (
	"fmt"
	"net"
	"time"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/wire"
)

// session is what the broker knows of one connection: the listener it
// came in on and who it acts as. It lives in the connection's value slot
// and is only changed on the connection's reader goroutine (in Handle).
type session struct {
	listener  *brokerListener
	principal auth.Principal
	// host is the client's IP address, as ACLs name hosts.
	host string
	// subject is subjectOf prepared for the authorizer of the ACLs at
	// subjectVersion (authz.go).
	subject        auth.Subject
	subjectOf      auth.Principal
	subjectVersion int64

	// saslPending is set on a SASL listener until the client has
	// authenticated; exchange is the SASL exchange under way (after
	// SaslHandshake), mechanism its name; rawTokens is set when the
	// handshake was v0 and tokens come bare.
	saslPending bool
	mechanism   string
	exchange    auth.ServerExchange
	rawTokens   bool
	// reauthenticating is set during a KIP-368 re-authentication;
	// expires is when the session ends without one (zero: never).
	reauthenticating bool
	expires          time.Time
}

// sessionOf returns the connection's session, making it at its first
// request: on a TLS listener the principal is the client certificate's
// subject mapped by ssl.principal.mapping.rules, and ANONYMOUS without
// one, as Kafka's DefaultKafkaPrincipalBuilder has it.
func (b *Broker) sessionOf(c *wire.Conn) (*session, error) {
	if s, ok := c.Value().(*session); ok {
		return s, nil
	}
	s := &session{listener: b.listenerOf(c), principal: auth.Anonymous}
	if addr, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		s.host = addr.IP.String()
	}
	s.saslPending = s.listener != nil && s.listener.sasl != nil
	if st := c.TLS(); st != nil && len(st.PeerCertificates) > 0 && !s.saslPending {
		dn := auth.SubjectDN(st.PeerCertificates[0])
		name, err := b.principalMapper.Map(dn)
		if err != nil {
			return nil, fmt.Errorf("broker: client certificate: %w", err)
		}
		s.principal = auth.User(name)
	}
	c.SetValue(s)
	return s, nil
}
