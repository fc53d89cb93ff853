// Package e2e runs the strata binary as a real process: started by the
// command a user types, killed with SIGKILL, restarted on the same data.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "strata")
	build := exec.Command("go", "build", "-o", binary, "../cmd/strata")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building strata:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// process is a strata serve process.
type process struct {
	t    testing.TB
	dir  string
	addr string
	args []string
	env  []string // added to the test's environment
	cmd  *exec.Cmd
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startProcess runs strata serve on a fresh port with data in dir.
func startProcess(t testing.TB, dir string, sets ...string) *process {
	t.Helper()
	p := &process{t: t, dir: dir, addr: "127.0.0.1:" + freePort(t)}
	p.args = append([]string{"serve", "--set", "log.dirs=" + dir, "--set", "listeners=PLAINTEXT://" + p.addr, "--set", "strata.admin.listener="}, flagsFor(sets)...)
	p.start()
	t.Cleanup(p.kill)
	return p
}

func flagsFor(sets []string) []string {
	var out []string
	for _, s := range sets {
		out = append(out, "--set", s)
	}
	return out
}

func (p *process) start() { p.startIn("") }

// startIn starts the process with dir as its working directory ("" for
// the test's).
func (p *process) startIn(dir string) {
	p.t.Helper()
	p.launch(dir)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("strata did not start listening on %s:\n%s", p.addr, p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// launch starts the process, with dir as its working directory, and
// returns without waiting for it to listen.
func (p *process) launch(dir string) {
	p.t.Helper()
	p.logs = &syncBuffer{}
	p.cmd = exec.Command(binary, p.args...)
	p.cmd.Dir = dir
	if p.env != nil {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
}

// kill sends SIGKILL and waits for the process to die.
func (p *process) kill() {
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.t.Fatalf("strata exited with %v after SIGTERM:\n%s", err, p.logs)
		}
	case <-time.After(20 * time.Second):
		p.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, in its log
		<-done
		p.t.Fatalf("strata did not stop within 20s of SIGTERM:\n%s", p.logs)
	}
}

// restart starts the process again on the same port and data.
func (p *process) restart() { p.start() }

func client(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTopic(t testing.TB, cl *kgo.Client, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, &v
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("creating %s: error %d", topic, code)
	}
}
