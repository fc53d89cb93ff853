package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/strata-io/strata"
	"github.com/strata-io/strata/internal/testutil/faultproxy"
	"github.com/strata-io/strata/internal/verify"
)

// TestVerify runs strata verify against the test node: a valid run, in
// text and JSON, whose history can be checked again from its file.
func TestVerify(t *testing.T) {
	hist := filepath.Join(t.TempDir(), "run.json")
	text := ok(t, "", "verify", "--records", "600", "--rate", "0", "--partitions", "3", "--quiet", "--history", hist)
	for _, want := range []string{"sent 600: 600 acknowledged, 0 failed, 0 unanswered", "ANOMALY", "lost-write", "poll-skip", "VALID: no anomalies"} {
		if !strings.Contains(text, want) {
			t.Fatalf("verify output does not say %q:\n%s", want, text)
		}
	}
	if again := ok(t, "", "verify", "--check", hist); !strings.Contains(again, "VALID: no anomalies") || !strings.Contains(again, "sent 600") {
		t.Fatalf("verify --check of the history:\n%s", again)
	}
	f, err := os.Open(hist)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := verify.ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Sends) != 600 || h.Partitions != 3 || len(h.Consumers) != 5 {
		t.Fatalf("history: %d sends, %d partitions, %d consumers; want 600, 3 and 2+2+final", len(h.Sends), h.Partitions, len(h.Consumers))
	}
	// A valid run deletes its topic.
	if topics := ok(t, "", "topic", "list"); strings.Contains(topics, h.Topic) {
		t.Fatalf("topic %s kept after a valid run:\n%s", h.Topic, topics)
	}

	topic := fmt.Sprintf("verify-json-%d", topicSeq.Add(1))
	res := okJSON[verify.Result](t, "", "verify", "--records", "300", "--rate", "0", "--quiet", "--topic", topic, "--keep-topic")
	if !res.Valid || res.Stats.Acknowledged != 300 || res.Topic != topic || len(res.Anomalies) != len(verify.Kinds) {
		t.Fatalf("verify JSON: %+v", res)
	}
	if topics := ok(t, "", "topic", "list"); !strings.Contains(topics, topic) {
		t.Fatalf("--keep-topic: topic gone:\n%s", topics)
	}
	// The topic must be the run's own.
	r := cli(t, "", "verify", "--records", "10", "--quiet", "--topic", topic)
	checkOneLineError(t, r, "topic "+topic+" exists", []string{"verify"})
	if r.code != exitNoRun {
		t.Fatalf("exit %d for a run that could not be made, want %d", r.code, exitNoRun)
	}
}

// TestVerifyTransactional runs strata verify --transactional against the
// test node: a valid run, with transactions committed and aborted and the
// copy stage's copies, and no topic left behind.
func TestVerifyTransactional(t *testing.T) {
	res := okJSON[verify.Result](t, "", "verify", "--transactional", "--records", "400", "--rate", "0", "--partitions", "3",
		"--abort-rate", "0.5", "--txn-records", "5", "--quiet")
	st := res.Stats
	if !res.Valid || st.Acknowledged != 400 || st.Txns.Committed == 0 || st.Txns.Aborted == 0 || st.Copies.Committed == 0 || st.Copied == 0 {
		t.Fatalf("verify --transactional: %+v", res)
	}
	if topics := ok(t, "", "topic", "list"); strings.Contains(topics, res.Topic) {
		t.Fatalf("topics of a valid run kept:\n%s", topics)
	}
}

// TestVerifyProgress: without --quiet, the phases (and, in a run over a
// second, a line a second) go to stderr, the report to stdout.
func TestVerifyProgress(t *testing.T) {
	r := cli(t, "", "verify", "--duration", "1500ms", "--rate", "200", "--partitions", "2")
	if r.code != 0 || !strings.Contains(r.stdout, "VALID") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	perSecond := regexp.MustCompile(`(?m)^verify +1s: sent \d+/s, acked \d+/s, read \d+/s, errors 0/s \(total: sent \d+`)
	for _, want := range []string{"verify: topic ", "verify: producing stopped after", "verify: reading every partition"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("stderr does not say %q:\n%s", want, r.stderr)
		}
	}
	if !perSecond.MatchString(r.stderr) {
		t.Fatalf("no progress line for the first second:\n%s", r.stderr)
	}
	if strings.Contains(r.stdout, "verify:") {
		t.Fatalf("progress on stdout:\n%s", r.stdout)
	}
}

