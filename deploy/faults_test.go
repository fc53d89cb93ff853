package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/verify"
)

// composeCluster is docker-compose.cluster.yml's three containers, under a
// project and on a subnet of their own.
type composeCluster struct {
	t       *testing.T
	env     []string
	project string
	subnet  string
	files   []string
}

// sessionTimeout is the compose fault cluster's broker.session.timeout.ms.
const sessionTimeout = 3 * time.Second

func startCompose(t *testing.T) *composeCluster {
	t.Helper()
	image := buildImage(t)
	c := &composeCluster{t: t,
		project: fmt.Sprintf("stratafaults%d", os.Getpid()),
		subnet:  fmt.Sprintf("172.29.%d", 100+os.Getpid()%150),
	}
	c.env = []string{"STRATA_IMAGE=" + image, "STRATA_SUBNET=" + c.subnet}
	// Shorter timeouts than the defaults, so that a fault outlasts the
	// session in seconds: an override file beside the cluster's.
	var override strings.Builder
	override.WriteString("services:\n")
	for n := 1; n <= 3; n++ {
		fmt.Fprintf(&override, "  strata-%d:\n    environment:\n", n)
		fmt.Fprintf(&override, "      KAFKA_BROKER_SESSION_TIMEOUT_MS: \"%d\"\n", sessionTimeout.Milliseconds())
		override.WriteString("      KAFKA_BROKER_HEARTBEAT_INTERVAL_MS: \"500\"\n")
		override.WriteString("      KAFKA_REPLICA_LAG_TIME_MAX_MS: \"4000\"\n")
		override.WriteString("      KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS: \"0\"\n")
	}
	path := filepath.Join(t.TempDir(), "faults.override.yml")
	if err := os.WriteFile(path, []byte(override.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c.files = []string{"-f", "docker-compose.cluster.yml", "-f", path}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := tryRun(commandTimeout, c.env, "./compose", c.args("logs", "--no-color")...)
			t.Logf("containers' logs:\n%s", out)
		}
		if out, err := tryRun(commandTimeout, c.env, "./compose", c.args("down", "-v", "-t", "5")...); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	c.compose("up", "-d", "--no-build")
	c.waitBrokers()
	return c
}

func (c *composeCluster) args(args ...string) []string {
	return append(append([]string{"-p", c.project}, c.files...), args...)
}

func (c *composeCluster) compose(args ...string) string {
	c.t.Helper()
	return run(c.t, c.env, "./compose", c.args(args...)...)
}

func (c *composeCluster) ip(id int32) string   { return fmt.Sprintf("%s.%d", c.subnet, 10+id) }
func (c *composeCluster) addr(id int32) string { return c.ip(id) + ":9092" }
func (c *composeCluster) seeds() []string      { return []string{c.addr(1), c.addr(2), c.addr(3)} }
func (c *composeCluster) network() string      { return c.project + "_strata" }
func (c *composeCluster) container(id int32) string {
	return strings.TrimSpace(c.compose("ps", "-q", fmt.Sprintf("strata-%d", id)))
}

// waitBrokers waits until every node, asked on its own, lists three
// unfenced brokers.
func (c *composeCluster) waitBrokers() {
	c.t.Helper()
	for n := int32(1); n <= 3; n++ {
		poll.UntilStatus(c.t, 90*time.Second, fmt.Sprintf("node %d to list three brokers", n), func() (bool, string) {
			m, err := c.metadata(n, "")
			if err != nil {
				return false, err.Error()
			}
			return len(m.Brokers) == 3, fmt.Sprint(len(m.Brokers), " brokers")
		})
	}
}

// metadata asks node id alone for the metadata of topic (no topics when
// "").
func (c *composeCluster) metadata(id int32, topic string) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addr(id)), kgo.DialTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	if topic != "" {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.MetadataResponse), nil
}

