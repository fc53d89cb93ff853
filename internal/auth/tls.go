package auth

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/strata-io/strata/internal/config"
)

// ErrEncryptedKey is returned for a PEM private key encrypted with a
// password: Strata reads unencrypted keys only (protect the file instead).
var ErrEncryptedKey = errors.New("auth: encrypted PEM private keys are not supported; store the key unencrypted and protect the file")

// TLSSettings are a listener's ssl.* keys, resolved with their
// listener.name.<l>. overrides.
type TLSSettings struct {
	// KeystoreLocation is ssl.keystore.location: a PEM file with the key
	// and the certificate chain. KeystoreChain and KeystoreKey are
	// ssl.keystore.certificate.chain and ssl.keystore.key, inline.
	KeystoreLocation, KeystoreChain, KeystoreKey string
	// KeyPassword is ssl.key.password; a set password means the key is
	// encrypted, which is refused.
	KeyPassword string
	// TruststoreLocation is ssl.truststore.location; TruststoreCerts
	// ssl.truststore.certificates, inline. Both empty: the system roots.
	TruststoreLocation, TruststoreCerts string
	// ClientAuth is ssl.client.auth: none, requested or required.
	ClientAuth string
	// Protocols is ssl.enabled.protocols; CipherSuites ssl.cipher.suites.
	Protocols, CipherSuites []string
	// EndpointIdentification is ssl.endpoint.identification.algorithm.
	EndpointIdentification string
}

// ListenerTLS reads a listener's TLS settings from the configuration. It
// refuses key and trust store types other than PEM.
func ListenerTLS(cfg *config.Server, listener string) (TLSSettings, error) {
	get := func(key string) string { return cfg.ListenerString(listener, key) }
	for _, key := range []string{"ssl.keystore.type", "ssl.truststore.type"} {
		if t := get(key); t != "PEM" && (key == "ssl.keystore.type" || get("ssl.truststore.location") != "") {
			return TLSSettings{}, fmt.Errorf("auth: listener %s: %s=%s: Strata reads PEM only; set %s=PEM", listener, key, t, key)
		}
	}
	return TLSSettings{
		KeystoreLocation:       get("ssl.keystore.location"),
		KeystoreChain:          get("ssl.keystore.certificate.chain"),
		KeystoreKey:            get("ssl.keystore.key"),
		KeyPassword:            get("ssl.key.password"),
		TruststoreLocation:     get("ssl.truststore.location"),
		TruststoreCerts:        get("ssl.truststore.certificates"),
		ClientAuth:             get("ssl.client.auth"),
		Protocols:              cfg.ListenerList(listener, "ssl.enabled.protocols"),
		CipherSuites:           cfg.ListenerList(listener, "ssl.cipher.suites"),
		EndpointIdentification: get("ssl.endpoint.identification.algorithm"),
	}, nil
}

