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

// selfSignedCert makes a throwaway certificate for 127.0.0.1.
func selfSignedCert(t *testing.T) tls.Certificate {
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
