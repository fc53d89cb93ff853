package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// MechanismOAuthBearer is SASL/OAUTHBEARER (RFC 7628, KIP-255), with
// tokens validated as Kafka's OAuthBearerValidatorCallbackHandler does
// (KIP-768): a JWT signed by a key of a JWKS, unexpired, for the expected
// audience and issuer; the principal is its subject claim.
const MechanismOAuthBearer = "OAUTHBEARER"

// ErrInvalidToken wraps every reason a bearer token is refused.
var ErrInvalidToken = errors.New("auth: invalid OAUTHBEARER token")

// JWTValidator checks tokens against the keys of a JWKS: a file, reread
// when it changes, or the keys a JWKSFetcher sets from an https://
// endpoint. Safe for concurrent use.
type JWTValidator struct {
	// Path is the JWKS file (sasl.oauthbearer.jwks.endpoint.url, a
	// file: URL or a path); empty when a JWKSFetcher sets the keys.
	Path string
	// Audience and Issuer, when set, must be in the token's aud and equal
	// its iss (sasl.oauthbearer.expected.audience, .expected.issuer).
	Audience []string
	Issuer   string
	// SubClaim names the claim that is the principal
	// (sasl.oauthbearer.sub.claim.name, default sub).
	SubClaim string
	// ClockSkew is allowed on exp, nbf and iat
	// (sasl.oauthbearer.clock.skew.seconds, default 30 s).
	ClockSkew time.Duration

	mu    sync.Mutex
	stamp fileStamp
	keys  map[string]crypto.PublicKey // by kid ("" when the file has one key without kid)
	all   []crypto.PublicKey
	// fetched: the keys come from SetJWKS, not from Path.
	fetched bool
	// onMissingKey is told a token named a kid the set lacks (the
	// fetcher refreshes early, as Kafka's RefreshingHttpsJwks does).
	onMissingKey func()
}

type jwk struct {
	Kty, Kid, Alg, Use string
	N, E               string // RSA
	Crv, X, Y          string // EC
}

// Load reads the JWKS file now, to report a bad one at start-up.
func (v *JWTValidator) Load() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.loadKeysLocked()
}

// loadKeysLocked (re)reads the JWKS file if it changed. v.mu must be held.
func (v *JWTValidator) loadKeysLocked() error {
	if v.fetched {
		return nil
	}
	path := strings.TrimPrefix(v.Path, "file://")
	path = strings.TrimPrefix(path, "file:")
	st := stamp(path)
	if v.keys != nil && st == v.stamp {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("auth: JWKS: %w", err)
	}
	keys, all, err := parseJWKS(data, path)
	if err != nil {
		return err
	}
	v.keys, v.all, v.stamp = keys, all, st
	return nil
}

// SetJWKS replaces the keys with those of a JWKS document read from
// source (for errors). A bad document leaves the keys as they were.
func (v *JWTValidator) SetJWKS(data []byte, source string) error {
	keys, all, err := parseJWKS(data, source)
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.keys, v.all, v.fetched = keys, all, true
	v.mu.Unlock()
	return nil
}

// parseJWKS reads the signing keys of a JWKS document (RFC 7517).
func parseJWKS(data []byte, source string) (map[string]crypto.PublicKey, []crypto.PublicKey, error) {
	var set struct{ Keys []jwk }
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, nil, fmt.Errorf("auth: JWKS %s: %w", source, err)
	}
	keys := map[string]crypto.PublicKey{}
	var all []crypto.PublicKey
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		pub, err := k.publicKey()
		if err != nil {
			return nil, nil, fmt.Errorf("auth: JWKS %s: key %q: %w", source, k.Kid, err)
		}
		keys[k.Kid] = pub
		all = append(all, pub)
	}
	return keys, all, nil
}

