package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/tlstest"
)

// TestEncryptedKeyProcess runs `strata serve --config server.properties`
// whose SSL listener's key is encrypted PKCS#8 (openssl pkcs8 -topk8 -v2
// aes-256-cbc) with ssl.key.password, as a Kafka operator would move
// their broker's PEM key store over; franz-go and kcat produce and
// consume over it with mutual TLS. With a wrong password the process
// exits, saying why.
func TestEncryptedKeyProcess(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "e2e-ca")
	caFile := ca.Write(t, dir, "ca")
	server := ca.Server(t, "broker").Write(t, dir, "server")
	clientPair := ca.Client(t, pkix.Name{CommonName: "e2e-client"})
	clientFiles := clientPair.Write(t, dir, "client")
	const password = "a passphrase, with punctuation!"
	enc, err := exec.Command("openssl", "pkcs8", "-topk8", "-in", server.Key, "-v2", "aes-256-cbc", "-passout", "pass:"+password).Output()
	if err != nil {
		t.Fatalf("openssl pkcs8: %v", err)
	}
	cert, err := os.ReadFile(server.Cert)
	if err != nil {
		t.Fatal(err)
	}
	keystore := filepath.Join(dir, "broker-keystore.pem")
	if err := os.WriteFile(keystore, append(enc, cert...), 0o600); err != nil {
		t.Fatal(err)
	}
	plainAddr, sslAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	writeProps := func(keyPassword string) string {
		props := filepath.Join(t.TempDir(), "server.properties")
		body := fmt.Sprintf(`log.dirs=%s
listeners=PLAINTEXT://%s,SSL://%s
strata.admin.listener=
ssl.keystore.type=PEM
ssl.keystore.location=%s
ssl.key.password=%s
ssl.truststore.type=PEM
ssl.truststore.location=%s
ssl.client.auth=required
`, filepath.Join(dir, "data"), plainAddr, sslAddr, keystore, keyPassword, caFile)
		if err := os.WriteFile(props, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return props
	}

	p := &process{t: t, dir: dir, addr: sslAddr, args: []string{"serve", "--config", writeProps(password)}}
	p.start()
	t.Cleanup(p.kill)
	createTopic(t, client(t, plainAddr), "enc", 1, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tlsCfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{clientPair.TLS}}
	cl := client(t, sslAddr, kgo.DialTLSConfig(tlsCfg))
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "enc", Value: []byte("franz")}).FirstErr(); err != nil {
		t.Fatalf("franz-go produce over mTLS: %v\n%s", err, p.logs)
	}
	if _, err := exec.LookPath("kcat"); err == nil {
		ssl := []string{"-b", sslAddr, "-X", "security.protocol=ssl", "-X", "ssl.ca.location=" + caFile,
			"-X", "ssl.certificate.location=" + clientFiles.Cert, "-X", "ssl.key.location=" + clientFiles.Key}
		prod := exec.CommandContext(ctx, "kcat", append(ssl, "-P", "-t", "enc")...)
		prod.Stdin = strings.NewReader("kcat\n")
		if out, err := prod.CombinedOutput(); err != nil {
			t.Fatalf("kcat produce: %v: %s", err, out)
		}
		out, err := exec.CommandContext(ctx, "kcat", append(ssl, "-C", "-t", "enc", "-o", "beginning", "-e", "-q")...).Output()
		if err != nil || string(out) != "franz\nkcat\n" {
			t.Fatalf("kcat consume: %v: %q", err, out)
		}
	} else {
		t.Log("kcat not installed: franz-go only")
	}
	p.stop()

	// The same broker with a wrong password does not start.
	wrong := exec.CommandContext(ctx, binary, "serve", "--config", writeProps("not it"))
	out, err := wrong.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "ssl.key.password does not decrypt the private key") {
		t.Fatalf("strata serve with a wrong ssl.key.password: %v\n%s", err, out)
	}
}
