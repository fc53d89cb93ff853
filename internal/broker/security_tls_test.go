package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/testutil/tlstest"
)

// tlsFixture is a CA, a broker certificate and client certificates, as
// PEM files in a temporary directory.
type tlsFixture struct {
	dir            string
	ca             *tlstest.CA
	caFile         string
	server         tlstest.Files
	client         *tlstest.Pair
	clientFiles    tlstest.Files
	untrusted      *tlstest.Pair
	untrustedFiles tlstest.Files
}

func newTLSFixture(t *testing.T) *tlsFixture {
	f := &tlsFixture{dir: t.TempDir(), ca: tlstest.NewCA(t, "strata-test-ca")}
	f.caFile = f.ca.Write(t, f.dir, "ca")
	f.server = f.ca.Server(t, "broker").Write(t, f.dir, "server")
	f.client = f.ca.Client(t, pkix.Name{CommonName: "alice", OrganizationalUnit: []string{"eng"}, Organization: []string{"Strata"}})
	f.clientFiles = f.client.Write(t, f.dir, "client")
	other := tlstest.NewCA(t, "some-other-ca")
	f.untrusted = other.Client(t, pkix.Name{CommonName: "mallory"})
	f.untrustedFiles = f.untrusted.Write(t, f.dir, "untrusted")
	return f
}

// brokerSettings are the settings of a broker with a PLAINTEXT listener
// (the client listener) and an SSL one.
func (f *tlsFixture) brokerSettings(clientAuth string) map[string]string {
	return map[string]string{
		"listeners":               "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
		"ssl.keystore.type":       "PEM",
		"ssl.keystore.location":   f.server.Keystore,
		"ssl.truststore.type":     "PEM",
		"ssl.truststore.location": f.caFile,
		"ssl.client.auth":         clientAuth,
	}
}

// listenerAddr is the advertised address of a broker's listener.
func listenerAddr(t testing.TB, b *Broker, name string) string {
	t.Helper()
	for _, bl := range b.listeners {
		if bl.Name == name {
			return bl.advertised.Addr()
		}
	}
	t.Fatalf("no listener %s", name)
	return ""
}

func TestSSLListener(t *testing.T) {
	f := newTLSFixture(t)
	b := startBroker(t, f.brokerSettings("none"))
	sslAddr := listenerAddr(t, b.Broker, "SSL")
	createTopic(t, newAdmin(t, b.Addr()), "tls", 1, nil)

	tlsCfg := &tls.Config{RootCAs: f.ca.Pool(), ServerName: "127.0.0.1"}
	// Metadata answers with the SSL listener's endpoints to a client that
	// came in on it: franz-go then talks TLS to the partition leader.
	cl := newClient(t, sslAddr, kgo.DialTLSConfig(tlsCfg), kgo.RecordRetries(3))
	ctx := testContext(t)
	for i := 0; i < 50; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "tls", Value: []byte("over tls")}).FirstErr(); err != nil {
			t.Fatalf("produce over TLS: %v", err)
		}
	}
	cons := newClient(t, sslAddr, kgo.DialTLSConfig(tlsCfg), kgo.ConsumeTopics("tls"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := 0
	for n < 50 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 50 over TLS", n)
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch over TLS: %v", e.Err)
		}
		n += len(fs.Records())
	}
	// The plaintext listener still serves (and still uses sendfile).
	if got := consumeN(t, b.Addr(), 50, "tls"); len(got) < 50 {
		t.Fatalf("plaintext consume read %d", len(got))
	}

	// A client that does not trust the broker's CA gives up.
	bad := newClient(t, sslAddr, kgo.DialTLSConfig(&tls.Config{ServerName: "127.0.0.1"}), kgo.RequestRetries(0))
	shortCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := bad.Ping(shortCtx); err == nil {
		t.Fatal("a client that does not trust the broker's certificate connected")
	}
}