func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func (k jwk) publicKey() (crypto.PublicKey, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err1 != nil || err2 != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("bad RSA n or e")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		default:
			return nil, fmt.Errorf("curve %q (P-256, P-384)", k.Crv)
		}
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		if err1 != nil || err2 != nil {
			return nil, errors.New("bad EC x or y")
		}
		size := (curve.Params().BitSize + 7) / 8
		if len(x) > size || len(y) > size {
			return nil, errors.New("bad EC x or y")
		}
		point := make([]byte, 1+2*size)
		point[0] = 4 // uncompressed
		copy(point[1+size-len(x):1+size], x)
		copy(point[1+2*size-len(y):], y)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point) // checks the point is on the curve
		if err != nil {
			return nil, fmt.Errorf("EC key: %w", err)
		}
		return pub, nil
	}
	return nil, fmt.Errorf("key type %q (RSA, EC)", k.Kty)
}

// Validate checks a compact JWS token at time now and returns its
// principal name.
func (v *JWTValidator) Validate(token string, now time.Time) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("%w: not a compact JWS", ErrInvalidToken)
	}
	var header struct{ Alg, Kid, Typ string }
	if err := decodeSegment(parts[0], &header); err != nil {
		return "", fmt.Errorf("%w: header: %v", ErrInvalidToken, err)
	}
	sig, err := b64(parts[2])
	if err != nil {
		return "", fmt.Errorf("%w: signature encoding", ErrInvalidToken)
	}
	if err := v.verify(header.Alg, header.Kid, []byte(parts[0]+"."+parts[1]), sig); err != nil {
		return "", err
	}
	var claims map[string]any
	if err := decodeSegment(parts[1], &claims); err != nil {
		return "", fmt.Errorf("%w: claims: %v", ErrInvalidToken, err)
	}
	return v.checkClaims(claims, now)
}

