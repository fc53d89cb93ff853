package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/config"
)

// testBroker is a real broker on a free loopback port over a temporary
// directory.
type testBroker struct {
	*Broker
	dir      string
	settings map[string]string
	// logText, when set, receives the broker's log as text.
	logText *logBuffer
}

// logBuffer is a broker's log, written by its goroutines and read by a test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startLoggedBroker is startBroker with the broker's log kept for the test
// to read.
func startLoggedBroker(t testing.TB, settings map[string]string) *testBroker {
	t.Helper()
	tb := &testBroker{dir: t.TempDir(), settings: settings, logText: &logBuffer{}}
	tb.start(t, "127.0.0.1:0")
	t.Cleanup(func() { tb.Close() })
	return tb
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("STRATA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// startBroker starts a broker; settings are server properties.
func startBroker(t testing.TB, settings map[string]string) *testBroker {
	t.Helper()
	tb := &testBroker{dir: t.TempDir(), settings: settings}
	tb.start(t, "127.0.0.1:0")
	t.Cleanup(func() { tb.Close() })
	return tb
}

func (tb *testBroker) start(t testing.TB, listen string) {
	t.Helper()
	overrides := map[string]string{
		"log.dirs":              tb.dir,
		"listeners":             "PLAINTEXT://" + listen,
		"strata.admin.listener": "",
	}
	for k, v := range tb.settings {
		overrides[k] = v
	}
	cfg, err := config.NewServer(overrides)
	if err != nil {
		t.Fatal(err)
	}
	logger := testLogger(t)
	if tb.logText != nil {
		logger = slog.New(slog.NewTextHandler(tb.logText, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	b, err := New(Options{Config: cfg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	tb.Broker = b
}

// restart closes the broker cleanly and starts it again on the same port
// and directory.
func (tb *testBroker) restart(t testing.TB) {
	t.Helper()
	addr := tb.Addr()
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	tb.start(t, addr)
}

func newClient(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func newAdmin(t testing.TB, addr string) *kadm.Client {
	return kadm.NewClient(newClient(t, addr))
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createTopic(t testing.TB, adm *kadm.Client, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	resp, err := adm.CreateTopic(testContext(t), partitions, 1, configs, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("creating %s: %v %v", topic, err, resp.Err)
	}
}

// consumeN reads n records from the start of the topics.
func consumeN(t testing.TB, addr string, n int, topics ...string) []*kgo.Record {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	ctx := testContext(t)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", len(out), n, ctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch error on %s/%d: %v", e.Topic, e.Partition, e.Err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// rawRequest sends req at its set version on a new connection, with no
// client in between to rewrite it, and decodes the response.
func rawRequest(t testing.TB, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var rh kmsg.RequestFormatter
	frame := rh.AppendRequest(nil, req, 7)
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		t.Fatalf("reading response size: %v", err)
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, buf); err != nil {
		t.Fatal(err)
	}
	if id := int32(binary.BigEndian.Uint32(buf)); id != 7 {
		t.Fatalf("correlation id %d", id)
	}
	body := buf[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		// Skip the response header's empty tagged fields.
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return resp
}
