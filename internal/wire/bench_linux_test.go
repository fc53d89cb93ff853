//go:build linux

package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"
)

// The write-path benchmark runs its client in a child process (this test
// binary, re-executed), so that the benchmark process's CPU time, read with
// getrusage(2), is the server's alone.
const benchClientEnv = "STRATA_WIRE_BENCH_CLIENT"

func TestMain(m *testing.M) {
	if addr := os.Getenv(benchClientEnv); addr != "" {
		n, _ := strconv.Atoi(os.Getenv(benchClientEnv + "_N"))
		if err := benchClient(addr, n, os.Getenv(benchClientEnv+"_TLS") != ""); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	benchRegion = 1 << 20
	benchFile   = 64 << 20
	benchWindow = 8 // fetches in flight
)

// benchClient sends n fetch requests, keeping benchWindow in flight, and
// discards the responses (decrypted, with useTLS).
func benchClient(addr string, n int, useTLS bool) error {
	var conn net.Conn
	var err error
	if useTLS {
		conn, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	req := kmsg.NewPtrFetchRequest()
	req.Version = 11
	topic := kmsg.NewFetchRequestTopic()
	topic.Topic = "bench"
	topic.Partitions = append(topic.Partitions, kmsg.NewFetchRequestTopicPartition())
	req.Topics = append(req.Topics, topic)
	formatter := kmsg.NewRequestFormatter()
	writeErr := make(chan error, 1)
	credits := make(chan struct{}, benchWindow)
	for range benchWindow {
		credits <- struct{}{}
	}
	go func() {
		var buf []byte
		for i := range n {
			<-credits
			buf = formatter.AppendRequest(buf[:0], req, int32(i))
			if _, err := conn.Write(buf); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	}()
	br := bufio.NewReaderSize(conn, 256<<10)
	var size [4]byte
	for range n {
		if _, err := io.ReadFull(br, size[:]); err != nil {
			return err
		}
		if _, err := br.Discard(int(binary.BigEndian.Uint32(size[:]))); err != nil {
			return err
		}
		credits <- struct{}{}
	}
	return <-writeErr
}

// BenchmarkFetchWrite measures the server's CPU per GB of fetch responses
// made of 1 MiB spliced regions of a page-cached file, over loopback, by
// sendfile(2), by copying, and over TLS (NewTLSListener: copied and
// encrypted; the client decrypts in its own process). See BENCHMARKS.md.
//
//	go test ./internal/wire -run XXX -bench FetchWrite -benchtime 2000x
func BenchmarkFetchWrite(b *testing.B) {
	data := make([]byte, benchFile)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	f := writeTestFile(b, data) // written, so in the page cache
	cert := selfSignedCert(b)
	for _, mode := range []struct {
		name      string
		copy, tls bool
	}{{"sendfile", false, false}, {"copy", true, false}, {"tls", false, true}} {
		b.Run(mode.name, func(b *testing.B) {
			h := newTestHandler()
			var next int64
			h.intercept = func(_ context.Context, _ *Conn, req *Request) (Response, bool) {
				fetch, ok := req.Body.(*kmsg.FetchRequest)
				if !ok {
					return Response{}, false
				}
				h.regions = map[int32]FileRegion{0: {File: f, Pos: next, Len: benchRegion}}
				next = (next + benchRegion) % benchFile
				resp, splices := h.fetch(fetch)
				return Response{Body: resp, Splices: splices}, true
			}
			var addr string
			if mode.tls {
				addr = startTLSServer(b, h, &tls.Config{Certificates: []tls.Certificate{cert}})
			} else {
				addr = startServer(b, h, func(c *Config) { c.CopySplices = mode.copy }).addr
			}
			client := exec.Command(os.Args[0], "-test.run=^$")
			client.Env = append(os.Environ(), benchClientEnv+"="+addr, fmt.Sprintf("%s_N=%d", benchClientEnv, b.N))
			if mode.tls {
				client.Env = append(client.Env, benchClientEnv+"_TLS=1")
			}
			client.Stderr = os.Stderr

			var before, after unix.Rusage
			b.SetBytes(benchRegion)
			b.ResetTimer()
			unix.Getrusage(unix.RUSAGE_SELF, &before)
			start := time.Now()
			if err := client.Run(); err != nil {
				b.Fatalf("client: %v", err)
			}
			elapsed := time.Since(start)
			unix.Getrusage(unix.RUSAGE_SELF, &after)
			b.StopTimer()

			user := time.Duration(after.Utime.Nano() - before.Utime.Nano())
			sys := time.Duration(after.Stime.Nano() - before.Stime.Nano())
			gb := float64(b.N) * benchRegion / 1e9
			b.ReportMetric((user+sys).Seconds()/gb, "cpu-s/GB")
			b.ReportMetric(user.Seconds()/gb, "user-s/GB")
			b.ReportMetric(sys.Seconds()/gb, "sys-s/GB")
			b.ReportMetric(gb/elapsed.Seconds(), "GB/s")
		})
	}
}
