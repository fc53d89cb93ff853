package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkRestart measures what a broker's restart costs with many
// partitions: 10,000 (RESTART_BENCH_PARTITIONS) in topics of 100, of which
// the first topic's 100 hold data, the rest none. It reports, for a clean
// restart (SIGTERM), a restart after SIGKILL with nothing unflushed, and a
// restart after SIGKILL with data written since the last flush: the time
// from exec until a Metadata request names every topic, the resident set
// size then, and the warnings logged. It also reports how long CreateTopics
// takes for 1,000 partitions, and the open files per partition.
//
// It runs the binary built by TestMain, or RESTART_BENCH_BIN (to measure a
// baseline built from another checkout side by side):
//
//	go test ./e2e -run '^$' -bench BenchmarkRestart -benchtime 1x
//	RESTART_BENCH_BIN=/tmp/base/strata go test ./e2e -run '^$' -bench BenchmarkRestart -benchtime 1x
func BenchmarkRestart(b *testing.B) {
	bin := binary
	if env := os.Getenv("RESTART_BENCH_BIN"); env != "" {
		bin = env
	}
	partitions := 10000
	if env := os.Getenv("RESTART_BENCH_PARTITIONS"); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n < 100 || n%100 != 0 {
			b.Fatalf("RESTART_BENCH_PARTITIONS=%q: want a multiple of 100", env)
		}
		partitions = n
	}
	// The broker inherits the open-file limit: raise the soft one to the
	// hard one (Go does so for this process, not for its children).
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		b.Logf("RLIMIT_NOFILE %d (hard %d)", lim.Cur, lim.Max)
	}
	for range b.N {
		runRestartBench(b, bin, partitions)
	}
}

func runRestartBench(b *testing.B, bin string, partitions int) {
	dir, err := os.MkdirTemp("", "strata-restart-bench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := &benchProcess{b: b, bin: bin, addr: "127.0.0.1:" + freePort(b), dir: dir}
	defer p.kill()
	p.start(0)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(100000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(300_000)

	topics := partitions / 100
	var names []string
	var createTimes []time.Duration
	for t := range topics {
		names = append(names, fmt.Sprintf("t%04d", t))
	}
	// CreateTopics of 1,000 partitions at a time: ten topics a request.
	for i := 0; i < len(names); i += 10 {
		batch := names[i:min(i+10, len(names))]
		start := time.Now()
		resps, err := adm.CreateTopics(ctx, 100, 1, nil, batch...)
		if err != nil {
			b.Fatal(err)
		}
		if err := resps.Error(); err != nil {
			b.Fatal(err)
		}
		if len(batch) == 10 {
			createTimes = append(createTimes, time.Since(start))
		}
	}
	slices.Sort(createTimes)
	if len(createTimes) > 0 {
		b.ReportMetric(createTimes[len(createTimes)/2].Seconds(), "create-1000-partitions-s")
	}

	// 200 KiB in each of the first topic's partitions: index entries, but
	// one segment.
	produce := func() {
		value := bytes.Repeat([]byte("x"), 1000)
		for range 200 {
			for part := range int32(100) {
				cl.Produce(ctx, &kgo.Record{Topic: names[0], Partition: part, Value: value}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
				})
			}
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	produce()
	cl.Close()

	report := func(label string, r restartResult) {
		b.ReportMetric(r.ready.Seconds(), label+"-s")
		b.ReportMetric(float64(r.rssKB)/1024, label+"-rss-MB")
		b.ReportMetric(float64(r.warnings), label+"-warnings")
		b.Logf("%s: ready in %v, RSS %d MB (peak %d MB; anonymous %d MB, files %d MB), %d open files, %d warnings%s", label, r.ready.Round(time.Millisecond),
			r.rssKB/1024, r.peakKB/1024, r.anonKB/1024, r.fileKB/1024, r.openFiles, r.warnings, r.firstWarning)
	}
	stopStart := time.Now()
	p.stop()
	b.ReportMetric(time.Since(stopStart).Seconds(), "clean-shutdown-s")
	clean := p.start(topics)
	report("clean-restart", clean)
	b.ReportMetric(float64(clean.openFiles)/float64(partitions), "open-files/partition")

	// Nothing was written since the clean start: every log is flushed.
	p.kill()
	report("kill-flushed-restart", p.start(topics))

	// 20 MB written since the last flush.
	cl2, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(100000))
	if err != nil {
		b.Fatal(err)
	}
	cl = cl2
	produce()
	cl2.Close()
	p.kill()
	report("kill-unflushed-restart", p.start(topics))
	p.stop()
}

// benchProcess is a strata serve process started and stopped by the
// benchmark, with generous deadlines (a slow restart is what it measures).
type benchProcess struct {
	b    *testing.B
	bin  string
	addr string
	dir  string
	cmd  *exec.Cmd
	logs *syncBuffer
}

type restartResult struct {
	ready          time.Duration
	rssKB, peakKB  int64
	anonKB, fileKB int64 // of rssKB: heap and stacks; mapped files
	openFiles      int
	warnings       int
	firstWarning   string
}

// start runs the process and waits until a Metadata request names the
// given number of topics, each partition with a leader.
func (p *benchProcess) start(topics int) restartResult {
	p.b.Helper()
	p.logs = &syncBuffer{}
	p.cmd = exec.Command(p.bin, "serve", "--set", "log.dirs="+filepath.Join(p.dir, "data"),
		"--set", "listeners=PLAINTEXT://"+p.addr, "--set", "strata.admin.listener=")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		p.b.Fatal(err)
	}
	deadline := start.Add(10 * time.Minute)
	for {
		if p.ready(topics) {
			break
		}
		if time.Now().After(deadline) || p.exited() {
			p.b.Fatalf("strata did not answer Metadata on %s:\n%s", p.addr, tail(p.logs.String(), 4000))
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := restartResult{ready: time.Since(start)}
	r.rssKB, r.peakKB = procStatusKB(p.cmd.Process.Pid, "VmRSS"), procStatusKB(p.cmd.Process.Pid, "VmHWM")
	r.anonKB, r.fileKB = procStatusKB(p.cmd.Process.Pid, "RssAnon"), procStatusKB(p.cmd.Process.Pid, "RssFile")
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid)); err == nil {
		r.openFiles = len(fds)
	}
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") {
			if r.warnings == 0 {
				r.firstWarning = "; first: " + tail(line, 300)
			}
			r.warnings++
		}
	}
	return r
}

// ready reports whether a Metadata request answers (within a second),
// naming the topics, each partition with a leader.
func (p *benchProcess) ready(topics int) bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.addr), kgo.RetryTimeout(time.Second), kgo.RequestRetries(0),
		kgo.DialTimeout(time.Second))
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).Metadata(ctx)
	if err != nil || len(md.Topics) < topics {
		return false
	}
	for _, t := range md.Topics {
		if t.Err != nil {
			return false
		}
		for _, part := range t.Partitions {
			if part.Leader < 0 || part.Err != nil {
				return false
			}
		}
	}
	return true
}

func (p *benchProcess) exited() bool {
	return p.cmd.ProcessState != nil || syscall.Kill(p.cmd.Process.Pid, 0) != nil
}

func (p *benchProcess) kill() {
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
}

func (p *benchProcess) stop() {
	p.b.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.b.Fatalf("strata exited with %v after SIGTERM:\n%s", err, tail(p.logs.String(), 4000))
		}
	case <-time.After(10 * time.Minute):
		p.b.Fatalf("strata did not stop within 10 minutes of SIGTERM")
	}
}

// procStatusKB reads a "Vm...: N kB" line of /proc/pid/status.
func procStatusKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
