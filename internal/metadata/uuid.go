package metadata

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
)

// UUID is a Kafka UUID: a topic id or a cluster id. Kafka prints it in
// URL-safe base64 without padding, and so does Strata.
type UUID [16]byte

// NewUUID returns a random UUID that is not the zero UUID or Kafka's
// reserved metadata topic id (1).
func NewUUID() UUID {
	for {
		var u UUID
		if _, err := rand.Read(u[:]); err != nil {
			panic("metadata: crypto/rand failed: " + err.Error())
		}
		if !u.IsZero() && u != (UUID{15: 1}) {
			return u
		}
	}
}

// IsZero reports whether u is the zero UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// String returns Kafka's base64 form.
func (u UUID) String() string { return base64.RawURLEncoding.EncodeToString(u[:]) }

// ParseUUID parses Kafka's base64 form.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return u, fmt.Errorf("metadata: bad UUID %q", s)
	}
	copy(u[:], b)
	return u, nil
}

// MarshalText implements encoding.TextMarshaler.
func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (u *UUID) UnmarshalText(b []byte) error {
	v, err := ParseUUID(string(b))
	*u = v
	return err
}
