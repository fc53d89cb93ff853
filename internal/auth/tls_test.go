package auth

import (
	"bytes"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/testutil/tlstest"
)

// TestTLSStoreReloads checks that a key store rewritten on disk is served
// from the next handshake on, without a restart, and that a broken
// rewrite keeps the old certificate.
func TestTLSStoreReloads(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "first").Write(t, dir, "server")
	st, err := NewTLSStore(TLSSettings{KeystoreLocation: first.Keystore, TruststoreLocation: ca.Write(t, dir, "ca"), ClientAuth: "required"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ServerConfig(); err != nil {
		t.Fatal(err)
	}
	leafCN := func() string { return st.Config().Certificates[0].Leaf.Subject.CommonName }
	if got := leafCN(); got != "first" {
		t.Fatalf("serving %q", got)
	}
	if st.Config().ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatal("ssl.client.auth=required not applied")
	}

	if err := os.WriteFile(first.Keystore, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the broken key store to be noticed", func() bool { st.Config(); return st.LastError() != nil })
	if got := leafCN(); got != "first" {
		t.Fatalf("after a broken rewrite serving %q", got)
	}

	second := ca.Server(t, "second")
	data := append(append([]byte{}, second.KeyPEM...), second.CertPEM...)
	if err := os.WriteFile(first.Keystore, data, 0o600); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the new certificate to be served", func() bool { return leafCN() == "second" })
}

func TestTLSStoreRefuses(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	pair := ca.Server(t, "s")
	encrypted := filepath.Join(dir, "enc.pem")
	enc := bytes.Replace(pair.KeyPEM, []byte("PRIVATE KEY"), []byte("ENCRYPTED PRIVATE KEY"), 2)
	if err := os.WriteFile(encrypted, append(enc, pair.CertPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTLSStore(TLSSettings{KeystoreLocation: encrypted}); !errors.Is(err, ErrKeyNeedsPassword) {
		t.Fatalf("encrypted key without ssl.key.password: %v", err)
	}
	if _, err := NewTLSStore(TLSSettings{KeystoreLocation: filepath.Join(dir, "missing.pem")}); err == nil {
		t.Fatal("a missing key store was accepted")
	}
	if _, err := NewTLSStore(TLSSettings{Protocols: []string{"TLSv1.1"}}); err == nil {
		t.Fatal("TLSv1.1 was accepted")
	}
	st, err := NewTLSStore(TLSSettings{KeystoreChain: string(pair.CertPEM), KeystoreKey: string(pair.KeyPEM)})
	if err != nil {
		t.Fatalf("inline key store: %v", err)
	}
	if _, err := st.ServerConfig(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTLSStore(TLSSettings{CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}); err != nil {
		t.Fatal(err)
	}
}

// TestTLSStoreReloadDoesNotBlockHandshakes rereads a key store whose file
// is a named pipe, so the reread stays inside load until the test writes
// the new key store into it: meanwhile another handshake's Config must
// return the certificate in force instead of waiting for the reread (a
// reread of an encrypted key runs a PBKDF2 derivation that can take
// seconds), and once the reread finishes the new certificate is served.
func TestTLSStoreReloadDoesNotBlockHandshakes(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	first := ca.Server(t, "first").Write(t, dir, "server")
	st, err := NewTLSStore(TLSSettings{KeystoreLocation: first.Keystore})
	if err != nil {
		t.Fatal(err)
	}
	leafCN := func(cfg *tls.Config) string { return cfg.Certificates[0].Leaf.Subject.CommonName }
	old := st.Config()
	if got := leafCN(old); got != "first" {
		t.Fatalf("serving %q", got)
	}
	if err := os.Remove(first.Keystore); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(first.Keystore, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}

	// The reloader calls Config until the pipe's stamp is noticed (at
	// most once a second) and it blocks reading the pipe.
	reloaded := make(chan *tls.Config, 1)
	go func() {
		for {
			if cfg := st.Config(); cfg != old {
				reloaded <- cfg
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// Opening the pipe for writing returns once the reloader has opened
	// it for reading: it is inside the reread.
	pipe, err := os.OpenFile(first.Keystore, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	during := make(chan *tls.Config, 1)
	go func() { during <- st.Config() }()
	select {
	case cfg := <-during:
		if cfg != old {
			t.Fatalf("during the reread serving %q, want the certificate in force", leafCN(cfg))
		}
	case <-time.After(30 * time.Second): // a deadlock guard, not a speed goal
		pipe.Close()
		t.Fatal("Config waited for another call's reread")
	}

	second := ca.Server(t, "second")
	if _, err := pipe.Write(append(append([]byte{}, second.KeyPEM...), second.CertPEM...)); err != nil {
		t.Fatal(err)
	}
	if err := pipe.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := <-reloaded
	if got := leafCN(cfg); got != "second" {
		t.Fatalf("the reread loaded %q", got)
	}
	if err := st.LastError(); err != nil {
		t.Fatal(err)
	}
	if got := leafCN(st.Config()); got != "second" {
		t.Fatalf("after the reread serving %q", got)
	}
}