// leader returns partition 0's leader, from the answer with the highest
// leader epoch among the nodes except those given.
func (c *composeCluster) leader(topic string, except ...int32) int32 {
	leader, epoch := int32(-1), int32(-1)
	for n := int32(1); n <= 3; n++ {
		if slicesContains(except, n) {
			continue
		}
		m, err := c.metadata(n, topic)
		if err != nil {
			continue
		}
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if p.Partition == 0 && p.ErrorCode == 0 && p.LeaderEpoch > epoch {
					leader, epoch = p.Leader, p.LeaderEpoch
				}
			}
		}
	}
	return leader
}

// controller returns the active controller, as a node other than those
// given says.
func (c *composeCluster) controller(except ...int32) int32 {
	for n := int32(1); n <= 3; n++ {
		if slicesContains(except, n) {
			continue
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.addr(n)), kgo.DialTimeout(2*time.Second))
		if err != nil {
			continue
		}
		l, err := quorumLeader(cl.SeedBrokers()[0])
		cl.Close()
		if err == nil && l > 0 {
			return l
		}
	}
	return -1
}

func slicesContains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// pid is node id's container's process id on the host.
func (c *composeCluster) pid(id int32) string {
	c.t.Helper()
	return strings.TrimSpace(run(c.t, nil, "docker", "inspect", "-f", "{{.State.Pid}}", c.container(id)))
}

// nsIptables runs iptables in the network namespace of the process pid (a
// container's: the image has no iptables, the host's runs in its
// namespace).
func (c *composeCluster) nsIptables(pid string, args ...string) {
	c.t.Helper()
	run(c.t, nil, "nsenter", append([]string{"-t", pid, "-n", "iptables"}, args...)...)
}

// canIptables reports whether the asymmetric cut can be made here: root,
// with nsenter and iptables on the host.
func canIptables() bool {
	if os.Geteuid() != 0 {
		return false
	}
	for _, tool := range []string{"nsenter", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return false
		}
	}
	return true
}

type composeFault struct {
	name   string
	inject func(c *composeCluster, tl *timeline, topic string)
}

type timeline struct {
	start  time.Time
	mu     sync.Mutex
	events []string
}

func (tl *timeline) add(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, fmt.Sprintf("%8.3fs  %s", time.Since(tl.start).Seconds(), fmt.Sprintf(format, args...)))
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.events, "\n")
}

// hold waits out a fault: the fault is the point, there is nothing to poll.
func hold(d time.Duration) { <-time.After(d) }

var composeFaults = []composeFault{
	{"pause-leader", func(c *composeCluster, tl *timeline, topic string) {
		l := c.leader(topic)
		tl.add("docker pause node %d, leader of partition 0, for %v", l, sessionTimeout+3*time.Second)
		run(c.t, nil, "docker", "pause", c.container(l))
		hold(sessionTimeout + 3*time.Second)
		tl.add("docker unpause node %d (partition 0 led by %d)", l, c.leader(topic, l))
		run(c.t, nil, "docker", "unpause", c.container(l))
	}},
	{"disconnect-leader", func(c *composeCluster, tl *timeline, topic string) {
		l := c.leader(topic)
		tl.add("docker network disconnect node %d, leader of partition 0: cut off from everyone", l)
		run(c.t, nil, "docker", "network", "disconnect", c.network(), c.container(l))
		hold(sessionTimeout + 3*time.Second)
		tl.add("docker network connect node %d (partition 0 led by %d)", l, c.leader(topic, l))
		run(c.t, nil, "docker", "network", "connect", "--ip", c.ip(l), c.network(), c.container(l))
	}},
	{"disconnect-controller", func(c *composeCluster, tl *timeline, topic string) {
		a := c.controller()
		tl.add("docker network disconnect node %d, the active controller", a)
		run(c.t, nil, "docker", "network", "disconnect", c.network(), c.container(a))
		hold(sessionTimeout + 3*time.Second)
		tl.add("docker network connect node %d (active controller now %d)", a, c.controller(a))
		run(c.t, nil, "docker", "network", "connect", "--ip", c.ip(a), c.network(), c.container(a))
	}},
	{"partition-leader-iptables", func(c *composeCluster, tl *timeline, topic string) {
		if !canIptables() {
			tl.add("skipped: needs root, nsenter and iptables on the host")
			return
		}
		l := c.leader(topic)
		// Replication is on 9092, the quorum on 9093: dropping the
		// followers' packets to and from 9092 in the leader's namespace
		// cuts the data path both ways and leaves the controller's.
		var rules [][]string
		for n := int32(1); n <= 3; n++ {
			if n == l {
				continue
			}
			rules = append(rules,
				[]string{"INPUT", "-s", c.ip(n), "-p", "tcp", "--dport", "9092", "-j", "DROP"},
				[]string{"INPUT", "-s", c.ip(n), "-p", "tcp", "--sport", "9092", "-j", "DROP"},
				[]string{"OUTPUT", "-d", c.ip(n), "-p", "tcp", "--dport", "9092", "-j", "DROP"},
				[]string{"OUTPUT", "-d", c.ip(n), "-p", "tcp", "--sport", "9092", "-j", "DROP"})
		}
		pid := c.pid(l)
		tl.add("iptables in node %d's namespace (leader of partition 0): drop its followers' replication traffic (port 9092), keep the quorum's (9093)", l)
		for _, r := range rules {
			c.nsIptables(pid, append([]string{"-A"}, r...)...)
		}
		hold(sessionTimeout + 3*time.Second)
		tl.add("remove the rules (partition 0 led by %d)", c.leader(topic))
		for _, r := range rules {
			c.nsIptables(pid, append([]string{"-D"}, r...)...)
		}
	}},
}

