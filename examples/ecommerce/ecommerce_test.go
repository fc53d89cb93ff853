package ecommerce_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// The programs under test, built once per test binary.
var programs = []string{"orders", "payment", "inventory", "notification", "fulfillment"}

// buildPrograms compiles the programs into dir. They are separate processes,
// so they are built without -race even under go test -race: the race
// detector would only slow them down and it watches the test process anyway.
func buildPrograms(t *testing.T, dir string) {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/...")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built %d programs in %v", len(programs), time.Since(start).Round(time.Millisecond))
}

// process is one running program; its stderr is appended to logPath across
// restarts.
type process struct {
	t       *testing.T
	name    string
	path    string
	args    []string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error // valid once exited is closed
}

// startProcess runs bin/program, named name in dir/name.log.
func startProcess(t *testing.T, bin, dir, program, name string, args ...string) *process {
	p := &process{t: t, name: name, path: filepath.Join(bin, program), args: args, logPath: filepath.Join(dir, name+".log")}
	p.start()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.logs())
		}
	})
	return p
}

func (p *process) start() {
	p.t.Helper()
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer logFile.Close() // the child has its own copy
	p.cmd = exec.Command(p.path, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		p.err = cmd.Wait()
		close(exited)
	}(p.cmd, p.exited)
}

func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *process) kill() {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// wait waits for the process to exit by itself and expects success.
func (p *process) wait(timeout time.Duration) {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %v:\n%s", p.name, timeout, p.logs())
	}
	if p.err != nil {
		p.t.Fatalf("%s: %v:\n%s", p.name, p.err, p.logs())
	}
}

// stop sends SIGTERM and expects a clean exit.
func (p *process) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(20 * time.Second)
}

