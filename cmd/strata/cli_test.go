package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The CLI tests run commands in-process (rootCommand with captured
// stdout and stderr, as main would) against one real Strata node started
// by TestMain from the strata package, on a fresh data directory.

// childEnv marks a process started by a test (bench --kfake starts
// `strata bench kfake-server` from os.Executable, which is the test
// binary): it runs the CLI instead of the tests.
const childEnv = "STRATA_CLI_TEST_CHILD"

var (
	brokerAddr string
	clusterID  string
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		root := rootCommand()
		root.SetArgs(os.Args[1:])
		if err := root.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "strata:", err)
			os.Exit(exitCode(err))
		}
		os.Exit(0)
	}
	os.Setenv(childEnv, "1") // for the children only; checked above
	dir, err := os.MkdirTemp("", "strata-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	addr, id, stop, err := startNode(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting a node:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	brokerAddr, clusterID = addr, id
	code := m.Run()
	stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one command's outcome, as a user would see it.
type result struct {
	stdout, stderr string
	code           int
}

// execute runs the CLI with args and stdin exactly as main does: an error
// becomes "strata: ..." on stderr and an exit code.
func execute(ctx context.Context, stdin string, args ...string) result {
	root := rootCommand()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	err := root.ExecuteContext(ctx)
	r := result{}
	if err != nil {
		fmt.Fprintln(&errOut, "strata:", err)
		r.code = exitCode(err)
	}
	r.stdout, r.stderr = out.String(), errOut.String()
	return r
}

// cli runs a command against the test node, unless args name other
// brokers.
func cli(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !slices.Contains(args, "--brokers") && slices.Contains([]string{"topic", "group", "txn", "feature", "cluster", "bench", "verify"}, args[0]) {
		args = append(args, "--brokers", brokerAddr)
	}
	return execute(ctx, stdin, args...)
}

// ok runs a command that must succeed and returns its stdout.
func ok(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	r := cli(t, stdin, args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("strata %s: exit %d, stderr %q, stdout %q", strings.Join(args, " "), r.code, r.stderr, r.stdout)
	}
	return r.stdout
}

// okJSON runs a command with --format json and decodes its output.
func okJSON[T any](t *testing.T, stdin string, args ...string) T {
	t.Helper()
	out := ok(t, stdin, append(args, "--format", "json")...)
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("strata %s: output is not the JSON expected: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

// fails runs a command that must fail with one line on stderr that
// contains want, and no stack trace.
func fails(t *testing.T, want string, args ...string) result {
	t.Helper()
	return failsWith(t, "", want, args...)
}

func failsWith(t *testing.T, stdin, want string, args ...string) result {
	t.Helper()
	r := cli(t, stdin, args...)
	checkOneLineError(t, r, want, args)
	return r
}

func checkOneLineError(t *testing.T, r result, want string, args []string) {
	t.Helper()
	if r.code == 0 {
		t.Fatalf("strata %s: exit 0, want failure %q; stdout %q", strings.Join(args, " "), want, r.stdout)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "strata: ") {
		t.Fatalf("strata %s: stderr is not one 'strata: ' line: %q", strings.Join(args, " "), r.stderr)
	}
	if !strings.Contains(lines[0], want) {
		t.Fatalf("strata %s: error %q does not contain %q", strings.Join(args, " "), lines[0], want)
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
		t.Fatalf("stack trace on stderr: %s", r.stderr)
	}
}

var topicSeq atomic.Int64

// newTopic creates a topic with a name unique to the test.
func newTopic(t *testing.T, partitions int, extra ...string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-"), topicSeq.Add(1))
	ok(t, "", append([]string{"topic", "create", name, "-p", fmt.Sprint(partitions)}, extra...)...)
	return name
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// consumed decodes consume's JSON lines.
func consumed(t *testing.T, out string) []consumedRecord {
	t.Helper()
	var recs []consumedRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r consumedRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("consume output line %q is not JSON: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func values(recs []consumedRecord) []string {
	var vs []string
	for _, r := range recs {
		vs = append(vs, r.Value)
	}
	return vs
}
