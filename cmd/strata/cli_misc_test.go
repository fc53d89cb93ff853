package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func itoa(i int32) string { return strconv.Itoa(int(i)) }

// TestBrokerDown: every client command fails fast, in one line naming the
// address, with a non-zero exit.
func TestBrokerDown(t *testing.T) {
	addr := deadAddr(t)
	for _, args := range [][]string{
		{"topic", "list"},
		{"topic", "create", "x"},
		{"topic", "describe", "x"},
		{"topic", "delete", "x"},
		{"topic", "alter-config", "x", "--set", "a=b"},
		{"topic", "add-partitions", "x", "-n", "1"},
		{"topic", "produce", "x"},
		{"topic", "consume", "x"},
		{"group", "list"},
		{"group", "describe", "g"},
		{"group", "seek", "g", "--to", "start"},
		{"group", "delete", "g"},
		{"cluster", "info"},
		{"bench", "produce", "--records", "10"},
		{"verify", "--records", "10"},
	} {
		start := time.Now()
		r := cli(t, "a\n", append(args, "--brokers", addr)...)
		checkOneLineError(t, r, "cannot reach broker at "+addr+": connection refused", args)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v took %v to fail", args, d)
		}
	}
}

// TestRequestTimeout: a broker that accepts connections but never answers
// is reported after --timeout, not after franz-go's retries.
func TestRequestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	r := execute(ctx, "", "topic", "list", "--brokers", ln.Addr().String(), "--timeout", "300ms")
	checkOneLineError(t, r, "listing topics: no answer from "+ln.Addr().String()+" within 300ms", nil)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestBrokersFromEnvironment(t *testing.T) {
	t.Setenv(envBrokers, brokerAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if r := execute(ctx, "", "cluster", "info", "--format", "json"); r.code != 0 || !strings.Contains(r.stdout, clusterID) {
		t.Fatalf("with $%s: %+v", envBrokers, r)
	}
	// The flag wins over the environment.
	addr := deadAddr(t)
	r := execute(ctx, "", "cluster", "info", "--brokers", addr)
	checkOneLineError(t, r, addr, nil)
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out := ok(t, "", "completion", shell)
		if !strings.Contains(out, "strata") || len(out) < 500 {
			t.Fatalf("completion %s: %q", shell, out)
		}
	}
	// Topic names complete from the cluster.
	topic := newTopic(t, 1)
	// (cobra's __complete reports its directive on stderr.)
	out := cli(t, "", "__complete", "topic", "describe", "--brokers", brokerAddr, "").stdout
	if !strings.Contains(out, topic) {
		t.Fatalf("completing topic describe: %q lacks %s", out, topic)
	}
	out = cli(t, "", "__complete", "topic", "produce", topic, "--acks", "").stdout
	if !strings.Contains(out, "all") {
		t.Fatalf("completing --acks: %q", out)
	}
}

func TestUnknownCommandsAndArgs(t *testing.T) {
	fails(t, "accepts 1 arg(s), received 0", "topic", "consume")
	fails(t, "unknown flag: --nope", "topic", "list", "--nope")
	fails(t, "unknown shorthand flag", "cluster", "info", "-z")
}