func TestMutualTLS(t *testing.T) {
	f := newTLSFixture(t)
	b := startBroker(t, f.brokerSettings("required"))
	sslAddr := listenerAddr(t, b.Broker, "SSL")
	createTopic(t, newAdmin(t, b.Addr()), "mtls", 1, nil)

	good := &tls.Config{RootCAs: f.ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{f.client.TLS}}
	cl := newClient(t, sslAddr, kgo.DialTLSConfig(good))
	ctx := testContext(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "mtls", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce with a trusted client certificate: %v", err)
	}

	for name, cfg := range map[string]*tls.Config{
		"no certificate":        {RootCAs: f.ca.Pool(), ServerName: "127.0.0.1"},
		"untrusted certificate": {RootCAs: f.ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{f.untrusted.TLS}},
	} {
		t.Run(name, func(t *testing.T) {
			bad := newClient(t, sslAddr, kgo.DialTLSConfig(cfg), kgo.RequestRetries(0))
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := bad.Ping(ctx); err == nil {
				t.Fatal("the broker accepted the connection")
			}
		})
	}
}

// pythonClient runs testdata/security_clients.py with /usr/bin/python3
// (skipping when the library is not installed) and returns the outcome it
// printed: "ok N", "short N" or "refused: ...".
func pythonClient(t *testing.T, lib string, settings map[string]any) string {
	t.Helper()
	const python = "/usr/bin/python3"
	module := map[string]string{"kafka-python": "kafka", "confluent": "confluent_kafka"}[lib]
	if out, err := exec.Command(python, "-c", "import "+module).CombinedOutput(); err != nil {
		t.Skipf("%s needs %s with %s: %v: %s", lib, python, module, err, out)
	}
	js, _ := json.Marshal(settings)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	script, _ := filepath.Abs("testdata/security_clients.py")
	cmd := exec.CommandContext(ctx, python, script, lib, string(js))
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1")
	out, err := cmd.Output() // librdkafka's own log lines go to stderr
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v\n%s", lib, err, out)
	}
	return lastLine(string(out))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestSSLEncryptedKey serves an SSL listener whose private key is
// encrypted PKCS#8 (as `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it)
// with ssl.key.password, to franz-go and kcat.
func TestSSLEncryptedKey(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed (internal/auth's checked-in vectors cover the decoder)")
	}
	f := newTLSFixture(t)
	const password = "broker key secret"
	enc, err := exec.Command("openssl", "pkcs8", "-topk8", "-in", f.server.Key, "-v2", "aes-256-cbc",
		"-v2prf", "hmacWithSHA256", "-passout", "pass:"+password).Output()
	if err != nil {
		t.Fatalf("openssl pkcs8: %v", err)
	}
	certPEM, err := os.ReadFile(f.server.Cert)
	if err != nil {
		t.Fatal(err)
	}
	keystore := filepath.Join(f.dir, "encrypted.pem")
	if err := os.WriteFile(keystore, append(enc, certPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	settings := f.brokerSettings("none")
	settings["ssl.keystore.location"] = keystore
	settings["ssl.key.password"] = password
	b := startBroker(t, settings)
	sslAddr := listenerAddr(t, b.Broker, "SSL")
	createTopic(t, newAdmin(t, b.Addr()), "enc-key", 1, nil)

	cl := newClient(t, sslAddr, kgo.DialTLSConfig(&tls.Config{RootCAs: f.ca.Pool(), ServerName: "127.0.0.1"}))
	ctx := testContext(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "enc-key", Value: []byte("franz")}).FirstErr(); err != nil {
		t.Fatalf("franz-go produce over SSL with an encrypted broker key: %v", err)
	}
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Log("kcat not installed: franz-go only")
		return
	}
	kctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ssl := []string{"-b", sslAddr, "-X", "security.protocol=ssl", "-X", "ssl.ca.location=" + f.caFile}
	prod := exec.CommandContext(kctx, "kcat", append(ssl, "-P", "-t", "enc-key")...)
	prod.Stdin = strings.NewReader("kcat\n")
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v: %s", err, out)
	}
	out, err := exec.CommandContext(kctx, "kcat", append(ssl, "-C", "-t", "enc-key", "-o", "beginning", "-e", "-q")...).Output()
	if err != nil || string(out) != "franz\nkcat\n" {
		t.Fatalf("kcat consume: %v: %q", err, out)
	}

	// A wrong ssl.key.password stops the broker from starting, naming why.
	settings["ssl.key.password"] = "wrong"
	settings["log.dirs"] = t.TempDir()
	cfg, err := config.NewServer(settings)
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := New(Options{Config: cfg, Logger: testLogger(t)})
	if err == nil {
		if err = wrong.Start(); err == nil {
			wrong.Close()
		}
	}
	if !errors.Is(err, auth.ErrKeyPassword) {
		t.Fatalf("a broker with a wrong ssl.key.password: %v, want auth.ErrKeyPassword", err)
	}
}
