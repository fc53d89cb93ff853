package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/strata-io/strata/internal/testutil/jwttest"
)

// TestOAuthBearerFranzGo authenticates franz-go with OAUTHBEARER tokens
// signed by a JWKS's keys: valid ones produce, expired, wrongly addressed
// or foreign ones get SASL_AUTHENTICATION_FAILED.
func TestOAuthBearerFranzGo(t *testing.T) {
	is := jwttest.New(t, t.TempDir())
	other := jwttest.New(t, t.TempDir())
	b := startBroker(t, map[string]string{
		"listeners":                          "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
		"sasl.enabled.mechanisms":            "OAUTHBEARER",
		"sasl.oauthbearer.jwks.endpoint.url": "file://" + is.JWKS,
		"sasl.oauthbearer.expected.audience": "strata",
		"sasl.oauthbearer.expected.issuer":   "https://idp.example",
	})
	createTopic(t, newAdmin(t, b.Addr()), "oauth", 1, nil)
	addr := listenerAddr(t, b.Broker, "SASL_PLAINTEXT")
	now := time.Now()
	claims := func(exp time.Time, aud string) map[string]any {
		return map[string]any{"sub": "service-a", "aud": aud, "iss": "https://idp.example", "exp": exp.Unix(), "iat": now.Unix()}
	}
	for _, tc := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"RS256", is.Token(t, "RS256", claims(now.Add(time.Hour), "strata")), true},
		{"ES256", is.Token(t, "ES256", claims(now.Add(time.Hour), "strata")), true},
		{"expired", is.Token(t, "RS256", claims(now.Add(-time.Hour), "strata")), false},
		{"wrong audience", is.Token(t, "RS256", claims(now.Add(time.Hour), "elsewhere")), false},
		{"untrusted key", other.Token(t, "RS256", claims(now.Add(time.Hour), "strata")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newClient(t, addr, kgo.SASL(oauth.Auth{Token: tc.token}.AsMechanism()), kgo.RequestRetries(0), kgo.RecordRetries(1))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := cl.ProduceSync(ctx, &kgo.Record{Topic: "oauth", Value: []byte(tc.name)}).FirstErr()
			switch {
			case tc.ok && err != nil:
				t.Fatalf("produce: %v", err)
			case !tc.ok && !errors.Is(err, kerr.SaslAuthenticationFailed):
				t.Fatalf("produce with a bad token: %v, want SASL_AUTHENTICATION_FAILED", err)
			}
		})
	}
}
