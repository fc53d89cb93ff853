package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/testutil/tcpproxy"
)

// cluster is a cluster of strata serve processes on loopback, each a
// broker and a voter of the metadata quorum (process.roles=broker,controller).
type cluster struct {
	t     testing.TB
	nodes map[int32]*process
}

// startCluster starts n combined nodes, ids 1..n, and waits until every
// broker is registered and unfenced.
func startCluster(t testing.TB, n int, sets ...string) *cluster {
	t.Helper()
	roles := make([]string, n)
	for i := range roles {
		roles[i] = "broker,controller"
	}
	c := startClusterRoles(t, roles, sets...)
	c.waitBrokers(ids(n)...)
	return c
}

// startClusterRoles starts one node per entry of roles (process.roles),
// ids 1 and up; the nodes with the controller role are the voters.
func startClusterRoles(t testing.TB, roles []string, sets ...string) *cluster {
	t.Helper()
	return startClusterWith(t, roles, nil, sets...)
}

// nodeHook gives one node of a cluster being started more listeners and
// settings than the others, knowing its client address.
type nodeHook func(id int32, clientAddr string) (listeners, sets []string)

// startClusterWith is startClusterRoles with a hook for each node (nil:
// none). A port freePort found free can be taken before the node binds it
// (by another test's listener on port 0): then the cluster starts again on
// fresh ports.
func startClusterWith(t testing.TB, roles []string, hook nodeHook, sets ...string) *cluster {
	t.Helper()
	n := len(roles)
	c := &cluster{t: t, nodes: map[int32]*process{}}
	t.Cleanup(func() {
		if t.Failed() {
			for id := int32(1); int(id) <= n; id++ {
				if p := c.nodes[id]; p != nil && p.logs != nil {
					t.Logf("node %d's log:\n%s", id, p.logs)
				}
			}
		}
	})
	retryOnPortClash(t, func() (map[int32]*process, bool) {
		return c.nodes, launchCluster(t, c, roles, hook, sets...)
	})
	return c
}

// retryOnPortClash runs start, which starts nodes and reports whether
// they all bound their ports, up to three times: after a clash it kills
// the nodes start returned and tries again (on the fresh ports start
// picks).
func retryOnPortClash(t testing.TB, start func() (map[int32]*process, bool)) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		nodes, ok := start()
		if ok {
			return
		}
		for _, p := range nodes {
			p.kill()
		}
		if attempt == 3 {
			t.Fatal("three attempts at starting the cluster found a port taken")
		}
		t.Logf("a node's port was taken before it bound it; starting again on other ports")
	}
}

// portClash reports whether a node's log says it could not bind a port.
func portClash(p *process) bool { return strings.Contains(p.logs.String(), "address already in use") }

// launchCluster starts c's nodes on fresh ports and waits until each
// listens; it returns false, at once, when a node could not bind a port.
func launchCluster(t testing.TB, c *cluster, roles []string, hook nodeHook, sets ...string) bool {
	t.Helper()
	n := len(roles)
	ports := make([][2]string, n)
	var voters []string
	for i := range n {
		ports[i] = [2]string{freePort(t), freePort(t)}
		if strings.Contains(roles[i], "controller") {
			voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%s", i+1, ports[i][1]))
		}
	}
	for i := range n {
		id := int32(i + 1)
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("node-%d", id))
		p := &process{t: t, dir: dir, addr: "127.0.0.1:" + ports[i][0]}
		var listeners []string
		if strings.Contains(roles[i], "broker") {
			listeners = append(listeners, "PLAINTEXT://"+p.addr)
		} else {
			p.addr = "127.0.0.1:" + ports[i][1] // wait for the controller listener
		}
		if strings.Contains(roles[i], "controller") {
			listeners = append(listeners, "CONTROLLER://127.0.0.1:"+ports[i][1])
		}
		var extra []string
		if hook != nil {
			more, moreSets := hook(id, p.addr)
			listeners = append(listeners, more...)
			extra = flagsFor(moreSets)
		}
		p.args = append([]string{"serve",
			"--set", "node.id=" + fmt.Sprint(id),
			"--set", "process.roles=" + roles[i],
			"--set", "log.dirs=" + dir,
			"--set", "listeners=" + strings.Join(listeners, ","),
			"--set", "controller.quorum.voters=" + strings.Join(voters, ","),
			"--set", "strata.admin.listener=",
		}, append(flagsFor(sets), extra...)...)
		p.launch("")
		t.Cleanup(p.kill)
		c.nodes[id] = p
	}
	deadline := time.Now().Add(30 * time.Second)
	for id := int32(1); int(id) <= n; id++ {
		p := c.nodes[id]
		for {
			if portClash(p) {
				return false
			}
			if conn, err := net.DialTimeout("tcp", p.addr, time.Second); err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d did not start listening on %s:\n%s", id, p.addr, p.logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A node that lost its controller port after binding its client port.
	for _, p := range c.nodes {
		if portClash(p) {
			return false
		}
	}
	return true
}

func ids(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i + 1)
	}
	return out
}

