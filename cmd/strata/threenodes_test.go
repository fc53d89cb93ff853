package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// threeNodes is a real cluster of three `strata serve` processes on
// loopback (this test binary, which runs the CLI when started as a child),
// each a broker and a voter of the metadata quorum
// (process.roles=broker,controller) with its own data directory.
type threeNodes struct {
	t     *testing.T
	nodes [4]*exec.Cmd // by node id; nil once stopped
	logs  [4]*bytes.Buffer
	// clientAddrs and controllerPorts are each node's listeners.
	clientAddrs     [4]string
	controllerPorts [4]string
}

// startThreeNodes starts the three nodes and waits until every one lists
// the three brokers.
func startThreeNodes(t *testing.T) *threeNodes {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &threeNodes{t: t}
	var voters []string
	for id := 1; id <= 3; id++ {
		c.clientAddrs[id] = deadAddr(t)
		c.controllerPorts[id] = freePort(t)
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%s", id, c.controllerPorts[id]))
	}
	dir := t.TempDir()
	t.Cleanup(func() {
		for id := int32(1); id <= 3; id++ {
			if cmd := c.nodes[id]; cmd != nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
			if t.Failed() {
				t.Logf("node %d's log:\n%s", id, c.logs[id])
			} else if log := c.logs[id].String(); strings.Contains(log, "WARNING: DATA RACE") {
				i := strings.Index(log, "WARNING: DATA RACE")
				t.Logf("node %d (a server, not the CLI under test) reported a data race:\n%s", id, log[i:min(len(log), i+3000)])
			}
		}
	})
	for id := 1; id <= 3; id++ {
		cmd := exec.Command(exe, "serve",
			"--set", fmt.Sprint("node.id=", id),
			"--set", "log.dirs="+filepath.Join(dir, fmt.Sprintf("node-%d", id)),
			"--set", "listeners=PLAINTEXT://"+c.clientAddrs[id]+",CONTROLLER://127.0.0.1:"+c.controllerPorts[id],
			"--set", "controller.quorum.voters="+strings.Join(voters, ","),
			"--set", "strata.admin.listener=",
			"--set", "offsets.topic.replication.factor=1",
			"--set", "broker.heartbeat.interval.ms=500",
			"--set", "broker.session.timeout.ms=3000",
			"--set", "group.initial.rebalance.delay.ms=0")
		// Under -race the servers are race-enabled too. They are the
		// stage here, not what is tested (the CLI is, in this
		// process): a race they report is logged, not fatal.
		cmd.Env = append(os.Environ(), "GORACE=exitcode=0")
		c.logs[id] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = c.logs[id], c.logs[id]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c.nodes[id] = cmd
	}
	for id := int32(1); id <= 3; id++ {
		c.waitBrokers(id, 1, 2, 3)
	}
	return c
}

// addr is node id's client address.
func (c *threeNodes) addr(id int32) string { return c.clientAddrs[id] }

// seeds are the running nodes' client addresses, comma-separated.
func (c *threeNodes) seeds() string {
	var out []string
	for id := 1; id <= 3; id++ {
		if c.nodes[id] != nil {
			out = append(out, c.clientAddrs[id])
		}
	}
	return strings.Join(out, ",")
}

// stop shuts node id down with SIGTERM (a controlled shutdown) and waits
// for it to exit cleanly.
func (c *threeNodes) stop(id int32) {
	c.t.Helper()
	cmd := c.nodes[id]
	c.nodes[id] = nil
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		c.t.Fatalf("node %d exited with %v after SIGTERM:\n%s", id, err, c.logs[id])
	}
}

// waitBrokers waits until `strata cluster describe` through node via lists
// exactly these brokers.
func (c *threeNodes) waitBrokers(via int32, want ...int32) {
	c.t.Helper()
	poll.UntilStatus(c.t, 60*time.Second, fmt.Sprintf("node %d to list brokers %v", via, want), func() (bool, string) {
		r := cli(c.t, "", "cluster", "describe", "--format", "json", "--brokers", c.addr(via))
		if r.code != 0 {
			return false, r.stderr
		}
		var ids []int32
		for _, b := range decode[clusterInfo](c.t, r.stdout).Brokers {
			ids = append(ids, b.NodeID)
		}
		return fmt.Sprint(ids) == fmt.Sprint(want), fmt.Sprint(ids)
	})
}

// freePort is a loopback port where nothing listens (yet).
func freePort(t *testing.T) string {
	t.Helper()
	_, port, _ := strings.Cut(deadAddr(t), ":")
	return port
}

