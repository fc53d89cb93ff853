package wire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCopyingTransports: over TLS and Unix sockets, where sendfile cannot
// be used, spliced regions are copied and the client gets the same bytes.
func TestCopyingTransports(t *testing.T) {
	batch := makeBatch(0, "over", "tls")
	f := writeTestFile(t, batch)
	cert := selfSignedCert(t)
	transports := map[string]struct {
		listen func(t *testing.T) net.Listener
		dial   func(t *testing.T, addr string) net.Conn
	}{
		"tls": {
			listen: func(t *testing.T) net.Listener {
				l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
				if err != nil {
					t.Fatal(err)
				}
				return l
			},
			dial: func(t *testing.T, addr string) net.Conn {
				c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
				if err != nil {
					t.Fatal(err)
				}
				return c
			},
		},
		"unix": {
			listen: func(t *testing.T) net.Listener {
				l, err := net.Listen("unix", filepath.Join(t.TempDir(), "wire.sock"))
				if err != nil {
					t.Fatal(err)
				}
				return l
			},
			dial: func(t *testing.T, addr string) net.Conn {
				c, err := net.Dial("unix", addr)
				if err != nil {
					t.Fatal(err)
				}
				return c
			},
		},
	}
	for name, tr := range transports {
		t.Run(name, func(t *testing.T) {
			h := newTestHandler()
			h.regions = map[int32]FileRegion{0: {File: f, Len: int64(len(batch))}}
			var tlsSeen atomic.Bool
			h.intercept = func(_ context.Context, c *Conn, _ *Request) (Response, bool) {
				tlsSeen.Store(c.TLS() != nil)
				return Response{}, false
			}
			srv, err := NewServer(Config{Handler: h, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			l := tr.listen(t)
			served := make(chan error, 1)
			go func() { served <- srv.Serve(l) }()
			defer func() {
				srv.Close()
				<-served
			}()
			conn := tr.dial(t, l.Addr().String())
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			c := &rawClient{t: t, conn: conn, br: bufio.NewReader(conn), f: kmsg.NewRequestFormatter()}
			req := kmsg.NewPtrFetchRequest()
			req.Version = 12
			topic := kmsg.NewFetchRequestTopic()
			topic.Topic = "t"
			topic.Partitions = append(topic.Partitions, kmsg.NewFetchRequestTopicPartition())
			req.Topics = append(req.Topics, topic)
			resp := c.read(req, c.send(req)).(*kmsg.FetchResponse)
			if got := resp.Topics[0].Partitions[0].RecordBatches; !bytes.Equal(got, batch) {
				t.Fatalf("records differ")
			}
			if want := name == "tls"; tlsSeen.Load() != want {
				t.Fatalf("Conn.TLS() != nil is %v, want %v", !want, want)
			}
		})
	}
}

// TestTLSListenerLargeResponses: NewTLSListener's connections collect each
// Write's records in a batch of batchSize; regions larger than the batch
// and than copyRegion's buffer, at odd offsets, three to a response, four
// responses in flight, arrive whole and in order.
func TestTLSListenerLargeResponses(t *testing.T) {
	data := make([]byte, 3<<20)
	rng := mrand.New(mrand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	f := writeTestFile(t, data)
	regions := map[int32]FileRegion{
		0: {File: f, Pos: 1, Len: 3<<19 + 7},
		1: {File: f, Pos: 100_003, Len: batchSize + 1},
		2: {File: f, Pos: 5, Len: 10},
	}
	h := newTestHandler()
	h.regions = regions
	addr := startTLSServer(t, h, &tls.Config{Certificates: []tls.Certificate{selfSignedCert(t)}})
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	c := &rawClient{t: t, conn: conn, br: bufio.NewReader(conn), f: kmsg.NewRequestFormatter()}
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	topic := kmsg.NewFetchRequestTopic()
	topic.Topic = "t"
	for p := range int32(3) {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition = p
		topic.Partitions = append(topic.Partitions, fp)
	}
	req.Topics = append(req.Topics, topic)
	var corrs []int32
	for range 4 {
		corrs = append(corrs, c.send(req))
	}
	for _, corr := range corrs {
		resp := c.read(req, corr).(*kmsg.FetchResponse)
		for _, p := range resp.Topics[0].Partitions {
			r := regions[p.Partition]
			if !bytes.Equal(p.RecordBatches, data[r.Pos:r.Pos+r.Len]) {
				t.Fatalf("response %d, partition %d: %d bytes differ from the region's %d", corr, p.Partition, len(p.RecordBatches), r.Len)
			}
		}
	}
}

// startTLSServer serves h on a NewTLSListener of 127.0.0.1 and returns its
// address.
func startTLSServer(t testing.TB, h Handler, cfg *tls.Config) string {
	srv, err := NewServer(Config{Handler: h, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(NewTLSListener(l, cfg)) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return l.Addr().String()
}

// selfSignedCert makes a throwaway certificate for 127.0.0.1.
func selfSignedCert(t testing.TB) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "strata-wire-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