// admin returns an admin client of one node only.
func (c *cluster) admin(id int32) *kadm.Client {
	return kadm.NewClient(client(c.t, c.nodes[id].addr))
}

// waitBrokers waits until the metadata some live node answers lists
// exactly these unfenced brokers.
func (c *cluster) waitBrokers(want ...int32) {
	c.t.Helper()
	poll.UntilStatus(c.t, 60*time.Second, fmt.Sprintf("brokers %v", want), func() (bool, string) {
		for _, id := range want {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			m, err := c.admin(id).BrokerMetadata(ctx)
			cancel()
			if err != nil {
				return false, err.Error()
			}
			got := m.Brokers.NodeIDs()
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return false, fmt.Sprintf("node %d lists %v", id, got)
			}
		}
		return true, ""
	})
}

// controller returns the active controller as some live node reports it
// (DescribeQuorum's leader).
func (c *cluster) controller(via int32) int32 {
	c.t.Helper()
	var leader int32 = -1
	poll.UntilStatus(c.t, 30*time.Second, "a quorum leader", func() (bool, string) {
		req := kmsg.NewPtrDescribeQuorumRequest()
		rt := kmsg.NewDescribeQuorumRequestTopic()
		rt.Topic = "__cluster_metadata"
		rp := kmsg.NewDescribeQuorumRequestTopicPartition()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, client(c.t, c.nodes[via].addr))
		if err != nil {
			return false, err.Error()
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return false, "no partition in DescribeQuorum's answer"
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			return false, fmt.Sprintf("error %d", p.ErrorCode)
		}
		leader = p.LeaderID
		return true, ""
	})
	return leader
}

// createTopic creates a topic through one node and returns how long it
// took.
func (c *cluster) createTopic(via int32, name string, partitions int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.admin(via).CreateTopic(ctx, partitions, 1, nil, name)
	if err != nil {
		return err
	}
	return resp.Err
}

// leaders returns each partition's leader, as node via sees it.
func (c *cluster) leaders(via int32, topic string) map[int32]int32 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.admin(via).Metadata(ctx, topic)
	if err != nil {
		return nil
	}
	out := map[int32]int32{}
	for _, p := range m.Topics[topic].Partitions {
		out[p.Partition] = p.Leader
	}
	return out
}

