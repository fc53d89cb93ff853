package broker

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/testutil/jwttest"
	"github.com/strata-io/strata/internal/testutil/poll"
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

// TestOAuthBearerJWKSEndpoint verifies tokens against an https:// JWKS
// endpoint (httptest's TLS server, trusted through the OAUTHBEARER
// sasl.jaas.config's ssl.truststore.location, as in Kafka) and follows
// a key rotation with the scheduled refresh.
func TestOAuthBearerJWKSEndpoint(t *testing.T) {
	first := jwttest.New(t, t.TempDir())
	second := jwttest.New(t, t.TempDir()) // the same kids, new keys: only a refresh notices
	var doc atomic.Pointer[[]byte]
	serve := func(path string) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc.Store(&data)
	}
	serve(first.JWKS)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(*doc.Load())
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusting broker's refused handshake
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "idp-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{
		"listeners":               "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
		"sasl.enabled.mechanisms": "OAUTHBEARER",
		"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": `org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ssl.truststore.type="PEM" ssl.truststore.location="` + ca + `";`,
		"sasl.oauthbearer.jwks.endpoint.url":                        srv.URL + "/.well-known/jwks.json",
		"sasl.oauthbearer.jwks.endpoint.refresh.ms":                 "200",
		"sasl.oauthbearer.jwks.endpoint.retry.backoff.ms":           "50",
		"sasl.oauthbearer.expected.audience":                        "strata",
	}
	b := startBroker(t, settings)
	createTopic(t, newAdmin(t, b.Addr()), "oauth-https", 1, nil)
	addr := listenerAddr(t, b.Broker, "SASL_PLAINTEXT")
	produce := func(token string) error {
		cl := newClient(t, addr, kgo.SASL(oauth.Auth{Token: token}.AsMechanism()), kgo.RequestRetries(0), kgo.RecordRetries(1))
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := cl.Ping(ctx); err != nil { // a refusal, without producing's metadata backoff
			return err
		}
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "oauth-https", Value: []byte("x")}).FirstErr()
	}
	claims := map[string]any{"sub": "service-b", "aud": "strata", "exp": time.Now().Add(time.Hour).Unix()}
	firstToken, secondToken := first.Token(t, "RS256", claims), second.Token(t, "RS256", claims)
	if err := produce(firstToken); err != nil {
		t.Fatalf("a token of the endpoint's keys: %v", err)
	}
	if err := produce(secondToken); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a token of keys not served yet: %v", err)
	}
	serve(second.JWKS)
	poll.Until(t, 30*time.Second, "the rotated keys to be fetched", func() bool { return produce(secondToken) == nil })
	if err := produce(firstToken); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a token of the retired keys: %v", err)
	}

	// An endpoint whose certificate the broker does not trust: the
	// listener does not start, and says why.
	delete(settings, "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config")
	settings["log.dirs"] = t.TempDir()
	cfg, err := config.NewServer(settings)
	if err != nil {
		t.Fatal(err)
	}
	untrusting, err := New(Options{Config: cfg, Logger: testLogger(t)})
	if err == nil {
		if err = untrusting.Start(); err == nil {
			untrusting.Close()
		}
	}
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("a broker that does not trust its JWKS endpoint: %v", err)
	}
}
