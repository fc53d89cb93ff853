// Package tlstest makes certificate authorities and certificates for
// tests, at test time (nothing is checked in), and writes them as the PEM
// files Kafka's ssl.keystore.location / ssl.truststore.location and the
// clients' CA, certificate and key options take.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
}

// Pair is a certificate signed by a CA, with its key, in PEM.
type Pair struct {
	CertPEM, KeyPEM []byte
	TLS             tls.Certificate
}

var serial = big.NewInt(time.Now().UnixNano())

func nextSerial() *big.Int { serial = new(big.Int).Add(serial, big.NewInt(1)); return serial }

// NewCA makes a self-signed CA named cn.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"Strata tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server issues a server certificate for localhost and 127.0.0.1.
func (ca *CA) Server(t testing.TB, cn string) *Pair {
	return ca.issue(t, pkix.Name{CommonName: cn}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// Client issues a client certificate with the subject given.
func (ca *CA) Client(t testing.TB, subject pkix.Name) *Pair {
	return ca.issue(t, subject, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, subject pkix.Name, usages ...x509.ExtKeyUsage) *Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := &Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
	}
	if p.TLS, err = tls.X509KeyPair(p.CertPEM, p.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return p
}

// Files are a pair's PEM files in a directory.
type Files struct {
	// Keystore holds the key and the certificate (Kafka's PEM key store).
	Keystore, Cert, Key string
}

// Write writes the pair into dir as name.pem (key store: key and
// certificate), name.crt and name.key.
func (p *Pair) Write(t testing.TB, dir, name string) Files {
	t.Helper()
	f := Files{
		Keystore: filepath.Join(dir, name+".pem"),
		Cert:     filepath.Join(dir, name+".crt"),
		Key:      filepath.Join(dir, name+".key"),
	}
	write(t, f.Keystore, append(append([]byte{}, p.KeyPEM...), p.CertPEM...))
	write(t, f.Cert, p.CertPEM)
	write(t, f.Key, p.KeyPEM)
	return f
}

// WriteCA writes the CA's certificate to dir/name.crt and returns the path.
func (ca *CA) Write(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name+".crt")
	write(t, path, ca.PEM)
	return path
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
