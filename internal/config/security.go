package config

import (
	"fmt"
	"strings"
)

// Security protocols of listener.security.protocol.map, with Kafka's names.
const (
	ProtocolPlaintext     = "PLAINTEXT"
	ProtocolSSL           = "SSL"
	ProtocolSASLPlaintext = "SASL_PLAINTEXT"
	ProtocolSASLSSL       = "SASL_SSL"
)

// listenerPrefix starts a per-listener override, as in Kafka:
// listener.name.<listener name, lower case>.<key>, e.g.
// listener.name.external.ssl.keystore.location. SASL keys may also be given
// per mechanism: listener.name.<l>.<mechanism, lower case>.sasl.jaas.config.
const listenerPrefix = "listener.name."

// IsTLS reports whether the protocol encrypts with TLS.
func IsTLS(protocol string) bool { return protocol == ProtocolSSL || protocol == ProtocolSASLSSL }

// IsSASL reports whether the protocol authenticates with SASL.
func IsSASL(protocol string) bool {
	return protocol == ProtocolSASLPlaintext || protocol == ProtocolSASLSSL
}

// ProtocolMap parses listener.security.protocol.map: listener name to
// security protocol.
func (s *Server) ProtocolMap() (map[string]string, error) {
	out := map[string]string{}
	for _, e := range s.List("listener.security.protocol.map") {
		name, proto, ok := strings.Cut(e, ":")
		name, proto = strings.ToUpper(strings.TrimSpace(name)), strings.ToUpper(strings.TrimSpace(proto))
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: listener.security.protocol.map: %q: want NAME:PROTOCOL", ErrInvalid, e)
		}
		switch proto {
		case ProtocolPlaintext, ProtocolSSL, ProtocolSASLPlaintext, ProtocolSASLSSL:
		default:
			return nil, fmt.Errorf("%w: listener.security.protocol.map: %q: unknown protocol %s (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)", ErrInvalid, e, proto)
		}
		out[name] = proto
	}
	return out, nil
}

// ListenerString returns a key's value for one listener: the
// listener.name.<listener>.<key> override when set, else the key itself.
func (s *Server) ListenerString(listener, key string) string {
	if v, ok := s.values[listenerPrefix+strings.ToLower(listener)+"."+key]; ok {
		return v
	}
	return s.String(key)
}

// ListenerList is ListenerString for a list key.
func (s *Server) ListenerList(listener, key string) []string {
	return SplitList(s.ListenerString(listener, key))
}

// ListenerMechanismString returns a SASL key for one listener and
// mechanism: listener.name.<l>.<mechanism>.<key>, then
// listener.name.<l>.<key>, then the key itself, as Kafka looks up
// sasl.jaas.config.
func (s *Server) ListenerMechanismString(listener, mechanism, key string) string {
	if v, ok := s.values[listenerPrefix+strings.ToLower(listener)+"."+strings.ToLower(mechanism)+"."+key]; ok {
		return v
	}
	return s.ListenerString(listener, key)
}

// setListenerKey stores a listener.name.<l>.<key> override, checking the
// value against the key's rules when the key is known.
func (s *Server) setListenerKey(name, value string, src Source) error {
	rest := strings.TrimPrefix(name, listenerPrefix)
	_, key, ok := strings.Cut(rest, ".")
	if !ok || key == "" {
		return fmt.Errorf("%w: %s: want listener.name.<listener>.<key>", ErrInvalid, name)
	}
	if k, known := serverIndex[key]; known {
		if err := k.Validate(value); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	s.values[name] = value
	s.sources[name] = src
	return nil
}