func decodeSegment(s string, into any) error {
	data, err := b64(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}

// verify checks the signature with the JWKS key the header names.
func (v *JWTValidator) verify(alg, kid string, signed, sig []byte) error {
	var hash crypto.Hash
	switch alg {
	case "RS256", "ES256":
		hash = crypto.SHA256
	case "RS384", "ES384":
		hash = crypto.SHA384
	case "RS512":
		hash = crypto.SHA512
	default:
		return fmt.Errorf("%w: algorithm %q (RS256, RS384, RS512, ES256, ES384)", ErrInvalidToken, alg)
	}
	v.mu.Lock()
	err := v.loadKeysLocked()
	var candidates []crypto.PublicKey
	if k, ok := v.keys[kid]; ok {
		candidates = []crypto.PublicKey{k}
	} else if kid == "" {
		candidates = slices.Clone(v.all)
	}
	onMissingKey := v.onMissingKey
	v.mu.Unlock()
	if err != nil {
		return err
	}
	if len(candidates) == 0 {
		if onMissingKey != nil && kid != "" {
			onMissingKey()
		}
		return fmt.Errorf("%w: no JWKS key %q", ErrInvalidToken, kid)
	}
	var digest []byte
	switch hash {
	case crypto.SHA256:
		d := sha256.Sum256(signed)
		digest = d[:]
	case crypto.SHA384:
		d := sha512.Sum384(signed)
		digest = d[:]
	case crypto.SHA512:
		d := sha512.Sum512(signed)
		digest = d[:]
	}
	for _, k := range candidates {
		switch pub := k.(type) {
		case *rsa.PublicKey:
			if strings.HasPrefix(alg, "RS") && rsa.VerifyPKCS1v15(pub, hash, digest, sig) == nil {
				return nil
			}
		case *ecdsa.PublicKey:
			size := (pub.Curve.Params().BitSize + 7) / 8
			if strings.HasPrefix(alg, "ES") && len(sig) == 2*size {
				r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
				if ecdsa.Verify(pub, digest, r, s) {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("%w: bad signature", ErrInvalidToken)
}

// checkClaims checks exp, nbf, iat, aud and iss and returns the subject.
func (v *JWTValidator) checkClaims(claims map[string]any, now time.Time) (string, error) {
	skew := v.ClockSkew
	num := func(name string) (time.Time, bool) {
		f, ok := claims[name].(float64)
		if !ok {
			return time.Time{}, false
		}
		return time.Unix(0, int64(f*float64(time.Second))), true
	}
	exp, ok := num("exp")
	if !ok {
		return "", fmt.Errorf("%w: no exp claim", ErrInvalidToken)
	}
	if now.After(exp.Add(skew)) {
		return "", fmt.Errorf("%w: expired at %s", ErrInvalidToken, exp.UTC().Format(time.RFC3339))
	}
	for _, name := range []string{"nbf", "iat"} {
		if t, ok := num(name); ok && t.After(now.Add(skew)) {
			return "", fmt.Errorf("%w: %s is in the future", ErrInvalidToken, name)
		}
	}
	if len(v.Audience) > 0 {
		var auds []string
		switch a := claims["aud"].(type) {
		case string:
			auds = []string{a}
		case []any:
			for _, x := range a {
				if s, ok := x.(string); ok {
					auds = append(auds, s)
				}
			}
		}
		if !slices.ContainsFunc(auds, func(a string) bool { return slices.Contains(v.Audience, a) }) {
			return "", fmt.Errorf("%w: audience %v is not among %v", ErrInvalidToken, auds, v.Audience)
		}
	}
	if v.Issuer != "" {
		if iss, _ := claims["iss"].(string); iss != v.Issuer {
			return "", fmt.Errorf("%w: issuer %q, want %q", ErrInvalidToken, iss, v.Issuer)
		}
	}
	claim := v.SubClaim
	if claim == "" {
		claim = "sub"
	}
	sub, _ := claims[claim].(string)
	if sub == "" {
		return "", fmt.Errorf("%w: no %s claim", ErrInvalidToken, claim)
	}
	return sub, nil
}

// OAuthBearerServer is the server side of OAUTHBEARER: one client
// message, "n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A]*^A".
type OAuthBearerServer struct {
	validator *JWTValidator
	now       func() time.Time
	principal Principal
}

// NewOAuthBearerServer starts an OAUTHBEARER exchange; now is the clock
// tokens are checked against.
func NewOAuthBearerServer(v *JWTValidator, now func() time.Time) *OAuthBearerServer {
	return &OAuthBearerServer{validator: v, now: now}
}

// Step implements ServerExchange.
func (o *OAuthBearerServer) Step(msg []byte) ([]byte, bool, error) {
	s := string(msg)
	gs2, rest, ok := strings.Cut(s, "\x01")
	if !ok || !strings.HasPrefix(gs2, "n,") {
		return nil, false, fmt.Errorf("%w: OAUTHBEARER wants n,[a=authzid],^Aauth=Bearer <token>", ErrBadMessage)
	}
	authzid := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(gs2, "n,"), "a="), ",")
	var token string
	for _, kv := range strings.Split(rest, "\x01") {
		if v, ok := strings.CutPrefix(kv, "auth="); ok {
			scheme, t, ok := strings.Cut(v, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") {
				return nil, false, fmt.Errorf("%w: auth is not a Bearer token", ErrBadMessage)
			}
			token = strings.TrimSpace(t)
		}
	}
	if token == "" {
		return nil, false, fmt.Errorf("%w: no auth=Bearer token", ErrBadMessage)
	}
	sub, err := o.validator.Validate(token, o.now())
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrAuthenticationFailed, err)
	}
	if authzid != "" && authzid != sub {
		return nil, false, fmt.Errorf("%w: authorization id %q differs from the token's subject", ErrAuthenticationFailed, authzid)
	}
	o.principal = User(sub)
	return []byte{}, true, nil
}

// Principal implements ServerExchange.
func (o *OAuthBearerServer) Principal() Principal { return o.principal }