func (p *process) logs() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// readOrders reads an output file: one line per order, the order id first.
// It returns how many lines each order id has.
func readOrders(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if id, _, _ := strings.Cut(sc.Text(), " "); id != "" {
			seen[id]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return seen
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// postOrder places an order over HTTP, retrying until the server listens.
func postOrder(t *testing.T, addr, customer string) string {
	t.Helper()
	body := `{"customer":"` + customer + `","items":[{"sku":"BOOK-1","quantity":2,"price_cents":1299}]}`
	var resp *http.Response
	poll.UntilStatus(t, 20*time.Second, "POST /orders to answer", func() (bool, string) {
		var err error
		resp, err = http.Post("http://"+addr+"/orders", "application/json", strings.NewReader(body))
		return err == nil, fmt.Sprint(err)
	})
	defer resp.Body.Close()
	var created struct {
		OrderID string `json:"order_id"`
		Status  string `json:"status"`
		Total   int64  `json:"total_cents"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /orders: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil {
		t.Fatal(err)
	}
	if created.OrderID == "" || created.Status != "PENDING" || created.Total != 2598 {
		t.Fatalf("POST /orders answered %+v", created)
	}
	return created.OrderID
}

// TestCheckoutSurvivesNotificationCrash runs the five programs against a real
// node, places orders over HTTP and from the generator, SIGKILLs the
// notification service while orders keep arriving, restarts it, and checks
// that every service acted on every order exactly once.
func TestCheckoutSurvivesNotificationCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five programs")
	}
	const (
		generated  = 400
		rate       = "100" // orders a second: the stream lasts about four seconds
		httpOrders = 3
	)
	node, err := strata.Start(strata.Options{Dir: t.TempDir(), Settings: map[string]string{"group.initial.rebalance.delay.ms": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })

	bin, dir := t.TempDir(), t.TempDir()
	buildPrograms(t, bin)
	out := func(name string) string { return filepath.Join(dir, name+".txt") }
	common := func(name string) []string {
		return []string{"--brokers", node.Addr(), "--out", out(name)}
	}
	consumer := func(name string) []string {
		// The shortest session timeout the broker allows: the group
		// notices the killed member six seconds after the kill.
		return append(common(name), "--session-timeout", "6s", "--commit-interval", "500ms")
	}
	started := time.Now()
	payment := startProcess(t, bin, dir, "payment", "payment", consumer("payment")...)
	inventory := startProcess(t, bin, dir, "inventory", "inventory", consumer("inventory")...)
	notification := startProcess(t, bin, dir, "notification", "notification", consumer("notification")...)
	fulfillment := startProcess(t, bin, dir, "fulfillment", "fulfillment", consumer("fulfillment")...)

	httpAddr := freeAddr(t)
	shop := startProcess(t, bin, dir, "orders", "orders-http", append(common("orders-http"), "--listen", httpAddr)...)
	var httpIDs []string
	for i := range httpOrders {
		httpIDs = append(httpIDs, postOrder(t, httpAddr, fmt.Sprintf("user%d@example.com", i)))
	}
	resp, err := http.Get("http://" + httpAddr + "/orders/" + httpIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"PENDING"`)) {
		t.Fatalf("GET /orders/%s: %s %s", httpIDs[0], resp.Status, b)
	}
	resp.Body.Close()

	generator := startProcess(t, bin, dir, "orders", "orders", append(common("orders"), "--generate", strconv.Itoa(generated), "--rate", rate)...)

	// Kill the notification service once it is well into the stream and
	// has committed, so the restart has an offset to resume from.
	admin := adminClient(t, node.Addr())
	poll.UntilStatus(t, 30*time.Second, "the notification service to e-mail 100 orders and commit", func() (bool, string) {
		n := len(readOrders(t, out("notification")))
		committed := committedRecords(t, admin, "notification")
		return n >= 100 && committed > 0, fmt.Sprintf("%d e-mails, %d records committed", n, committed)
	})
	notification.kill()
	placedAtKill := len(readOrders(t, out("orders")))
	emailedAtKill := len(readOrders(t, out("notification")))
	if placedAtKill >= generated {
		t.Fatalf("the generator finished (%d orders) before the kill: not mid-stream", placedAtKill)
	}
	t.Logf("SIGKILL notification after %d e-mails, %d of %d generated orders placed", emailedAtKill, placedAtKill, generated)

	// Checkout does not notice: orders keep being accepted.
	poll.UntilStatus(t, 30*time.Second, "orders to keep arriving with notification down", func() (bool, string) {
		n := len(readOrders(t, out("orders")))
		return n >= placedAtKill+100 || n == generated, fmt.Sprintf("%d orders", n)
	})
	notification.start()
	generator.wait(60 * time.Second)

	want := map[string]bool{}
	for id := range readOrders(t, out("orders")) {
		want[id] = true
	}
	for _, id := range httpIDs {
		want[id] = true
	}
	if len(want) != generated+httpOrders {
		t.Fatalf("%d orders placed, want %d", len(want), generated+httpOrders)
	}
	for _, name := range []string{"payment", "inventory", "notification", "fulfillment"} {
		poll.UntilStatus(t, 45*time.Second, name+" to handle every order", func() (bool, string) {
			n := len(readOrders(t, out(name)))
			return n >= len(want), fmt.Sprintf("%d of %d orders", n, len(want))
		})
	}
	caughtUp := time.Since(started)

	for _, name := range []string{"payment", "inventory", "notification", "fulfillment"} {
		got := readOrders(t, out(name))
		for id := range want {
			if got[id] != 1 {
				t.Errorf("%s: order %s handled %d times, want once", name, id, got[id])
			}
		}
		for id := range got {
			if !want[id] {
				t.Errorf("%s: handled %s, an order nobody placed", name, id)
			}
		}
	}
	// Every order e-mailed before the kill but not committed is delivered
	// again; had the restart not resumed from the committed offset, all
	// of them would be.
	redelivered := strings.Count(notification.logs(), "skipping redelivered event")
	if redelivered >= emailedAtKill {
		t.Errorf("%d orders redelivered to notification after it was killed having e-mailed %d: it did not resume from its committed offset", redelivered, emailedAtKill)
	}
	t.Logf("every service handled all %d orders once, %v after start; %d orders were redelivered to notification after its SIGKILL and skipped by order id",
		len(want), caughtUp.Round(time.Millisecond), redelivered)

	// A clean stop commits what was processed and leaves the group.
	for _, p := range []*process{shop, payment, inventory, notification, fulfillment} {
		p.stop()
	}
	checkGroupsCommittedAndLeft(t, admin, "payment", "inventory", "notification", "fulfillment")
}

func adminClient(t *testing.T, addr string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// committedRecords is the sum of group's committed offsets.
func committedRecords(t *testing.T, admin *kadm.Client, group string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offsets, err := admin.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetching %s's offsets: %v", group, err)
	}
	var sum int64
	offsets.Each(func(o kadm.OffsetResponse) { sum += max(o.At, 0) })
	return sum
}

// checkGroupsCommittedAndLeft checks that each group has no members and no
// lag: everything was committed on the way out.
func checkGroupsCommittedAndLeft(t *testing.T, admin *kadm.Client, groups ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lags, err := admin.Lag(ctx, groups...)
	if err != nil {
		t.Fatal(err)
	}
	for _, group := range groups {
		l, ok := lags[group]
		switch {
		case !ok:
			t.Errorf("group %s: not described", group)
		case l.Error() != nil:
			t.Errorf("group %s: %v", group, l.Error())
		case len(l.Members) != 0:
			t.Errorf("group %s still has %d members after SIGTERM", group, len(l.Members))
		case l.Lag.Total() != 0:
			t.Errorf("group %s: lag %d after SIGTERM, want 0 (all processed offsets committed)", group, l.Lag.Total())
		}
	}
}
