package config

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Voter is one entry of controller.quorum.voters: id@host:port.
type Voter struct {
	ID   int32
	Host string
	Port int32
}

// Addr returns host:port.
func (v Voter) Addr() string { return net.JoinHostPort(v.Host, strconv.Itoa(int(v.Port))) }

// ParseVoters parses controller.quorum.voters entries.
func ParseVoters(entries []string) ([]Voter, error) {
	var out []Voter
	seen := map[int32]bool{}
	for _, e := range entries {
		idStr, addr, ok := strings.Cut(e, "@")
		if !ok {
			return nil, fmt.Errorf("%w: controller.quorum.voters: %q: want id@host:port", ErrInvalid, e)
		}
		id, err := strconv.ParseInt(idStr, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%w: controller.quorum.voters: %q: bad node id", ErrInvalid, e)
		}
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return nil, fmt.Errorf("%w: controller.quorum.voters: %q: want id@host:port", ErrInvalid, e)
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || port == 0 {
			return nil, fmt.Errorf("%w: controller.quorum.voters: %q: bad port", ErrInvalid, e)
		}
		if seen[int32(id)] {
			return nil, fmt.Errorf("%w: controller.quorum.voters: node %d is listed twice", ErrInvalid, id)
		}
		seen[int32(id)] = true
		out = append(out, Voter{ID: int32(id), Host: host, Port: int32(port)})
	}
	return out, nil
}

// Roles are process.roles.
type Roles struct{ Broker, Controller bool }

// Roles returns process.roles.
func (s *Server) Roles() Roles {
	var r Roles
	for _, role := range s.List("process.roles") {
		switch role {
		case "broker":
			r.Broker = true
		case "controller":
			r.Controller = true
		}
	}
	return r
}

// Cluster is the cluster part of a server's configuration, checked.
type Cluster struct {
	NodeID int32
	Roles  Roles
	// Voters are the controllers; for a node alone (no
	// controller.quorum.voters), this node, with no address.
	Voters []Voter
	// Alone is set when controller.quorum.voters is empty: a single node
	// that is its own quorum.
	Alone bool
	// Controller is this node's controller listener (when it is a voter
	// of a cluster); Client the first listener that is not a controller
	// listener (when it is a broker).
	Controller, Client *Listener
	// InterBroker is the listener brokers reach each other on
	// (inter.broker.listener.name, or Client).
	InterBroker *Listener
	// Listeners are all of listeners, each with its security protocol;
	// Brokers those that are not controller listeners, Client first.
	Listeners, Brokers []Listener
}

// Cluster returns the node's role in the cluster, or an error naming the
// key that makes the combination invalid.
func (s *Server) Cluster() (Cluster, error) {
	c := Cluster{NodeID: int32(s.Int("node.id")), Roles: s.Roles()}
	for _, role := range s.List("process.roles") {
		if role != "broker" && role != "controller" {
			return c, fmt.Errorf("%w: process.roles: unknown role %q (broker, controller)", ErrInvalid, role)
		}
	}
	if !c.Roles.Broker && !c.Roles.Controller {
		return c, fmt.Errorf("%w: process.roles: empty; use broker, controller or both", ErrInvalid)
	}
	voters, err := ParseVoters(s.List("controller.quorum.voters"))
	if err != nil {
		return c, err
	}
	listeners, err := ParseListeners(s.List("listeners"))
	if err != nil {
		return c, err
	}
	protocols, err := s.ProtocolMap()
	if err != nil {
		return c, err
	}
	controllerNames := s.List("controller.listener.names")
	for i := range controllerNames {
		controllerNames[i] = strings.ToUpper(controllerNames[i])
	}
	for i := range listeners {
		l := &listeners[i]
		proto, ok := protocols[l.Name]
		if !ok {
			return c, fmt.Errorf("%w: listener.security.protocol.map: listener %s has no security protocol", ErrInvalid, l.Name)
		}
		l.Protocol = proto
	}
	for i := range listeners {
		l := &listeners[i]
		if slices.Contains(controllerNames, l.Name) {
			if c.Controller == nil {
				c.Controller = l
			}
		} else {
			if c.Client == nil {
				c.Client = l
			}
			c.Brokers = append(c.Brokers, *l)
		}
	}
	c.Listeners = listeners
	switch {
	case len(voters) == 0 && !c.Roles.Controller:
		return c, fmt.Errorf("%w: controller.quorum.voters: a node with process.roles=broker needs the controllers it follows", ErrInvalid)
	case len(voters) == 0:
		c.Alone = true
		c.Voters = []Voter{{ID: c.NodeID}}
		c.Controller = nil
	case c.Roles.Controller:
		if !slices.ContainsFunc(voters, func(v Voter) bool { return v.ID == c.NodeID }) {
			return c, fmt.Errorf("%w: controller.quorum.voters: this controller's node.id %d is not among the voters", ErrInvalid, c.NodeID)
		}
		if c.Controller == nil {
			return c, fmt.Errorf("%w: listeners: a controller needs a listener named in controller.listener.names (%s), e.g. CONTROLLER://:9093", ErrInvalid, strings.Join(controllerNames, ","))
		}
		c.Voters = voters
	default:
		c.Voters = voters
	}
	if c.Roles.Broker && c.Client == nil {
		return c, fmt.Errorf("%w: listeners: a broker needs a listener that is not a controller listener", ErrInvalid)
	}
	c.InterBroker = c.Client
	if name := s.String("inter.broker.listener.name"); name != "" {
		i := slices.IndexFunc(listeners, func(l Listener) bool { return l.Name == strings.ToUpper(name) })
		if i < 0 {
			return c, fmt.Errorf("%w: inter.broker.listener.name: %s is not among the listeners", ErrInvalid, name)
		}
		c.InterBroker = &listeners[i]
	}
	return c, nil
}
