package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestREADMEThreeNodes does what the README's "Three nodes on one machine"
// says: the three `strata serve` lines exactly as written (in one empty
// directory, as three terminals would), then its commands; then what it
// says survives: the quorum's leader SIGKILLed, another elected, a topic
// created, the killed node's single-replica partitions offline and its
// replicated ones led elsewhere; then the node restarted with the same
// line, and everything led again.
func TestREADMEThreeNodes(t *testing.T) {
	blocks := readmeBlocks(t, "## Three nodes on one machine")
	// The fourth, the same in containers, is deploy/'s test.
	if len(blocks) != 4 || len(blocks[0]) != 3 || !strings.Contains(blocks[3][0], "docker-compose.cluster.yml") {
		t.Fatalf("the section has blocks %q; want the three serve lines, the commands, the commands after a loss, and compose", blocks)
	}
	blocks = blocks[:3]
	// The lines' addresses, taken as written unless something here
	// listens on one already (a reader's own cluster, another test):
	// then every one moves to a free port.
	addrs := regexp.MustCompile(`127\.0\.0\.1:\d+`)
	var all []string
	for _, b := range blocks {
		for _, l := range b {
			all = append(all, addrs.FindAllString(l, -1)...)
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	moved := map[string]string{}
	for _, a := range all {
		if c, err := net.DialTimeout("tcp", a, 200*time.Millisecond); err == nil {
			c.Close()
			for _, a := range all {
				moved[a] = "127.0.0.1:" + freePort(t)
			}
			t.Logf("%s is taken; the section runs on other ports: %v", a, moved)
			break
		}
	}
	rewrite := func(line string) string {
		return addrs.ReplaceAllStringFunc(line, func(a string) string {
			if m, ok := moved[a]; ok {
				return m
			}
			return a
		})
	}

	dir := t.TempDir()
	linkStrata(t, dir)
	nodes := map[int32]*process{}
	serveLine := map[int32]string{}
	t.Cleanup(func() {
		if t.Failed() {
			for id, p := range nodes {
				t.Logf("node %d's log:\n%s", id, p.logs)
			}
		}
	})
	for i, line := range blocks[0] {
		f := strings.Fields(rewrite(line))
		if len(f) < 2 || f[0] != "./strata" || f[1] != "serve" {
			t.Fatalf("serve line %d is %q", i+1, line)
		}
		addr := ""
		for _, arg := range f {
			if l, ok := strings.CutPrefix(arg, "listeners=PLAINTEXT://"); ok {
				addr, _, _ = strings.Cut(l, ",")
			}
		}
		p := &process{t: t, dir: dir, addr: addr, args: f[1:]}
		nodes[int32(i+1)], serveLine[int32(i+1)] = p, line
	}
	// The three start at once, as three terminals would; each listens
	// before it has registered.
	for _, id := range []int32{1, 2, 3} {
		nodes[id].startIn(dir)
		t.Cleanup(nodes[id].kill)
	}

	var env []string
	run := func(line string, retry bool) string {
		t.Helper()
		line = rewrite(line)
		if kv, ok := strings.CutPrefix(line, "export "); ok {
			env = append(env, kv)
			return ""
		}
		once := func() ([]byte, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", line)
			cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
			return cmd.CombinedOutput()
		}
		out, err := once()
		if err != nil && retry {
			poll.UntilStatus(t, 30*time.Second, line, func() (bool, string) {
				out, err = once()
				return err == nil, fmt.Sprintf("%v: %s", err, out)
			})
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		t.Logf("$ %s\n%s", line, out)
		return string(out)
	}
	// Read-only commands are retried while the cluster forms (a person
	// types slower than this test); the others run once.
	readOnly := func(line string) bool {
		return strings.Contains(line, " cluster ") || strings.Contains(line, " describe")
	}
	for _, line := range blocks[1] {
		run(line, readOnly(line))
	}

	type quorum struct {
		LeaderID    int32 `json:"leader_id"`
		LeaderEpoch int32 `json:"leader_epoch"`
	}
	quorumNow := func() (quorum, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "./strata", "cluster", "quorum", "--format", "json", "--timeout", "3s")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		out, err := cmd.Output()
		var q quorum
		if err == nil {
			err = json.Unmarshal(out, &q)
		}
		return q, err
	}
	before, err := quorumNow()
	if err != nil {
		t.Fatal(err)
	}
	// Lose the node LeaderId names.
	lost := before.LeaderID
	nodes[lost].cmd.Process.Signal(syscall.SIGKILL)
	nodes[lost].cmd.Wait()
	poll.UntilStatus(t, 30*time.Second, "a new quorum leader", func() (bool, string) {
		q, err := quorumNow()
		return err == nil && q.LeaderID != lost && q.LeaderEpoch > before.LeaderEpoch, fmt.Sprint(q, err)
	})
	for _, line := range blocks[2] {
		run(line, readOnly(line))
	}
	// Once the lost node is fenced, clicks' partitions on it are offline
	// and payments' are led by the others.
	describe := func(topic string) map[int32][2]int32 { // partition: leader, first replica
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "./strata", "topic", "describe", topic, "--format", "json")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		out, err := cmd.Output()
		var d []struct {
			Partitions []struct {
				Partition int32   `json:"partition"`
				Leader    int32   `json:"leader"`
				Replicas  []int32 `json:"replicas"`
			} `json:"partitions"`
		}
		if err != nil || json.Unmarshal(out, &d) != nil || len(d) != 1 {
			return nil
		}
		m := map[int32][2]int32{}
		for _, p := range d[0].Partitions {
			m[p.Partition] = [2]int32{p.Leader, p.Replicas[0]}
		}
		return m
	}
	poll.UntilStatus(t, 60*time.Second, fmt.Sprintf("node %d's partitions of clicks offline, payments led by the others", lost), func() (bool, string) {
		clicks, payments := describe("clicks"), describe("payments")
		if len(clicks) != 6 || len(payments) != 6 {
			return false, fmt.Sprint(clicks, payments)
		}
		offline := 0
		for _, p := range clicks {
			if (p[1] == lost) != (p[0] == -1) {
				return false, fmt.Sprint("clicks ", clicks)
			}
			if p[0] == -1 {
				offline++
			}
		}
		for _, p := range payments {
			if p[0] == lost || p[0] < 0 {
				return false, fmt.Sprint("payments ", payments)
			}
		}
		return offline > 0, fmt.Sprint("clicks ", clicks)
	})

	// The node returns, started by its own line.
	nodes[lost].startIn(dir)
	poll.UntilStatus(t, 60*time.Second, "clicks fully led again", func() (bool, string) {
		clicks := describe("clicks")
		for _, p := range clicks {
			if p[0] < 0 {
				return false, fmt.Sprint(clicks)
			}
		}
		return len(clicks) == 6, fmt.Sprint(clicks)
	})
	run("./strata cluster health", true)
	t.Logf("node %d restarted with: %s", lost, serveLine[lost])
	for _, id := range []int32{1, 2, 3} {
		nodes[id].stop()
	}
}

// linkStrata puts the binary at dir/strata, where the README's ./strata
// lines find it.
func linkStrata(t *testing.T, dir string) {
	t.Helper()
	if err := os.Link(binary, filepath.Join(dir, "strata")); err == nil {
		return
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "strata"), data, 0o755); err != nil {
		t.Fatal(err)
	}
}