// TestClusterOfThree runs three real processes as one cluster: topics are
// created through each node and spread over all three; records go to and
// come from partitions led by each; SIGKILL of the active controller
// elects another, with everything created before intact and new topics
// creatable; the old controller rejoins and catches up; a killed broker's
// single-replica partitions go offline (leader -1) and come back with it.
func TestClusterOfThree(t *testing.T) {
	c := startCluster(t, 3, "broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500",
		"offsets.topic.replication.factor=1")
	for id := int32(1); id <= 3; id++ {
		if err := c.createTopic(id, fmt.Sprintf("via-%d", id), 6); err != nil {
			t.Fatalf("creating a topic through node %d: %v", id, err)
		}
	}
	// Partitions are spread: every broker leads some of via-1's.
	poll.UntilStatus(t, 20*time.Second, "via-1's partitions led by all three brokers", func() (bool, string) {
		led := map[int32]bool{}
		for _, l := range c.leaders(2, "via-1") {
			led[l] = true
		}
		return len(led) == 3 && !led[-1], fmt.Sprint(c.leaders(2, "via-1"))
	})

	// Produce to and consume from every partition, through one seed.
	cl := client(t, c.nodes[3].addr, kgo.DefaultProduceTopic("via-1"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for p := range int32(6) {
		for i := range 10 {
			r := &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("producing to partition %d: %v", p, err)
			}
		}
	}
	if got := consumeN(t, c.nodes[1].addr, "via-1", 60); got != 60 {
		t.Fatalf("consumed %d of 60", got)
	}

	// Kill the active controller.
	active := c.controller(1)
	killedAt := time.Now()
	c.nodes[active].kill()
	survivor := active%3 + 1
	poll.UntilStatus(t, 30*time.Second, "a topic created after the controller was killed", func() (bool, string) {
		err := c.createTopic(survivor, "after-failover", 3)
		return err == nil || strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS"), fmt.Sprint(err)
	})
	t.Logf("node %d (active controller) killed; CreateTopics through node %d succeeded %v later", active, survivor, time.Since(killedAt).Round(time.Millisecond))
	if next := c.controller(survivor); next == active {
		t.Fatalf("node %d still the controller after its SIGKILL", active)
	}
	for id := int32(1); id <= 3; id++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		topics, err := c.admin(survivor).ListTopics(ctx)
		cancel()
		if err != nil || !topics.Has(fmt.Sprintf("via-%d", id)) {
			t.Fatalf("via-%d lost after the failover: %v", id, err)
		}
	}
	// The killed broker's partitions go offline, then come back with it.
	poll.UntilStatus(t, 30*time.Second, fmt.Sprintf("node %d's partitions offline", active), func() (bool, string) {
		for _, l := range c.leaders(survivor, "via-1") {
			if l == active {
				return false, fmt.Sprint(c.leaders(survivor, "via-1"))
			}
		}
		return true, ""
	})
	c.nodes[active].restart()
	c.waitBrokers(1, 2, 3)
	poll.UntilStatus(t, 30*time.Second, "via-1 fully led again", func() (bool, string) {
		for _, l := range c.leaders(active, "via-1") {
			if l < 0 {
				return false, fmt.Sprint(c.leaders(active, "via-1"))
			}
		}
		return true, ""
	})
	// The restarted node caught up: it knows the topic created while it
	// was down, and serves its partitions' old records.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	topics, err := c.admin(active).ListTopics(ctx2)
	if err != nil || !topics.Has("after-failover") {
		t.Fatalf("node %d does not know after-failover after rejoining: %v (it lists %v)\n%s", active, err, topics.Names(), c.nodes[active].logs)
	}
	if got := consumeN(t, c.nodes[active].addr, "via-1", 60); got != 60 {
		t.Fatalf("after the restart consumed %d of 60", got)
	}
}

// consumeN reads a topic from the start until it has n records or 30 s
// pass, and returns how many it read.
func consumeN(t testing.TB, seed, topic string, n int) int {
	t.Helper()
	cl := client(t, seed, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := 0
	for got < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(*kgo.Record) { got++ })
	}
	return got
}

