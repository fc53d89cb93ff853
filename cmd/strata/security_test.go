package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-io/strata"
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
	fails(t, "name an entity", "quota", "alter", "--set", "producer_byte_rate=1", "--brokers", brokerAddr)
	fails(t, "want key=number", "quota", "alter", "--client-id", "x", "--set", "producer_byte_rate", "--brokers", brokerAddr)
}