// decode decodes a command's JSON output.
func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output is not the JSON expected: %v\n%s", err, out)
	}
	return v
}

// TestClusterQuorumOfThree runs cluster quorum, describe and health against
// three real nodes: the quorum as kafka-metadata-quorum.sh prints it, the
// same through every node; the active controller and the three brokers;
// then a follower controller shut down (health names it, and its offline
// partitions), then the leader too (no quorum: health says so).
func TestClusterQuorumOfThree(t *testing.T) {
	c := startThreeNodes(t)
	all := c.seeds()

	// The quorum, through each node: one leader, three voters with their
	// controller endpoints, no observers.
	var st quorumStatus
	for id := int32(1); id <= 3; id++ {
		st = okJSON[quorumStatus](t, "", "cluster", "quorum", "--brokers", c.addr(id))
		if st.LeaderID < 1 || st.LeaderID > 3 || st.LeaderEpoch < 1 || st.HighWatermark < 1 {
			t.Fatalf("through node %d: %+v", id, st)
		}
		if len(st.CurrentVoters) != 3 || len(st.CurrentObservers) != 0 {
			t.Fatalf("through node %d: voters %+v, observers %+v", id, st.CurrentVoters, st.CurrentObservers)
		}
		for i, v := range st.CurrentVoters {
			want := "CONTROLLER://127.0.0.1:" + c.controllerPorts[i+1]
			if v.ID != int32(i+1) || len(v.Endpoints) != 1 || v.Endpoints[0] != want {
				t.Fatalf("voter %d: %+v, want id %d at %s", i, v, i+1, want)
			}
		}
	}
	leader := st.LeaderID
	info := okJSON[clusterInfo](t, "", "cluster", "describe", "--brokers", all)
	if st.ClusterID == "" || st.ClusterID != info.ClusterID {
		t.Fatalf("quorum's cluster id %q, describe's %q", st.ClusterID, info.ClusterID)
	}
	text := ok(t, "", "cluster", "quorum", "--brokers", all)
	for _, want := range []string{
		"ClusterId:              " + st.ClusterID + "\n",
		fmt.Sprintf("LeaderId:               %d\n", leader),
		"LeaderEpoch:            ", "HighWatermark:          ", "MaxFollowerLag:         ", "MaxFollowerLagTimeMs:   ",
		`CurrentVoters:          [{"id": 1, "endpoints": ["CONTROLLER://127.0.0.1:` + c.controllerPorts[1] + `"]}, {"id": 2, `,
		"CurrentObservers:       []\n",
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("quorum text lacks %q:\n%s", want, text)
		}
	}

	// --replication: the leader first with no lag, then the followers,
	// which catch up while nothing is written.
	poll.UntilStatus(t, 30*time.Second, "the followers caught up", func() (bool, string) {
		r := cli(t, "", "cluster", "quorum", "--replication", "--format", "json", "--brokers", all)
		if r.code != 0 {
			return false, r.stderr
		}
		rows := decode[[]quorumReplica](t, r.stdout)
		if len(rows) != 3 || rows[0].Status != "Leader" || rows[0].NodeID != leader || rows[0].Lag != 0 {
			t.Fatalf("replication rows %+v, want the leader %d first", rows, leader)
		}
		now := time.Now().UnixMilli()
		for _, row := range rows[1:] {
			if row.Status != "Follower" || row.NodeID == leader {
				t.Fatalf("replication rows %+v", rows)
			}
			if row.LastFetchTimestamp < now-60_000 || row.LastFetchTimestamp > now+60_000 {
				t.Fatalf("last fetch %d, now %d", row.LastFetchTimestamp, now)
			}
			if row.Lag != 0 || row.LogEndOffset != rows[0].LogEndOffset || row.LastCaughtUpTimestamp < 0 {
				return false, fmt.Sprintf("%+v", rows)
			}
		}
		return rows[1].NodeID < rows[2].NodeID, fmt.Sprintf("%+v", rows)
	})
	text = ok(t, "", "cluster", "quorum", "--replication", "--brokers", all)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "NodeId LogEndOffset Lag LastFetchTimestamp LastCaughtUpTimestamp Status" ||
		!strings.HasPrefix(lines[1], fmt.Sprint(leader)+" ") || !strings.HasSuffix(lines[1], "Leader") || !strings.HasSuffix(lines[3], "Follower") {
		t.Fatalf("replication table:\n%s", text)
	}
	if text := ok(t, "", "cluster", "quorum", "--replication", "--human-readable", "--brokers", all); !strings.Contains(text, " ms ago") {
		t.Fatalf("human-readable table:\n%s", text)
	}
	fails(t, "give one of --status and --replication", "cluster", "quorum", "--status", "--replication")
	fails(t, "--human-readable goes with --replication", "cluster", "quorum", "--human-readable")

	// describe: the active controller is the quorum's leader; the three
	// brokers are all voters.
	info = okJSON[clusterInfo](t, "", "cluster", "describe", "--brokers", c.addr(leader%3+1))
	if info.Controller != leader || info.Quorum == nil || fmt.Sprint(info.Quorum.Voters) != "[1 2 3]" || info.Quorum.LeaderID != leader {
		t.Fatalf("describe %+v (quorum %+v), want controller %d", info, info.Quorum, leader)
	}
	for i, b := range info.Brokers {
		if b.NodeID != int32(i+1) || !b.Voter || b.Controller != (b.NodeID == leader) || b.Host+":"+itoa(b.Port) != c.addr(b.NodeID) {
			t.Fatalf("brokers %+v", info.Brokers)
		}
	}
	text = ok(t, "", "cluster", "describe", "--brokers", all)
	for _, want := range []string{fmt.Sprintf("CONTROLLER  %d\n", leader), fmt.Sprintf("QUORUM      leader %d, epoch ", leader),
		"voters [1,2,3]", "VOTER", fmt.Sprintf("\n%d*  ", leader)} {
		if !strings.Contains(text, want) {
			t.Fatalf("describe text lacks %q:\n%s", want, text)
		}
	}
	rep := okJSON[healthReport](t, "", "cluster", "health", "--brokers", all)
	if !rep.Healthy || fmt.Sprint(rep.BrokerIDs) != "[1 2 3]" || fmt.Sprint(rep.Voters) != "[1 2 3]" || rep.Controller != leader {
		t.Fatalf("health %+v", rep)
	}
	want := fmt.Sprintf("healthy: 3 brokers [1,2,3], controller %d, voters [1,2,3], ", leader)
	if out := ok(t, "", "cluster", "health", "--brokers", all); !strings.HasPrefix(out, want) {
		t.Fatalf("health %q, want %q...", out, want)
	}

	// A follower controller stops: the quorum keeps its leader, health
	// names the controller it lost and the partitions that went offline
	// with it (one replica each).
	topic := newTopic(t, 6, "--brokers", all)
	follower := leader%3 + 1
	c.stop(follower)
	all = c.seeds()
	var r result
	poll.UntilStatus(t, 60*time.Second, fmt.Sprintf("health to report controller %d and its partitions", follower), func() (bool, string) {
		r = cli(t, "", "cluster", "health", "--format", "json", "--quorum-timeout", "1s", "--brokers", all)
		rep = decode[healthReport](t, r.stdout)
		offline := slices.ContainsFunc(rep.Problems, func(p string) bool {
			return strings.HasPrefix(p, "partition "+topic+"/") && strings.Contains(p, "is offline")
		})
		return r.code == 1 && len(rep.Problems) > 1 && offline &&
				strings.HasPrefix(rep.Problems[0], fmt.Sprintf("controller %d: the quorum's leader %d has not heard from it for ", follower, leader)),
			fmt.Sprint(r.code, rep.Problems)
	})
	if fmt.Sprint(rep.Voters) != "[1 2 3]" || len(rep.BrokerIDs) != 2 || rep.Controller != leader {
		t.Fatalf("health %+v", rep)
	}
	r = cli(t, "", "cluster", "health", "--quorum-timeout", "1s", "--brokers", all)
	checkOneLineError(t, r, fmt.Sprintf("unhealthy: controller %d: the quorum's leader %d has not heard from it for ", follower, leader), nil)
	if !strings.Contains(r.stderr, "more problems)") {
		t.Fatalf("health %q does not count the other problems", r.stderr)
	}

	// The leader stops too: one voter of three has no quorum.
	c.stop(leader)
	all = c.seeds()
	poll.UntilStatus(t, 60*time.Second, "health to report no quorum", func() (bool, string) {
		r = cli(t, "", "cluster", "health", "--format", "json", "--timeout", "3s", "--brokers", all)
		if r.code != 1 || !strings.HasPrefix(r.stdout, "{") {
			return false, r.stdout + r.stderr
		}
		rep = decode[healthReport](t, r.stdout)
		return rep.Controller == -1 && len(rep.Problems) > 0 && strings.Contains(rep.Problems[0], "quorum"), fmt.Sprint(rep.Problems)
	})
}