func TestVerifyBadInput(t *testing.T) {
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"give --records or --duration, not both", []string{"--records", "5", "--duration", "1s"}},
		{"--records must be at least 1", []string{"--records", "0"}},
		{"--partitions must be at least 1", []string{"--partitions", "0"}},
		{"--producers must be at least 1", []string{"--producers", "0"}},
		{"--acks 0 gets no acknowledgements", []string{"--acks", "0", "--idempotent=false"}},
		{"the idempotent producer needs --acks all", []string{"--acks", "1"}},
		{`--acks "x"`, []string{"--acks", "x"}},
		{"--rate must not be negative", []string{"--rate", "-1"}},
		{"--abort-rate must be within 0 and 1", []string{"--transactional", "--abort-rate", "1.5"}},
		{"--txn-records must be at least 1", []string{"--transactional", "--txn-records", "0"}},
		{"--abort-rate and --txn-records need --transactional", []string{"--abort-rate", "0.5"}},
		{"the transactional producer needs --acks all", []string{"--transactional", "--acks", "1", "--idempotent=false"}},
		{"unknown --format", []string{"--format", "yaml"}},
		{"invalid argument", []string{"--records", "many"}},
		{"no such file", []string{"--check", filepath.Join(t.TempDir(), "missing.json")}},
	} {
		r := fails(t, tc.want, append([]string{"verify"}, tc.args...)...)
		if r.code != exitNoRun && tc.want != "unknown --format" {
			t.Errorf("verify %v: exit %d, want %d", tc.args, r.code, exitNoRun)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"sends": [`), 0o644)
	fails(t, "reading a history", "verify", "--check", bad)
}

// TestVerifyReportsAnomalies is the acceptance line "strata verify finds
// real anomalies", run as a user would: a node behind a proxy that loses
// produce responses, and producers with --idempotent=false, whose retries
// append batches twice. verify must say so, keep the topic, and exit 1.
func TestVerifyReportsAnomalies(t *testing.T) {
	proxy, err := faultproxy.Listen(faultproxy.Options{Seed: 5, DropRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	node, err := strata.Start(strata.Options{Dir: t.TempDir(), Listen: listen, Settings: map[string]string{
		"group.initial.rebalance.delay.ms": "0",
		"advertised.listeners":             "PLAINTEXT://" + proxy.Addr(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	proxy.SetTarget(listen)

	hist := filepath.Join(t.TempDir(), "broken.json")
	r := cli(t, "", "verify", "--brokers", proxy.Addr(), "--records", "1500", "--rate", "2000", "--partitions", "3",
		"--idempotent=false", "--quiet", "--history", hist)
	if proxy.Dropped() == 0 {
		t.Fatalf("the proxy dropped no response: the fault did not happen")
	}
	checkOneLineError(t, r, "verify found", []string{"verify"})
	if r.code != exitAnomalies {
		t.Fatalf("exit %d, want %d for anomalies", r.code, exitAnomalies)
	}
	m := regexp.MustCompile(`verify found (\d+) anomalies \((\d+) duplicate\); topic (\S+) kept`).FindStringSubmatch(r.stderr)
	if m == nil || m[1] != m[2] || m[1] == "0" {
		t.Fatalf("stderr %q: want duplicates and nothing else", r.stderr)
	}
	for _, want := range []string{fmt.Sprintf("duplicate            %s", m[2]), `" at offsets `, "INVALID: " + m[2] + " duplicate"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("report does not say %q:\n%s", want, r.stdout)
		}
	}
	proxy.SetDropRate(0)
	if topics := ok(t, "", "topic", "list", "--brokers", proxy.Addr()); !strings.Contains(topics, m[3]) {
		t.Fatalf("topic %s not kept after an invalid run:\n%s", m[3], topics)
	}
	again := cli(t, "", "verify", "--check", hist, "--format", "json")
	var res verify.Result
	if err := json.Unmarshal([]byte(again.stdout), &res); err != nil || again.code != exitAnomalies {
		t.Fatalf("verify --check: exit %d, %v\n%s", again.code, err, again.stdout)
	}
	if res.Valid || fmt.Sprint(res.Count(verify.Duplicate)) != m[2] {
		t.Fatalf("verify --check found %s, the run %s duplicates", res.Summary(), m[2])
	}
}
