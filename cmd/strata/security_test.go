package main

import (
	"context"
	"crypto/x509/pkix"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-io/strata"
	"github.com/strata-io/strata/internal/testutil/tlstest"
)

// TestUserAndACLCommands drives strata user and strata acl, over SASL,
// against a node with the authorizer on, and checks that the ACLs they
// manage decide what a SCRAM user the CLI created may do.
func TestUserAndACLCommands(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	saslAddr := ln.Addr().String()
	ln.Close()
	n, err := strata.Start(strata.Options{Dir: t.TempDir(), Settings: map[string]string{
		"listeners":               "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://" + saslAddr,
		"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
		"listener.name.sasl_plaintext.plain.sasl.jaas.config": `org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw";`,
		"authorizer.class.name":                               "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users":                                         "User:admin",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	admin := []string{"--brokers", saslAddr, "--sasl-mechanism", "PLAIN", "--sasl-username", "admin", "--sasl-password", "admin-pw"}
	props := filepath.Join(t.TempDir(), "bob.properties")
	if err := os.WriteFile(props, []byte("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=bob\nsasl.password=bob-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bob := []string{"--brokers", saslAddr, "--command-config", props}
	run := func(stdin string, args ...string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return execute(ctx, stdin, args...)
	}
	must := func(stdin string, args ...string) string {
		t.Helper()
		r := run(stdin, args...)
		if r.code != 0 {
			t.Fatalf("strata %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
		}
		return r.stdout
	}
	must("", append([]string{"user", "create", "bob", "--password", "bob-pw"}, admin...)...)
	if out := must("", append([]string{"user", "list"}, admin...)...); !strings.Contains(out, "bob") || !strings.Contains(out, "SCRAM-SHA-256") {
		t.Fatalf("user list: %q", out)
	}
	must("", append([]string{"topic", "create", "orders"}, admin...)...)

	// Without an ACL bob, authenticated with SCRAM, may not write.
	if r := run("a\n", append([]string{"topic", "produce", "orders"}, bob...)...); r.code == 0 || !strings.Contains(r.stderr, "TOPIC_AUTHORIZATION_FAILED") {
		t.Fatalf("produce without an ACL: exit %d: %s", r.code, r.stderr)
	}
	// Changing a feature needs ALTER on the cluster; reading them does not.
	if out := must("", append([]string{"feature", "describe"}, bob...)...); !strings.Contains(out, "transaction.version") {
		t.Fatalf("feature describe as bob: %q", out)
	}
	if r := run("", append([]string{"feature", "downgrade", "--feature", "transaction.version=1", "--dry-run"}, bob...)...); r.code == 0 || !strings.Contains(r.stderr, "CLUSTER_AUTHORIZATION_FAILED") {
		t.Fatalf("feature downgrade as bob: exit %d: %s", r.code, r.stderr)
	}
	must("", append([]string{"feature", "downgrade", "--feature", "transaction.version=1", "--dry-run"}, admin...)...)
	must("", append([]string{"acl", "create", "--allow-principal", "User:bob", "--operation", "WRITE", "--topic", "orders"}, admin...)...)
	if out := must("", append([]string{"acl", "list"}, admin...)...); !strings.Contains(out, "User:bob") || !strings.Contains(out, "WRITE") {
		t.Fatalf("acl list: %q", out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := run("a\n", append([]string{"topic", "produce", "orders"}, bob...)...)
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("produce with WRITE: %s", r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	must("", append([]string{"acl", "delete", "--allow-principal", "User:bob", "--topic", "orders"}, admin...)...)
	if out := must("", append([]string{"acl", "list"}, admin...)...); strings.Contains(out, "User:bob") {
		t.Fatalf("acl list after delete: %q", out)
	}
	must("", append([]string{"user", "delete", "bob"}, admin...)...)
	if r := run("a\n", append([]string{"topic", "produce", "orders"}, bob...)...); r.code == 0 || !strings.Contains(r.stderr, "SASL_AUTHENTICATION_FAILED") {
		t.Fatalf("produce as a deleted user: exit %d: %s", r.code, r.stderr)
	}
	// A wrong password is refused.
	if r := run("", "user", "list", "--brokers", saslAddr, "--sasl-mechanism", "PLAIN", "--sasl-username", "admin", "--sasl-password", "nope"); r.code == 0 {
		t.Fatalf("a wrong password listed users: %s", r.stdout)
	}
}

func TestQuotaCommands(t *testing.T) {
	ok(t, "", "quota", "alter", "--client-id", "loader", "--set", "producer_byte_rate=1048576", "--set", "consumer_byte_rate=2097152", "--brokers", brokerAddr)
	ok(t, "", "quota", "alter", "--user-default", "--set", "producer_byte_rate=4096", "--brokers", brokerAddr)
	out := ok(t, "", "quota", "describe", "--brokers", brokerAddr)
	for _, want := range []string{"client-id=loader", "producer_byte_rate", "1048576", "user=<default>", "4096"} {
		if !strings.Contains(out, want) {
			t.Fatalf("quota describe lacks %q:\n%s", want, out)
		}
	}
	out = ok(t, "", "quota", "describe", "--client-id", "loader", "--brokers", brokerAddr)
	if strings.Contains(out, "<default>") || !strings.Contains(out, "2097152") {
		t.Fatalf("quota describe --client-id loader:\n%s", out)
	}
	ok(t, "", "quota", "alter", "--client-id", "loader", "--remove", "producer_byte_rate", "--remove", "consumer_byte_rate", "--brokers", brokerAddr)
	ok(t, "", "quota", "alter", "--user-default", "--remove", "producer_byte_rate", "--brokers", brokerAddr)
	if out := ok(t, "", "quota", "describe", "--brokers", brokerAddr); strings.Contains(out, "loader") {
		t.Fatalf("removed quota still described:\n%s", out)
	}
	// An IP's connection_creation_rate (an address no test connects from).
	ok(t, "", "quota", "alter", "--ip", "10.1.2.3", "--set", "connection_creation_rate=50", "--brokers", brokerAddr)
	if out := ok(t, "", "quota", "describe", "--brokers", brokerAddr); !strings.Contains(out, "ip=10.1.2.3") || !strings.Contains(out, "connection_creation_rate") {
		t.Fatalf("quota describe lacks the ip quota:\n%s", out)
	}
	fails(t, "INVALID_REQUEST", "quota", "alter", "--client-id", "x", "--set", "connection_creation_rate=5", "--brokers", brokerAddr)
	fails(t, "INVALID_REQUEST", "quota", "alter", "--ip", "10.1.2.3", "--set", "producer_byte_rate=5", "--brokers", brokerAddr)
	fails(t, "stands alone", "quota", "alter", "--ip", "10.1.2.3", "--user", "u", "--set", "connection_creation_rate=5", "--brokers", brokerAddr)
	ok(t, "", "quota", "alter", "--ip", "10.1.2.3", "--remove", "connection_creation_rate", "--brokers", brokerAddr)
	if out := ok(t, "", "quota", "describe", "--brokers", brokerAddr); strings.Contains(out, "10.1.2.3") {
		t.Fatalf("removed ip quota still described:\n%s", out)
	}
	fails(t, "name an entity", "quota", "alter", "--set", "producer_byte_rate=1", "--brokers", brokerAddr)
	fails(t, "want key=number", "quota", "alter", "--client-id", "x", "--set", "producer_byte_rate", "--brokers", brokerAddr)
}

// TestCLIEncryptedClientKey drives the CLI over mutual TLS with a client
// key encrypted by openssl (PKCS#8, AES-256-CBC), its password given as
// Kafka's tools take it: ssl.key.password in --command-config.
func TestCLIEncryptedClientKey(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "cli-ca")
	caFile := ca.Write(t, dir, "ca")
	server := ca.Server(t, "broker").Write(t, dir, "server")
	client := ca.Client(t, pkix.Name{CommonName: "cli"}).Write(t, dir, "client")
	const password = "cli key password"
	enc, err := exec.Command("openssl", "pkcs8", "-topk8", "-in", client.Key, "-v2", "aes-256-cbc", "-passout", "pass:"+password).Output()
	if err != nil {
		t.Fatalf("openssl pkcs8: %v", err)
	}
	encKey := filepath.Join(dir, "client-enc.key")
	if err := os.WriteFile(encKey, enc, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sslAddr := ln.Addr().String()
	ln.Close()
	n, err := strata.Start(strata.Options{Dir: t.TempDir(), Settings: map[string]string{
		"listeners":               "PLAINTEXT://127.0.0.1:0,SSL://" + sslAddr,
		"ssl.keystore.type":       "PEM",
		"ssl.keystore.location":   server.Keystore,
		"ssl.truststore.type":     "PEM",
		"ssl.truststore.location": caFile,
		"ssl.client.auth":         "required",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	props := func(keyPassword string) string {
		p := filepath.Join(t.TempDir(), "client.properties")
		body := "security.protocol=SSL\nssl.truststore.location=" + caFile + "\nssl.certificate.location=" + client.Cert +
			"\nssl.key.location=" + encKey + "\nssl.key.password=" + keyPassword + "\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r := execute(ctx, "", "topic", "create", "over-mtls", "--brokers", sslAddr, "--command-config", props(password)); r.code != 0 {
		t.Fatalf("topic create over mTLS with an encrypted key: exit %d: %s", r.code, r.stderr)
	}
	r := execute(ctx, "", "topic", "list", "--brokers", sslAddr, "--command-config", props("wrong"))
	if r.code == 0 || !strings.Contains(r.stderr, "ssl.key.password does not decrypt") {
		t.Fatalf("a wrong ssl.key.password: exit %d: %s", r.code, r.stderr)
	}
}
