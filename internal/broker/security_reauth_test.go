package broker

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestReauthentication (KIP-368): with connections.max.reauth.ms,
// franz-go re-authenticates on its connections and keeps producing
// without new connections, while a client that does not re-authenticate
// is closed once its session expired.
func TestReauthentication(t *testing.T) {
	b := startBroker(t, map[string]string{
		"listeners":               "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
		"sasl.enabled.mechanisms": "PLAIN",
		"listener.name.sasl_plaintext.plain.sasl.jaas.config": plainJAAS,
		"connections.max.reauth.ms":                           "1500",
	})
	createTopic(t, newAdmin(t, b.Addr()), "reauth", 1, nil)
	addr := listenerAddr(t, b.Broker, "SASL_PLAINTEXT")

	cl := newClient(t, addr, kgo.SASL(plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism()))
	ctx := testContext(t)
	produce := func() {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "reauth", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	produce()
	opened := b.server.Stats().ConnectionsOpened
	// Across three session lifetimes the producer keeps its connections.
	end := time.Now().Add(4500 * time.Millisecond)
	poll.Until(t, 60*time.Second, "three session lifetimes of producing", func() bool {
		produce()
		return time.Now().After(end)
	})
	if got := b.server.Stats().ConnectionsOpened; got != opened {
		t.Fatalf("%d new connections: franz-go did not re-authenticate on its connections", got-opened)
	}

	// A raw client authenticates once and never again.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	var rf kmsg.RequestFormatter
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	conn.Write(rf.AppendRequest(nil, hs, 1))
	readResponse(t, conn, hs)
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.Version, au.SASLAuthBytes = 1, []byte("\x00alice\x00alice-secret")
	conn.Write(rf.AppendRequest(nil, au, 2))
	ar := readResponse(t, conn, au).(*kmsg.SASLAuthenticateResponse)
	if ar.ErrorCode != 0 || ar.SessionLifetimeMillis != 1500 {
		t.Fatalf("authenticate: error %d, session lifetime %d ms", ar.ErrorCode, ar.SessionLifetimeMillis)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	poll.Until(t, 60*time.Second, "the expired session's connection to be closed", func() bool {
		if _, err := conn.Write(rf.AppendRequest(nil, md, 3)); err != nil {
			return true
		}
		var size [4]byte
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			return true
		}
		buf := make([]byte, int(size[0])<<24|int(size[1])<<16|int(size[2])<<8|int(size[3]))
		_, err := io.ReadFull(conn, buf)
		return err != nil
	})
}
