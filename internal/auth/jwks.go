package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"
)

// maxJWKSBytes bounds a fetched JWKS document: a key set of a hundred RSA
// 4096 keys is under 100 KiB.
const maxJWKSBytes = 1 << 20

// jwksRequestTimeout bounds one fetch of the key set.
const jwksRequestTimeout = 10 * time.Second

// JWKSFetcher keeps a JWTValidator's keys fresh from an https:// JWKS
// endpoint, as Kafka's RefreshingHttpsJwks does: one fetch at start-up
// (Fetch, whose failure stops the listener from starting), then one every
// Refresh (sasl.oauthbearer.jwks.endpoint.refresh.ms), retried after a
// failure with a backoff doubling from RetryBackoff to RetryBackoffMax
// (….retry.backoff.ms, ….retry.backoff.max.ms); a token that names a key
// the set lacks brings the next fetch forward (to no sooner than
// RetryBackoff after the last). A failed fetch keeps the keys there were.
type JWKSFetcher struct {
	url       string
	client    *http.Client
	validator *JWTValidator
	logger    *slog.Logger

	refresh, retryBackoff, retryBackoffMax time.Duration
	early                                  chan struct{}
}

// JWKSFetcherOptions are a fetcher's settings.
type JWKSFetcherOptions struct {
	// URL is the https:// endpoint.
	URL string
	// JAAS is the OAUTHBEARER listener's sasl.jaas.config: as in Kafka,
	// its ssl.truststore.location or ssl.truststore.certificates options
	// (PEM) are the CAs the endpoint's certificate must chain to; the
	// system roots when both are unset.
	JAAS string
	// Refresh, RetryBackoff and RetryBackoffMax: see JWKSFetcher.
	Refresh, RetryBackoff, RetryBackoffMax time.Duration
	Logger                                 *slog.Logger
}

// NewJWKSFetcher makes a fetcher that sets v's keys. It fetches nothing
// until Fetch or Run.
func NewJWKSFetcher(v *JWTValidator, o JWKSFetcherOptions) (*JWKSFetcher, error) {
	if !strings.HasPrefix(strings.ToLower(o.URL), "https://") {
		return nil, fmt.Errorf("auth: JWKS endpoint %q: want an https:// URL (or a file)", o.URL)
	}
	if o.Refresh <= 0 || o.RetryBackoff <= 0 || o.RetryBackoffMax < o.RetryBackoff {
		return nil, fmt.Errorf("auth: JWKS endpoint %s: refresh %v, retry backoff %v..%v: want positive, max at least the backoff", o.URL, o.Refresh, o.RetryBackoff, o.RetryBackoffMax)
	}
	tlsCfg, err := jwksTLS(o.JAAS)
	if err != nil {
		return nil, err
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := &JWKSFetcher{
		url: o.URL,
		client: &http.Client{
			Timeout:   jwksRequestTimeout,
			Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true},
			// A redirect away from https would hand the key set to
			// whoever answers.
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if req.URL.Scheme != "https" || len(via) >= 5 {
					return fmt.Errorf("auth: JWKS endpoint redirected to %s", req.URL.Redacted())
				}
				return nil
			},
		},
		validator:       v,
		logger:          logger,
		refresh:         o.Refresh,
		retryBackoff:    o.RetryBackoff,
		retryBackoffMax: o.RetryBackoffMax,
		early:           make(chan struct{}, 1),
	}
	v.mu.Lock()
	v.fetched = true
	v.onMissingKey = func() {
		select {
		case f.early <- struct{}{}:
		default: // one pending is enough
		}
	}
	v.mu.Unlock()
	return f, nil
}

// jwksTLS is the client TLS configuration the JAAS options give.
func jwksTLS(jaas string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if strings.TrimSpace(jaas) == "" {
		return cfg, nil
	}
	opts, err := parseJAASOptions(jaas)
	if err != nil {
		return nil, err
	}
	if t := opts["ssl.truststore.type"]; t != "" && t != "PEM" {
		return nil, fmt.Errorf("auth: sasl.jaas.config: ssl.truststore.type=%s: Strata reads PEM only", t)
	}
	roots := []byte(opts["ssl.truststore.certificates"])
	if loc := opts["ssl.truststore.location"]; loc != "" {
		if roots, err = os.ReadFile(loc); err != nil {
			return nil, fmt.Errorf("auth: sasl.jaas.config: ssl.truststore.location: %w", err)
		}
	}
	if len(roots) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(roots) {
			return nil, errors.New("auth: sasl.jaas.config: the JWKS trust store holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// Fetch reads the key set once and installs it.
func (f *JWKSFetcher) Fetch(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return fmt.Errorf("auth: JWKS %s: %w", f.url, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return fmt.Errorf("auth: JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("auth: JWKS %s: HTTP %s", f.url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return fmt.Errorf("auth: JWKS %s: %w", f.url, err)
	}
	if len(data) > maxJWKSBytes {
		return fmt.Errorf("auth: JWKS %s: larger than %d bytes", f.url, maxJWKSBytes)
	}
	return f.validator.SetJWKS(data, f.url)
}

// Run refreshes the keys until ctx ends.
func (f *JWKSFetcher) Run(ctx context.Context) {
	wait, backoff := f.refresh, f.retryBackoff
	timer := time.NewTimer(wait)
	defer timer.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-f.early:
			// A token named an unknown key: fetch now, unless the last
			// fetch was within the backoff (then when it has passed).
			if since := time.Since(last); since < f.retryBackoff {
				timer.Reset(f.retryBackoff - since)
				continue
			}
		}
		last = time.Now()
		fetchCtx, cancel := context.WithTimeout(ctx, jwksRequestTimeout)
		err := f.Fetch(fetchCtx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.logger.Warn("JWKS refresh failed; keeping the keys there were", "url", f.url, "err", err, "retry.in", backoff)
			wait, backoff = backoff, min(2*backoff, f.retryBackoffMax)
		} else {
			wait, backoff = f.refresh, f.retryBackoff
		}
		timer.Reset(wait) // Go 1.23 timers: no stale tick survives a Reset

	}
}
