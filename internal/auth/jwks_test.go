package auth

import (
	"bytes"
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
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/testutil/jwttest"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// jwksServer is an https:// JWKS endpoint (httptest's TLS server) that
// serves whatever document, status code and size it is set to.
type jwksServer struct {
	*httptest.Server
	doc      atomic.Pointer[[]byte]
	status   atomic.Int32
	requests atomic.Int32
	// jaas trusts the server's certificate, as a broker's
	// OAUTHBEARER sasl.jaas.config would.
	jaas string
}

func newJWKSServer(t *testing.T, jwksFile string) *jwksServer {
	js := &jwksServer{}
	js.serveFile(t, jwksFile)
	js.status.Store(http.StatusOK)
	js.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		js.requests.Add(1)
		if code := int(js.status.Load()); code != http.StatusOK {
			http.Error(w, "unavailable", code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(*js.doc.Load())
	}))
	js.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusting client's refused handshake
	js.StartTLS()
	t.Cleanup(js.Close)
	ca := filepath.Join(t.TempDir(), "jwks-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: js.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	js.jaas = `org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ssl.truststore.type="PEM" ssl.truststore.location="` + ca + `";`
	return js
}

func (js *jwksServer) serveFile(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js.doc.Store(&data)
}

func TestJWKSFetcher(t *testing.T) {
	first := jwttest.NewNamed(t, t.TempDir(), "first-")
	second := jwttest.NewNamed(t, t.TempDir(), "second-")
	srv := newJWKSServer(t, first.JWKS)
	now := time.Now()
	claims := map[string]any{"sub": "alice", "exp": now.Add(time.Hour).Unix()}
	firstToken, secondToken := first.Token(t, "RS256", claims), second.Token(t, "ES256", claims)
	opts := JWKSFetcherOptions{URL: srv.URL + "/jwks.json", JAAS: srv.jaas, Refresh: time.Hour, RetryBackoff: 20 * time.Millisecond, RetryBackoffMax: time.Second}

	v := &JWTValidator{}
	f, err := NewJWKSFetcher(v, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sub, err := v.Validate(firstToken, now); err != nil || sub != "alice" {
		t.Fatalf("token of the served keys: %q %v", sub, err)
	}
	if _, err := v.Validate(secondToken, now); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("token of keys not served: %v", err)
	}

	// The endpoint failing keeps the keys there were.
	srv.status.Store(http.StatusServiceUnavailable)
	if err := f.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("fetch from a failing endpoint: %v", err)
	}
	if _, err := v.Validate(firstToken, now); err != nil {
		t.Fatalf("after a failed fetch: %v", err)
	}
	srv.status.Store(http.StatusOK)

	// Rotation: a token naming a key the set lacks brings the refresh
	// forward (the scheduled one is an hour away).
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv.serveFile(t, second.JWKS)
	poll.Until(t, 30*time.Second, "the rotated key set to be fetched early", func() bool {
		_, err := v.Validate(secondToken, time.Now())
		return err == nil
	})
	if _, err := v.Validate(firstToken, now); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("token of the retired keys: %v", err)
	}
	// Unknown keys do not make it fetch more than once per backoff.
	before := srv.requests.Load()
	start := time.Now()
	for range 200 {
		v.Validate(firstToken, now)
	}
	if n := srv.requests.Load() - before; n > int32(time.Since(start)/opts.RetryBackoff)+2 {
		t.Fatalf("%d fetches for 200 tokens with an unknown key in %v", n, time.Since(start))
	}
}

// TestJWKSFetcherRefreshes checks the scheduled refresh alone: the same
// key ids with new keys, so that no token asks for an early fetch.
func TestJWKSFetcherRefreshes(t *testing.T) {
	first := jwttest.New(t, t.TempDir())
	second := jwttest.New(t, t.TempDir())
	srv := newJWKSServer(t, first.JWKS)
	v := &JWTValidator{}
	f, err := NewJWKSFetcher(v, JWKSFetcherOptions{URL: srv.URL, JAAS: srv.jaas, Refresh: 50 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	claims := map[string]any{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix()}
	token := second.Token(t, "RS256", claims)
	srv.status.Store(http.StatusInternalServerError) // a failing refresh is retried
	srv.serveFile(t, second.JWKS)
	poll.Until(t, 30*time.Second, "refreshes to be retried", func() bool { return srv.requests.Load() >= 4 })
	if _, err := v.Validate(token, time.Now()); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("keys changed while the endpoint failed: %v", err)
	}
	srv.status.Store(http.StatusOK)
	poll.Until(t, 30*time.Second, "the scheduled refresh to install the new keys", func() bool {
		_, err := v.Validate(token, time.Now())
		return err == nil
	})
}

func TestJWKSFetcherRefuses(t *testing.T) {
	is := jwttest.New(t, t.TempDir())
	srv := newJWKSServer(t, is.JWKS)
	opts := JWKSFetcherOptions{URL: srv.URL, Refresh: time.Hour, RetryBackoff: 100 * time.Millisecond, RetryBackoffMax: 10 * time.Second}

	// Without the JAAS trust store the test CA is not trusted.
	f, err := NewJWKSFetcher(&JWTValidator{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if err := f.Fetch(context.Background()); !errors.As(err, &unknown) {
		t.Fatalf("an untrusted endpoint: %v", err)
	}

	big := bytes.Repeat([]byte(" "), maxJWKSBytes+1)
	srv.doc.Store(&big)
	opts.JAAS = srv.jaas
	if f, err = NewJWKSFetcher(&JWTValidator{}, opts); err != nil {
		t.Fatal(err)
	}
	if err := f.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("an oversized key set: %v", err)
	}
	notJSON := []byte("<html>")
	srv.doc.Store(&notJSON)
	if err := f.Fetch(context.Background()); err == nil {
		t.Fatal("a key set that is not JSON was accepted")
	}

	for _, bad := range []JWKSFetcherOptions{
		{URL: strings.Replace(srv.URL, "https", "http", 1), Refresh: time.Hour, RetryBackoff: time.Millisecond, RetryBackoffMax: time.Second},
		{URL: srv.URL, Refresh: 0, RetryBackoff: time.Millisecond, RetryBackoffMax: time.Second},
		{URL: srv.URL, Refresh: time.Hour, RetryBackoff: time.Millisecond, RetryBackoffMax: time.Second, JAAS: `M required ssl.truststore.type="JKS";`},
	} {
		if _, err := NewJWKSFetcher(&JWTValidator{}, bad); err == nil {
			t.Errorf("%+v was accepted", bad)
		}
	}
}