// TLSStore holds a listener's certificate and trusted roots, rereading
// the PEM files when they change (checked at most once a second, at a
// handshake), so certificates are rotated without a restart. A reread
// that fails keeps the previous material and reports the error through
// LastError. It is safe for concurrent use.
type TLSStore struct {
	settings TLSSettings
	base     *tls.Config

	mu        sync.Mutex
	checked   time.Time
	keyStamp  fileStamp
	rootStamp fileStamp
	current   *tls.Config
	lastErr   error
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) fileStamp {
	if path == "" {
		return fileStamp{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}
}

// NewTLSStore loads the settings' key store and trust store.
func NewTLSStore(s TLSSettings) (*TLSStore, error) {
	base := &tls.Config{}
	var err error
	if base.MinVersion, base.MaxVersion, err = tlsVersions(s.Protocols); err != nil {
		return nil, err
	}
	if base.CipherSuites, err = cipherSuites(s.CipherSuites); err != nil {
		return nil, err
	}
	switch s.ClientAuth {
	case "", "none":
		base.ClientAuth = tls.NoClientCert
	case "requested":
		base.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		base.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("auth: ssl.client.auth=%s: want none, requested or required", s.ClientAuth)
	}
	st := &TLSStore{settings: s, base: base}
	cfg, err := st.load()
	if err != nil {
		return nil, err
	}
	st.current = cfg
	st.checked = time.Now()
	st.keyStamp, st.rootStamp = stamp(s.KeystoreLocation), stamp(s.TruststoreLocation)
	return st, nil
}

// load reads the key and trust stores into a new config.
func (st *TLSStore) load() (*tls.Config, error) {
	cfg := st.base.Clone()
	s := st.settings
	chainPEM, keyPEM := []byte(s.KeystoreChain), []byte(s.KeystoreKey)
	if s.KeystoreLocation != "" {
		data, err := os.ReadFile(s.KeystoreLocation)
		if err != nil {
			return nil, fmt.Errorf("auth: ssl.keystore.location: %w", err)
		}
		chainPEM, keyPEM = data, data
	}
	if len(chainPEM) > 0 || len(keyPEM) > 0 {
		cert, err := keyPair(chainPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	rootsPEM := []byte(s.TruststoreCerts)
	if s.TruststoreLocation != "" {
		data, err := os.ReadFile(s.TruststoreLocation)
		if err != nil {
			return nil, fmt.Errorf("auth: ssl.truststore.location: %w", err)
		}
		rootsPEM = data
	}
	if len(rootsPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(rootsPEM) {
			return nil, errors.New("auth: the trust store holds no PEM certificate")
		}
		cfg.ClientCAs, cfg.RootCAs = pool, pool
	}
	return cfg, nil
}

// keyPair parses a certificate chain and a private key, refusing an
// encrypted key with a clear error.
func keyPair(chainPEM, keyPEM []byte) (tls.Certificate, error) {
	if bytes.Contains(keyPEM, []byte("ENCRYPTED")) {
		for rest := keyPEM; ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if b.Type == "ENCRYPTED PRIVATE KEY" || b.Headers["Proc-Type"] != "" {
				return tls.Certificate{}, ErrEncryptedKey
			}
		}
	}
	cert, err := tls.X509KeyPair(chainPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("auth: the key store: %w", err)
	}
	return cert, nil
}

// Config returns the TLS configuration now in force, rereading the files
// if they changed.
func (st *TLSStore) Config() *tls.Config {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := time.Now()
	if now.Sub(st.checked) < time.Second {
		return st.current
	}
	st.checked = now
	ks, rs := stamp(st.settings.KeystoreLocation), stamp(st.settings.TruststoreLocation)
	if ks == st.keyStamp && rs == st.rootStamp {
		return st.current
	}
	cfg, err := st.load()
	if err != nil {
		st.lastErr = err
		return st.current
	}
	st.keyStamp, st.rootStamp, st.current, st.lastErr = ks, rs, cfg, nil
	return st.current
}

// LastError is why the last reread failed, or nil.
func (st *TLSStore) LastError() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.lastErr
}

// ServerConfig returns a listener's tls.Config: each handshake takes the
// store's current material.
func (st *TLSStore) ServerConfig() (*tls.Config, error) {
	if len(st.current.Certificates) == 0 {
		return nil, errors.New("auth: an SSL listener needs a key store (ssl.keystore.location, or ssl.keystore.certificate.chain and ssl.keystore.key)")
	}
	return &tls.Config{
		MinVersion: st.base.MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return st.Config(), nil
		},
	}, nil
}

// ClientConfig returns the tls.Config an inter-broker connection dials
// with: the trust store as roots, the key store as the client certificate
// (for listeners that require one), and the host name checked unless
// ssl.endpoint.identification.algorithm is empty.
func (st *TLSStore) ClientConfig(serverName string) *tls.Config {
	cur := st.Config()
	cfg := &tls.Config{
		MinVersion:   cur.MinVersion,
		MaxVersion:   cur.MaxVersion,
		CipherSuites: cur.CipherSuites,
		RootCAs:      cur.RootCAs,
		Certificates: cur.Certificates,
		ServerName:   serverName,
	}
	if st.settings.EndpointIdentification == "" {
		// Verify the chain but not the name, as Kafka does with the
		// algorithm unset.
		roots := cur.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyChain(raw, roots)
		}
	}
	return cfg
}

func verifyChain(raw [][]byte, roots *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("auth: the server sent no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return err
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	return err
}

func tlsVersions(protocols []string) (minV, maxV uint16, err error) {
	if len(protocols) == 0 {
		protocols = []string{"TLSv1.2", "TLSv1.3"}
	}
	for _, p := range protocols {
		var v uint16
		switch p {
		case "TLSv1.2":
			v = tls.VersionTLS12
		case "TLSv1.3":
			v = tls.VersionTLS13
		default:
			return 0, 0, fmt.Errorf("auth: ssl.enabled.protocols: %s is not supported (TLSv1.2, TLSv1.3)", p)
		}
		if minV == 0 || v < minV {
			minV = v
		}
		maxV = max(maxV, v)
	}
	return minV, maxV, nil
}

func cipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var out []uint16
	for _, n := range names {
		i := slices.IndexFunc(tls.CipherSuites(), func(c *tls.CipherSuite) bool { return c.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("auth: ssl.cipher.suites: %s is not a supported cipher suite", n)
		}
		out = append(out, tls.CipherSuites()[i].ID)
	}
	return out, nil
}
