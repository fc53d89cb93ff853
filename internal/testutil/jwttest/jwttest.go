// Package jwttest makes signing keys at test time, writes them as a JWKS
// file, and signs JWTs with them, for OAUTHBEARER tests.
package jwttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"testing"
)

// Issuer signs tokens with an RSA key (RS256) and an EC key (ES256).
type Issuer struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
	// JWKS is the path of the key set file.
	JWKS string
	kids map[string]string // by alg
}

func enc(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// New makes the keys (kids rsa-1 and ec-1) and writes dir/jwks.json.
func New(t testing.TB, dir string) *Issuer { return NewNamed(t, dir, "") }

// NewNamed is New with the key ids prefixed by prefix, so that two
// issuers' keys differ by kid as well as by value.
func NewNamed(t testing.TB, dir, prefix string) *Issuer {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &Issuer{rsa: rk, ec: ek, JWKS: filepath.Join(dir, "jwks.json"),
		kids: map[string]string{"RS256": prefix + "rsa-1", "ES256": prefix + "ec-1"}}
	point, err := ek.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": is.kids["RS256"], "use": "sig", "alg": "RS256", "n": enc(rk.N.Bytes()), "e": enc(big.NewInt(int64(rk.E)).Bytes())},
		{"kty": "EC", "kid": is.kids["ES256"], "use": "sig", "crv": "P-256", "x": enc(point[1:33]), "y": enc(point[33:])},
	}}
	data, _ := json.Marshal(set)
	if err := os.WriteFile(is.JWKS, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return is
}

// Token signs claims with alg RS256 (kid rsa-1) or ES256 (kid ec-1).
func (is *Issuer) Token(t testing.TB, alg string, claims map[string]any) string {
	t.Helper()
	kid := is.kids[alg]
	h, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT", "kid": kid})
	c, _ := json.Marshal(claims)
	signed := enc(h) + "." + enc(c)
	digest := sha256.Sum256([]byte(signed))
	var sig []byte
	var err error
	switch alg {
	case "RS256":
		sig, err = rsa.SignPKCS1v15(rand.Reader, is.rsa, crypto.SHA256, digest[:])
	case "ES256":
		var r, s *big.Int
		r, s, err = ecdsa.Sign(rand.Reader, is.ec, digest[:])
		if err == nil {
			sig = append(append(make([]byte, 32-len(r.Bytes())), r.Bytes()...), append(make([]byte, 32-len(s.Bytes())), s.Bytes()...)...)
		}
	default:
		t.Fatalf("alg %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + enc(sig)
}
