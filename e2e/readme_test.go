package e2e

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// tourBlocks returns the shell blocks of the README's five-minute tour.
func tourBlocks(t *testing.T) [][]string { return readmeBlocks(t, "## A five-minute tour") }

// readmeBlocks returns the shell blocks of the README section under
// heading, each as its lines without blanks and comments.
func readmeBlocks(t *testing.T, heading string) [][]string {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	start := strings.Index(readme, heading+"\n")
	if start < 0 {
		t.Fatalf("README.md has no %q", heading)
	}
	section := readme[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var blocks [][]string
	var cur []string
	in := false
	sc := bufio.NewScanner(strings.NewReader(section))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```sh"):
			in, cur = true, nil
		case strings.HasPrefix(line, "```") && in:
			in = false
			blocks = append(blocks, cur)
		case in:
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				cur = append(cur, l)
			}
		}
	}
	return blocks
}

// TestREADMETour does what a new user does: start `strata serve` with no
// configuration in an empty directory, then run the tour's commands, each
// of which must succeed.
func TestREADMETour(t *testing.T) {
	blocks := tourBlocks(t)
	if len(blocks) < 3 {
		t.Fatalf("the tour has %d shell blocks, want the server, the CLI and kcat", len(blocks))
	}
	// The tour's broker takes 127.0.0.1:9092. A reader who followed the
	// README has one running there already; then this broker moves to a
	// free port, set the way a user would (environment), and the tour's
	// commands are pointed at it.
	addr, env := "127.0.0.1:9092", []string(nil)
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		addr = "127.0.0.1:" + freePort(t)
		env = []string{"STRATA_LISTENERS=PLAINTEXT://" + addr, "STRATA_BROKERS=" + addr, "STRATA_STRATA_ADMIN_LISTENER=127.0.0.1:0"}
		t.Logf("127.0.0.1:9092 is taken; running the tour on %s", addr)
	} else if c, err := net.DialTimeout("tcp", "127.0.0.1:9644", 200*time.Millisecond); err == nil {
		c.Close()
		env = []string{"STRATA_STRATA_ADMIN_LISTENER=127.0.0.1:0"}
	}
	dir := t.TempDir()
	if err := os.Link(binary, filepath.Join(dir, "strata")); err != nil {
		data, err := os.ReadFile(binary)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "strata"), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The first block builds and starts the broker; the build is done.
	var serve string
	for _, l := range blocks[0] {
		if strings.Contains(l, " serve") {
			serve = l
		}
	}
	if serve != "./strata serve" {
		t.Fatalf("the tour starts the broker with %q, want ./strata serve with no configuration", serve)
	}
	p := &process{t: t, dir: dir, addr: addr, args: []string{"serve"}, env: env}
	p.startIn(dir)
	t.Cleanup(p.kill)
	// The listener accepts connections a moment before start-up ends.
	poll.Until(t, 30*time.Second, "the zero-configuration start to write ./strata-data/meta.properties", func() bool {
		_, err := os.Stat(filepath.Join(dir, "strata-data", "meta.properties"))
		return err == nil
	})

	run := func(line string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", strings.ReplaceAll(line, "127.0.0.1:9092", addr))
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s\nbroker log:\n%s", line, err, out, p.logs)
		}
		t.Logf("$ %s\n%s", line, out)
	}
	for _, line := range blocks[1] {
		run(line)
	}
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Log("kcat is not installed; skipping the tour's kcat commands (CI installs it)")
	} else {
		for _, line := range blocks[2] {
			run(line)
		}
	}
	p.stop()
}
