package broker

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const plainJAAS = `org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";`

// saslBroker starts a broker with a PLAINTEXT listener (its client
// listener, for setting up), a SASL_PLAINTEXT and a SASL_SSL listener
// offering PLAIN and both SCRAMs, and SCRAM users bob (SHA-256) and carol
// (SHA-512) created through AlterUserScramCredentials.
func saslBroker(t *testing.T) (*testBroker, *tlsFixture) {
	f := newTLSFixture(t)
	settings := f.brokerSettings("none")
	settings["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
	settings["sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
	settings["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = plainJAAS
	settings["listener.name.sasl_ssl.plain.sasl.jaas.config"] = plainJAAS
	b := startBroker(t, settings)
	adm := newAdmin(t, b.Addr())
	res, err := adm.AlterUserSCRAMs(testContext(t), nil, []kadm.UpsertSCRAM{
		{User: "bob", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "bob-secret"},
		{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "carol-secret"},
	})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("creating SCRAM users: %v", err)
	}
	return b, f
}

func TestSASLFranzGo(t *testing.T) {
	b, f := saslBroker(t)
	createTopic(t, newAdmin(t, b.Addr()), "sasl", 1, nil)
	tlsCfg := &tls.Config{RootCAs: f.ca.Pool(), ServerName: "127.0.0.1"}
	for _, tc := range []struct {
		name, listener string
		mech           sasl.Mechanism
		ok             bool
	}{
		{"plain", "SASL_PLAINTEXT", plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism(), true},
		{"plain wrong password", "SASL_PLAINTEXT", plain.Auth{User: "alice", Pass: "nope"}.AsMechanism(), false},
		{"plain unknown user", "SASL_PLAINTEXT", plain.Auth{User: "eve", Pass: "alice-secret"}.AsMechanism(), false},
		{"scram-sha-256", "SASL_PLAINTEXT", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism(), true},
		{"scram-sha-256 wrong password", "SASL_PLAINTEXT", scram.Auth{User: "bob", Pass: "bob"}.AsSha256Mechanism(), false},
		{"scram-sha-256 with the 512 user", "SASL_PLAINTEXT", scram.Auth{User: "carol", Pass: "carol-secret"}.AsSha256Mechanism(), false},
		{"scram-sha-512 over tls", "SASL_SSL", scram.Auth{User: "carol", Pass: "carol-secret"}.AsSha512Mechanism(), true},
		{"plain over tls", "SASL_SSL", plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism(), true},
		{"scram-sha-512 over tls wrong password", "SASL_SSL", scram.Auth{User: "carol", Pass: "x"}.AsSha512Mechanism(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kgo.Opt{kgo.SASL(tc.mech), kgo.RequestRetries(0), kgo.RecordRetries(1)}
			if tc.listener == "SASL_SSL" {
				opts = append(opts, kgo.DialTLSConfig(tlsCfg))
			}
			cl := newClient(t, listenerAddr(t, b.Broker, tc.listener), opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := cl.ProduceSync(ctx, &kgo.Record{Topic: "sasl", Value: []byte(tc.name)}).FirstErr()
			switch {
			case tc.ok && err != nil:
				t.Fatalf("produce: %v", err)
			case !tc.ok && !errors.Is(err, kerr.SaslAuthenticationFailed):
				t.Fatalf("produce with bad credentials: %v, want SASL_AUTHENTICATION_FAILED", err)
			}
		})
	}
}

// TestSASLRefusesBeforeAuthentication checks Kafka's rules for a SASL
// connection that has not authenticated: other requests close it, and
// frames larger than sasl.server.max.receive.size are not read.
func TestSASLRefusesBeforeAuthentication(t *testing.T) {
	b, _ := saslBroker(t)
	addr := listenerAddr(t, b.Broker, "SASL_PLAINTEXT")
	closed := func(t *testing.T, frame []byte) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Write(frame); err != nil {
			t.Fatal(err)
		}
		if n, err := conn.Read(make([]byte, 64)); err != io.EOF {
			t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
		}
	}
	t.Run("metadata", func(t *testing.T) {
		var rf kmsg.RequestFormatter
		closed(t, rf.AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1))
	})
	t.Run("large frame", func(t *testing.T) {
		frame := binary.BigEndian.AppendUint32(nil, 10<<20) // 10 MiB announced
		closed(t, append(frame, 0, 0, 0, 0, 0, 0, 0, 0))
	})
	t.Run("authenticate without handshake", func(t *testing.T) {
		var rf kmsg.RequestFormatter
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.SASLAuthBytes = []byte("\x00alice\x00alice-secret")
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		conn.Write(rf.AppendRequest(nil, req, 1))
		resp := readResponse(t, conn, req)
		if code := resp.(*kmsg.SASLAuthenticateResponse).ErrorCode; code != kerr.IllegalSaslState.Code {
			t.Fatalf("error %d, want ILLEGAL_SASL_STATE", code)
		}
	})
}

// readResponse reads one response frame for req from conn.
func readResponse(t *testing.T, conn net.Conn, req kmsg.Request) kmsg.Response {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, buf); err != nil {
		t.Fatal(err)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	body := buf[4:]
	if resp.IsFlexible() {
		body = body[1:] // empty tagged fields
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestSASLSarama(t *testing.T) {
	b, _ := saslBroker(t)
	createTopic(t, newAdmin(t, b.Addr()), "sarama-sasl", 1, nil)
	addr := listenerAddr(t, b.Broker, "SASL_PLAINTEXT")
	for _, tc := range []struct {
		name     string
		version  int16
		password string
		ok       bool
	}{
		{"handshake v1", sarama.SASLHandshakeV1, "alice-secret", true},
		{"handshake v0 (bare tokens)", sarama.SASLHandshakeV0, "alice-secret", true},
		{"wrong password", sarama.SASLHandshakeV1, "wrong", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sarama.NewConfig()
			cfg.Version = sarama.V3_0_0_0
			cfg.Producer.Return.Successes = true
			cfg.Producer.Retry.Max = 0
			cfg.Metadata.Retry.Max = 0
			cfg.Net.SASL.Enable = true
			cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
			cfg.Net.SASL.Version = tc.version
			if tc.version == sarama.SASLHandshakeV0 {
				cfg.ApiVersionsRequest = false // sarama's rule for v0
			}
			cfg.Net.SASL.User, cfg.Net.SASL.Password = "alice", tc.password
			p, err := sarama.NewSyncProducer([]string{addr}, cfg)
			if !tc.ok {
				if err == nil {
					p.Close()
					t.Fatal("sarama connected with a wrong password")
				}
				return
			}
			if err != nil {
				t.Fatalf("sarama: %v", err)
			}
			defer p.Close()
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "sarama-sasl", Value: sarama.StringEncoder("x")}); err != nil {
				t.Fatalf("sarama produce: %v", err)
			}
		})
	}
}
