package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Listener is one entry of listeners or advertised.listeners.
type Listener struct {
	Name string // PLAINTEXT, or a named listener
	// Protocol is the listener's security protocol from
	// listener.security.protocol.map; set by Server.Cluster only.
	Protocol string
	Host     string
	Port     int32
}

// Addr returns host:port.
func (l Listener) Addr() string { return net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port))) }

// ParseListeners parses NAME://host:port entries. An empty host means all
// interfaces, as in Kafka.
func ParseListeners(entries []string) ([]Listener, error) {
	var out []Listener
	for _, e := range entries {
		name, addr, ok := strings.Cut(e, "://")
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: listeners: %q: want NAME://host:port", ErrInvalid, e)
		}
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("%w: listeners: %q: %v", ErrInvalid, e, err)
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%w: listeners: %q: bad port", ErrInvalid, e)
		}
		out = append(out, Listener{Name: strings.ToUpper(name), Host: host, Port: int32(port)})
	}
	return out, nil
}
