package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/testutil/jwttest"
)

func TestOAuthBearer(t *testing.T) {
	is := jwttest.New(t, t.TempDir())
	other := jwttest.New(t, t.TempDir())
	now := time.Unix(1_800_000_000, 0)
	v := &JWTValidator{Path: "file://" + is.JWKS, Audience: []string{"strata"}, Issuer: "https://idp.example", ClockSkew: 30 * time.Second}
	good := map[string]any{"sub": "alice", "aud": "strata", "iss": "https://idp.example", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
	with := func(k string, val any) map[string]any {
		c := map[string]any{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	msg := func(token string) []byte { return []byte("n,,\x01auth=Bearer " + token + "\x01\x01") }
	for _, alg := range []string{"RS256", "ES256"} {
		s := NewOAuthBearerServer(v, func() time.Time { return now })
		_, done, err := s.Step(msg(is.Token(t, alg, good)))
		if err != nil || !done || s.Principal() != User("alice") {
			t.Fatalf("%s: done %v err %v principal %v", alg, done, err, s.Principal())
		}
	}
	for name, token := range map[string]string{
		"expired":         is.Token(t, "RS256", with("exp", now.Add(-time.Minute).Unix())),
		"no exp":          is.Token(t, "RS256", with("exp", nil)),
		"wrong audience":  is.Token(t, "RS256", with("aud", "other")),
		"wrong issuer":    is.Token(t, "ES256", with("iss", "https://evil.example")),
		"not yet valid":   is.Token(t, "RS256", with("nbf", now.Add(time.Hour).Unix())),
		"no subject":      is.Token(t, "RS256", with("sub", nil)),
		"another's key":   other.Token(t, "RS256", good),
		"tampered claims": tamper(is.Token(t, "ES256", good)),
		"alg none":        "eyJhbGciOiJub25lIn0." + strings.Split(is.Token(t, "RS256", good), ".")[1] + ".",
		"garbage":         "not-a-jwt",
	} {
		s := NewOAuthBearerServer(v, func() time.Time { return now })
		if _, _, err := s.Step(msg(token)); !errors.Is(err, ErrAuthenticationFailed) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	// Within the clock skew, an expired token still passes.
	s := NewOAuthBearerServer(v, func() time.Time { return now })
	if _, _, err := s.Step(msg(is.Token(t, "RS256", with("exp", now.Add(-10*time.Second).Unix())))); err != nil {
		t.Fatalf("within the clock skew: %v", err)
	}
	if _, _, err := NewOAuthBearerServer(v, time.Now).Step([]byte("garbage")); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("a malformed message: %v", err)
	}
}

// tamper changes the claims of a token without re-signing it.
func tamper(token string) string {
	p := strings.Split(token, ".")
	p[1] = strings.TrimRight(p[1], "A") + "B"
	return strings.Join(p, ".")
}