// TestComposeFaults runs the verify workload (idempotent acks=all
// producers, assigned and group consumers, a final read) from the host
// against docker-compose.cluster.yml's three containers while Docker
// faults hit them, one after another on one cluster, each on a topic of
// its own: docker pause of partition 0's leader past the session timeout,
// docker network disconnect of the leader and of the active controller
// (cut off from everyone), and, where the host allows, an asymmetric cut
// with iptables in the leader's network namespace (its followers'
// replication traffic dropped, the quorum's kept). Each prints its fault
// timeline beside the checker's verdict; any anomaly fails it.
func TestComposeFaults(t *testing.T) {
	needDocker(t)
	c := startCompose(t)
	for _, f := range composeFaults {
		t.Run(f.name, func(t *testing.T) {
			c.t = t
			topic := "compose-" + f.name
			ready := &readyWriter{match: "replication factor", ready: make(chan struct{})}
			cfg := verify.Config{
				Brokers: c.seeds(), Topic: topic, Partitions: 3, ReplicationFactor: 3,
				Producers: 2, AssignedConsumers: 1, GroupConsumers: 1,
				Duration: time.Hour, Rate: 200, Idempotent: true, Acks: kgo.AllISRAcks(),
				DeliveryTimeout: 90 * time.Second, DrainTimeout: 30 * time.Second, KeepTopic: true,
				ClientOpts: []kgo.Opt{kgo.DialTimeout(3 * time.Second)},
				Progress:   ready,
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			type outcome struct {
				res *verify.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				_, res, err := verify.Verify(ctx, cfg)
				done <- outcome{res, err}
			}()
			select {
			case <-ready.ready:
			case o := <-done:
				t.Fatalf("the workload ended before it started: %v", o.err)
			}
			tl := &timeline{start: time.Now()}
			tl.add("workload running on %s", topic)
			hold(2 * time.Second)
			f.inject(c, tl, topic)
			c.waitBrokers()
			tl.add("three brokers again")
			hold(2 * time.Second)
			tl.add("stop producing; drain and final read")
			stop()
			o := <-done
			tl.add("workload done")
			if o.err != nil {
				t.Fatalf("workload: %v\nfault timeline:\n%s", o.err, tl)
			}
			var report bytes.Buffer
			o.res.WriteText(&report)
			t.Logf("%s: fault timeline:\n%s\n\nverdict:\n%s", f.name, tl, report.String())
			if !o.res.Valid || o.res.Stats.Acknowledged == 0 {
				t.Fatalf("%s: %s (%d acknowledged)", f.name, o.res.Summary(), o.res.Stats.Acknowledged)
			}
		})
	}
}

// readyWriter takes the workload's progress lines and closes ready at the
// first that contains match.
type readyWriter struct {
	match string
	once  sync.Once
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.match)) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}