// TestBrokerAndControllerOnlyNodes runs voters 1 and 2 combined, voter 3
// as a controller only, and node 4 as a broker only, which follows the
// metadata as an observer: started after the metadata was snapshotted, it
// loads the snapshot from the leader, then follows; it hosts and serves
// partitions, and node 3 hosts none.
func TestBrokerAndControllerOnlyNodes(t *testing.T) {
	sets := []string{"metadata.log.max.record.bytes.between.snapshots=2000", "offsets.topic.replication.factor=1"}
	c := startClusterRoles(t, []string{"broker,controller", "broker,controller", "controller"}, sets...)
	c.waitBrokers(1, 2)
	for i := range 20 {
		if err := c.createTopic(1, fmt.Sprintf("early-%d", i), 2); err != nil {
			t.Fatal(err)
		}
	}
	// Node 4 joins now, a broker only, following the three voters.
	voters := ""
	for _, arg := range c.nodes[1].args {
		if v, ok := strings.CutPrefix(arg, "controller.quorum.voters="); ok {
			voters = v
		}
	}
	dir := filepath.Join(t.TempDir(), "node-4")
	p := &process{t: t, dir: dir, addr: "127.0.0.1:" + freePort(t)}
	p.args = append([]string{"serve", "--set", "node.id=4", "--set", "process.roles=broker",
		"--set", "log.dirs=" + dir, "--set", "listeners=PLAINTEXT://" + p.addr,
		"--set", "controller.quorum.voters=" + voters, "--set", "strata.admin.listener="}, flagsFor(sets)...)
	p.start()
	t.Cleanup(p.kill)
	c.nodes[4] = p
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node 4's log:\n%s", p.logs)
		}
	})
	c.waitBrokers(1, 2, 4)
	if !strings.Contains(p.logs.String(), "metadata snapshot fetched") {
		t.Errorf("node 4 did not load a snapshot:\n%s", p.logs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := c.admin(4).ListTopics(ctx)
	if err != nil || len(topics.Names()) < 20 {
		t.Fatalf("node 4 lists %v (%v)", topics.Names(), err)
	}
	// A topic made through the broker-only node spreads over brokers 1, 2
	// and 4, never over the controller-only node 3.
	if err := c.createTopic(4, "spread", 6); err != nil {
		t.Fatal(err)
	}
	poll.UntilStatus(t, 20*time.Second, "spread led by 1, 2 and 4", func() (bool, string) {
		led := map[int32]bool{}
		for _, l := range c.leaders(4, "spread") {
			led[l] = true
		}
		return len(led) == 3 && led[1] && led[2] && led[4], fmt.Sprint(c.leaders(4, "spread"))
	})
	cl := client(t, p.addr, kgo.DefaultProduceTopic("spread"))
	for i := range 30 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if got := consumeN(t, p.addr, "spread", 30); got != 30 {
		t.Fatalf("read %d of 30 through the broker-only node", got)
	}
}

// meshCluster is a cluster whose voters reach each other only through a
// proxy per ordered pair of nodes (node x dials node y's controller
// listener through proxies[x][y]), so that a node can be cut off from the
// others, Raft traffic and controller requests alike.
type meshCluster struct {
	*cluster
	proxies map[int32]map[int32]*tcpproxy.Proxy
	admin   map[int32]string // each node's admin HTTP address
}

func startMeshCluster(t *testing.T, n int, sets ...string) *meshCluster {
	t.Helper()
	m := &meshCluster{cluster: &cluster{t: t, nodes: map[int32]*process{}}, proxies: map[int32]map[int32]*tcpproxy.Proxy{}, admin: map[int32]string{}}
	t.Cleanup(func() {
		if t.Failed() {
			for id, p := range m.nodes {
				t.Logf("node %d's log:\n%s", id, p.logs)
			}
		}
	})
	client, ctrl := map[int32]string{}, map[int32]string{}
	for id := int32(1); int(id) <= n; id++ {
		client[id], ctrl[id], m.admin[id] = "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	}
	for x := int32(1); int(x) <= n; x++ {
		m.proxies[x] = map[int32]*tcpproxy.Proxy{}
		for y := int32(1); int(y) <= n; y++ {
			if x == y {
				continue
			}
			p, err := tcpproxy.Listen(ctrl[y])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			m.proxies[x][y] = p
		}
	}
	for x := int32(1); int(x) <= n; x++ {
		var voters []string
		for y := int32(1); int(y) <= n; y++ {
			addr := ctrl[y]
			if x != y {
				addr = m.proxies[x][y].Addr()
			}
			voters = append(voters, fmt.Sprintf("%d@%s", y, addr))
		}
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("node-%d", x))
		p := &process{t: t, dir: dir, addr: client[x]}
		p.args = append([]string{"serve",
			"--set", "node.id=" + fmt.Sprint(x),
			"--set", "log.dirs=" + dir,
			"--set", "listeners=PLAINTEXT://" + client[x] + ",CONTROLLER://" + ctrl[x],
			"--set", "controller.quorum.voters=" + strings.Join(voters, ","),
			"--set", "strata.admin.listener=" + m.admin[x],
		}, flagsFor(sets)...)
		p.start()
		t.Cleanup(p.kill)
		m.nodes[x] = p
	}
	m.waitBrokers(ids(n)...)
	return m
}

// isolate cuts node x off from every other node, both ways; heal undoes
// every cut.
func (m *meshCluster) isolate(x int32) {
	for y, p := range m.proxies[x] {
		p.Cut()
		m.proxies[y][x].Cut()
	}
}

func (m *meshCluster) heal() {
	for _, row := range m.proxies {
		for _, p := range row {
			p.Heal()
		}
	}
}

// gauge scrapes one of a node's metrics; -1 when it cannot.
func (m *meshCluster) gauge(id int32, name string) float64 {
	resp, err := http.Get("http://" + m.admin[id] + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// TestControllerCutOff cuts the active controller off from the other two
// voters: it cannot commit (a CreateTopics through it fails), the other
// two elect a leader between them and go on, and no moment shows two
// active controllers able to commit; after healing, the cut-off node
// catches up with what was committed without it.
func TestControllerCutOff(t *testing.T) {
	m := startMeshCluster(t, 3, "offsets.topic.replication.factor=1")
	if err := m.createTopic(1, "before", 3); err != nil {
		t.Fatal(err)
	}
	cut := m.controller(1)
	others := []int32{cut%3 + 1, (cut+1)%3 + 1}
	m.isolate(cut)

	// The two others elect a leader between them; the cut-off node stops
	// being active. Sampled throughout: never two active at once among
	// nodes that can commit (the cut-off one cannot).
	poll.UntilStatus(t, 30*time.Second, "a new active controller among the others", func() (bool, string) {
		a, b := m.gauge(others[0], "strata_active_controller_count"), m.gauge(others[1], "strata_active_controller_count")
		if a == 1 && b == 1 {
			t.Fatalf("nodes %d and %d are both the active controller", others[0], others[1])
		}
		return a+b == 1, fmt.Sprintf("active: node %d %v, node %d %v", others[0], a, others[1], b)
	})
	poll.UntilStatus(t, 30*time.Second, "the cut-off node to step down", func() (bool, string) {
		v := m.gauge(cut, "strata_active_controller_count")
		return v == 0, fmt.Sprint(v)
	})
	if err := m.createTopic(others[0], "during", 3); err != nil {
		t.Fatalf("creating a topic through node %d while node %d is cut off: %v", others[0], cut, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := m.cluster.admin(cut).CreateTopic(ctx, 1, 1, nil, "lost")
	cancel()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		topics, _ := m.cluster.admin(others[0]).ListTopics(ctx)
		cancel()
		if topics.Has("lost") {
			t.Fatalf("node %d, cut off from the quorum, committed a topic", cut)
		}
	}

	m.heal()
	poll.UntilStatus(t, 30*time.Second, fmt.Sprintf("node %d to catch up", cut), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		topics, err := m.cluster.admin(cut).ListTopics(ctx)
		if err != nil {
			return false, err.Error()
		}
		return topics.Has("during") && topics.Has("before"), fmt.Sprint(topics.Names())
	})
	a := m.gauge(1, "strata_active_controller_count") + m.gauge(2, "strata_active_controller_count") + m.gauge(3, "strata_active_controller_count")
	if a != 1 {
		t.Fatalf("%v active controllers after healing", a)
	}
}

// TestControllerStopsCleanly: SIGTERM of the active controller hands the
// quorum's leadership over before it stops, so the quorum needs no election
// timeout to go on. The stopping node logs the handover only once it has
// heard from the new leader, so the log line is the proof: the leadership
// moved while the old leader still ran.
func TestControllerStopsCleanly(t *testing.T) {
	c := startCluster(t, 3, "offsets.topic.replication.factor=1", "controller.quorum.election.timeout.ms=5000")
	active := c.controller(1)
	c.nodes[active].stop()
	logs := c.nodes[active].logs.String()
	m := regexp.MustCompile(`leadership handed over.* to=(\d+)`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("node %d stopped without handing over the leadership:\n%s", active, logs)
	}
	n, _ := strconv.Atoi(m[1])
	to := int32(n)
	if to == active || to < 1 || to > 3 {
		t.Fatalf("node %d handed the leadership to node %d", active, to)
	}
	if err := c.createTopic(to, "after-stop", 1); err != nil {
		t.Fatal(err)
	}
}
