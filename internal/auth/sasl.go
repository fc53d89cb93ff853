package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
)

// SASL mechanism names, as clients send them in SaslHandshake.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// ErrAuthenticationFailed is returned by an exchange whose client gave a
// wrong name or secret; the broker answers SASL_AUTHENTICATION_FAILED. It
// never says which of the two was wrong.
var ErrAuthenticationFailed = errors.New("auth: authentication failed: invalid credentials")

// ErrBadMessage is returned for a client message that does not parse.
var ErrBadMessage = errors.New("auth: malformed SASL message")

// ServerExchange is the server side of one SASL authentication. Step takes
// the client's next message and returns the reply to send; done is set
// when the client is authenticated (the reply is then the last one).
// After done, Principal is who the client is. Not safe for concurrent use;
// a connection runs one exchange at a time.
type ServerExchange interface {
	Step(msg []byte) (reply []byte, done bool, err error)
	Principal() Principal
}

// equalSecrets compares two secrets in constant time, lengths included
// (both are hashed first, so a wrong guess's length does not show).
func equalSecrets(a, b []byte) bool {
	ha, hb := sha256.Sum256(a), sha256.Sum256(b)
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// PlainUsers are the users of the PLAIN mechanism, name to password.
type PlainUsers map[string]string

// ParseJAASUsers reads the user_<name>="<password>" options of a JAAS
// configuration for Kafka's PlainLoginModule, e.g.
//
//	org.apache.kafka.common.security.plain.PlainLoginModule required
//	    username="admin" password="admin-secret"
//	    user_admin="admin-secret" user_alice="alice-secret";
//
// and its username and password (what this broker sends to others).
func ParseJAASUsers(jaas string) (users PlainUsers, username, password string, err error) {
	opts, err := parseJAASOptions(jaas)
	if err != nil {
		return nil, "", "", err
	}
	users = PlainUsers{}
	for k, v := range opts {
		if name, ok := strings.CutPrefix(k, "user_"); ok {
			users[name] = v
		}
	}
	return users, opts["username"], opts["password"], nil
}

// parseJAASOptions parses "LoginModule flag key=value ... ;" with values
// quoted ("...") or bare.
func parseJAASOptions(jaas string) (map[string]string, error) {
	s := strings.TrimSpace(jaas)
	s = strings.TrimSuffix(s, ";")
	fields := strings.Fields(s)
	if len(fields) < 2 {
		return nil, fmt.Errorf("auth: sasl.jaas.config: want \"LoginModule required key=\\\"value\\\" ...;\"")
	}
	// Skip the login module class and its control flag.
	rest := strings.TrimSpace(s)
	for range 2 {
		i := strings.IndexAny(rest, " \t\n")
		if i < 0 {
			rest = ""
			break
		}
		rest = strings.TrimSpace(rest[i:])
	}
	opts := map[string]string{}
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("auth: sasl.jaas.config: bad option near %q", rest)
		}
		key := strings.TrimSpace(rest[:eq])
		rest = strings.TrimSpace(rest[eq+1:])
		var value string
		if strings.HasPrefix(rest, "\"") {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("auth: sasl.jaas.config: unterminated quote in %s", key)
			}
			value, rest = rest[1:1+end], rest[2+end:]
		} else {
			end := strings.IndexAny(rest, " \t\n")
			if end < 0 {
				end = len(rest)
			}
			value, rest = rest[:end], rest[end:]
		}
		opts[key] = value
		rest = strings.TrimSpace(rest)
	}
	return opts, nil
}

// PlainServer is the server side of PLAIN (RFC 4616): one message,
// [authzid] NUL authcid NUL passwd, checked against the users.
type PlainServer struct {
	users     PlainUsers
	principal Principal
}

// NewPlainServer starts a PLAIN exchange.
func NewPlainServer(users PlainUsers) *PlainServer { return &PlainServer{users: users} }

// Step implements ServerExchange.
func (p *PlainServer) Step(msg []byte) ([]byte, bool, error) {
	parts := strings.Split(string(msg), "\x00")
	if len(parts) != 3 || parts[1] == "" {
		return nil, false, fmt.Errorf("%w: PLAIN wants authzid NUL authcid NUL password", ErrBadMessage)
	}
	authzid, user, password := parts[0], parts[1], parts[2]
	p.principal = User(user) // for the log line of a failure; trusted only after done
	if authzid != "" && authzid != user {
		return nil, false, fmt.Errorf("%w: authorization id %q differs from the user", ErrAuthenticationFailed, authzid)
	}
	want, ok := p.users[user]
	// Compare even for an unknown user, so its absence takes as long.
	if !equalSecrets([]byte(password), []byte(want)) || !ok {
		return nil, false, ErrAuthenticationFailed
	}
	p.principal = User(user)
	return []byte{}, true, nil
}

// Principal implements ServerExchange.
func (p *PlainServer) Principal() Principal { return p.principal }
