package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strata-io/strata/internal/config"
)

// ErrLegacyEncryptedKey is returned for a private key encrypted in
// OpenSSL's legacy PEM format ("Proc-Type: 4,ENCRYPTED" headers, RFC
// 1423), which Kafka does not read either and Go deprecated as insecure.
var ErrLegacyEncryptedKey = errors.New("auth: the private key is encrypted in the legacy PEM format (Proc-Type: 4,ENCRYPTED), which is not supported; convert it to encrypted PKCS#8 with `openssl pkcs8 -topk8 -v2 aes-256-cbc`")

// ErrKeyNeedsPassword is returned for an encrypted private key when
// ssl.key.password is not set.
var ErrKeyNeedsPassword = errors.New("auth: the private key is encrypted (ENCRYPTED PRIVATE KEY) but ssl.key.password is not set")

// ErrKeyNotEncrypted is returned when ssl.key.password is set but the
// private key is not encrypted: Kafka's PEM key store then refuses the key
// too, and a password that protects nothing is a misconfiguration.
var ErrKeyNotEncrypted = errors.New("auth: ssl.key.password is set but the private key is not encrypted; unset ssl.key.password or encrypt the key (openssl pkcs8 -topk8 -v2 aes-256-cbc)")

// TLSSettings are a listener's ssl.* keys, resolved with their
// listener.name.<l>. overrides.
type TLSSettings struct {
	// KeystoreLocation is ssl.keystore.location: a PEM file with the key
	// and the certificate chain. KeystoreChain and KeystoreKey are
	// ssl.keystore.certificate.chain and ssl.keystore.key, inline.
	KeystoreLocation, KeystoreChain, KeystoreKey string
	// KeyPassword is ssl.key.password: set exactly when the private key
	// is encrypted PKCS#8 ("ENCRYPTED PRIVATE KEY"), as Kafka's PEM key
	// store requires.
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
//
// A reread (file reads and, for an encrypted key, a PBKDF2 derivation of
// up to millions of iterations) runs outside mu: one handshake does it
// while the others keep the current material, and its result is swapped
// in under mu.
type TLSStore struct {
	settings TLSSettings
	base     *tls.Config

	mu        sync.Mutex
	checked   time.Time
	reloading bool // a Config call is rereading the files
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
		cert, err := KeyPair(chainPEM, keyPEM, s.KeyPassword)
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

// KeyPair parses a PEM certificate chain and private key as Kafka's PEM
// key store does: an encrypted PKCS#8 key ("ENCRYPTED PRIVATE KEY") is
// decrypted with password (ssl.key.password), which must be set exactly
// when the key is encrypted. chainPEM and keyPEM may be the same bytes (a
// key store file holding both).
func KeyPair(chainPEM, keyPEM []byte, password string) (tls.Certificate, error) {
	var (
		encrypted, plain *pem.Block
		keys             int
	)
	for rest := keyPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		switch {
		case b.Type == "ENCRYPTED PRIVATE KEY":
			encrypted = b
			keys++
		case strings.HasSuffix(b.Type, "PRIVATE KEY"):
			if b.Headers["Proc-Type"] != "" {
				return tls.Certificate{}, ErrLegacyEncryptedKey
			}
			plain = b
			keys++
		}
	}
	if keys > 1 {
		return tls.Certificate{}, fmt.Errorf("auth: the key store holds %d private keys, want one", keys)
	}
	switch {
	case encrypted != nil && password == "":
		return tls.Certificate{}, ErrKeyNeedsPassword
	case plain != nil && password != "":
		return tls.Certificate{}, ErrKeyNotEncrypted
	case encrypted != nil:
		der, err := DecryptPKCS8(encrypted.Bytes, []byte(password))
		if err != nil {
			return tls.Certificate{}, err
		}
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
		clear(der)
		defer clear(keyPEM)
	}
	cert, err := tls.X509KeyPair(chainPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("auth: the key store: %w", err)
	}
	return cert, nil
}

// Config returns the TLS configuration now in force, rereading the files
// if they changed. The call that rereads them waits for the reread; the
// calls meanwhile return the configuration in force without waiting.
func (st *TLSStore) Config() *tls.Config {
	st.mu.Lock()
	now := time.Now()
	if st.reloading || now.Sub(st.checked) < time.Second {
		cur := st.current
		st.mu.Unlock()
		return cur
	}
	st.checked, st.reloading = now, true
	keyStamp, rootStamp := st.keyStamp, st.rootStamp
	st.mu.Unlock()

	ks, rs := stamp(st.settings.KeystoreLocation), stamp(st.settings.TruststoreLocation)
	var cfg *tls.Config
	var err error
	if ks != keyStamp || rs != rootStamp {
		cfg, err = st.load()
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	st.reloading = false
	switch {
	case err != nil:
		st.lastErr = err
	case cfg != nil:
		st.keyStamp, st.rootStamp, st.current, st.lastErr = ks, rs, cfg, nil
	}
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
	if len(st.Config().Certificates) == 0 {
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
