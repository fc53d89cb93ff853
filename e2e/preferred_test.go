package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// notPreferred returns each partition of topic whose leader is not
// its preferred replica (the first), with its leader, as node via sees it.
func (c *cluster) notPreferred(via int32, topic string) map[int32]int32 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.admin(via).Metadata(ctx, topic)
	if err != nil {
		return map[int32]int32{-1: -1}
	}
	out := map[int32]int32{}
	for _, p := range m.Topics[topic].Partitions {
		if len(p.Replicas) == 0 || p.Leader != p.Replicas[0] {
			out[p.Partition] = p.Leader
		}
	}
	return out
}

// displaceLeaders kills node id and starts it again, and waits until
// topic is fully in sync: the partitions id prefers are then led by
// others.
func (c *cluster) displaceLeaders(id int32, topic string, partitions int32) {
	c.t.Helper()
	c.nodes[id].kill()
	via := c.alive(id)
	poll.UntilStatus(c.t, 60*time.Second, fmt.Sprintf("node %d to lead nothing", id), func() (bool, string) {
		for p, l := range c.leaders(via, topic) {
			if l == id || l < 0 {
				return false, fmt.Sprintf("partition %d led by %d", p, l)
			}
		}
		return true, ""
	})
	c.nodes[id].restart()
	c.waitBrokers(1, 2, 3)
	c.waitInSync(via, topic, partitions)
}

// strataCLI runs the strata binary with args and returns its output.
func strataCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

// TestElectLeaders: after a broker's restart the partitions it prefers
// are led by others; ElectLeaders (kadm, then strata topic elect-leaders)
// gives them back, answers ELECTION_NOT_NEEDED where the preferred replica
// leads, and refuses an unclean election of a partition with a leader.
// Automatic rebalancing is off here.
func TestElectLeaders(t *testing.T) {
	c := startCluster(t, 3, append(replicatedSets, "auto.leader.rebalance.enable=false")...)
	c.createReplicated(1, "prefer", 6)
	c.waitInSync(1, "prefer", 6)
	c.displaceLeaders(2, "prefer", 6)
	off := c.notPreferred(1, "prefer")
	if len(off) == 0 {
		t.Fatal("every partition led by its preferred replica after node 2's restart")
	}
	adm := kadm.NewClient(client(t, c.nodes[1].addr, kgo.SeedBrokers(c.seeds()...)))
	ctx := ctxTimeout(t, 120*time.Second)

	unclean, err := adm.ElectLeaders(ctx, kadm.ElectLiveReplica, kadm.TopicsSet{"prefer": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := unclean["prefer"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Fatalf("an unclean election of a partition with a leader: %+v", r)
	}
	set := kadm.TopicsSet{}
	for p := range int32(6) {
		set.Add("prefer", p)
	}
	results, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(6) {
		r, ok := results["prefer"][p]
		_, wasOff := off[p]
		switch {
		case !ok:
			t.Fatalf("no result for partition %d", p)
		case wasOff && r.Err != nil:
			t.Fatalf("partition %d, led by %d: %v %s", p, off[p], r.Err, r.ErrMessage)
		case !wasOff && !errors.Is(r.Err, kerr.ElectionNotNeeded):
			t.Fatalf("partition %d, led by its preferred replica: %v, want ELECTION_NOT_NEEDED", p, r.Err)
		}
	}
	poll.UntilStatus(t, 30*time.Second, "every partition led by its preferred replica", func() (bool, string) {
		off := c.notPreferred(3, "prefer")
		return len(off) == 0, fmt.Sprint(off)
	})
	// Every leader is the preferred one: nothing to elect.
	if out, err := strataCLI(t, "topic", "elect-leaders", "--brokers", c.nodes[3].addr, "prefer"); err != nil || strings.Contains(out, "elected") {
		t.Fatalf("strata topic elect-leaders with the preferred leaders in place: %v\n%s", err, out)
	}

	// Again with the CLI, every partition of the cluster.
	c.displaceLeaders(3, "prefer", 6)
	if len(c.notPreferred(1, "prefer")) == 0 {
		t.Fatal("every partition led by its preferred replica after node 3's restart")
	}
	out, err := strataCLI(t, "topic", "elect-leaders", "--brokers", c.nodes[1].addr)
	if err != nil || !strings.Contains(out, "elected") {
		t.Fatalf("strata topic elect-leaders: %v\n%s", err, out)
	}
	poll.UntilStatus(t, 30*time.Second, "every partition led by its preferred replica", func() (bool, string) {
		off := c.notPreferred(2, "prefer")
		return len(off) == 0, fmt.Sprint(off)
	})
	// The records survive the elections.
	cl := plainProducer(t, c.nodes[1].addr, "prefer", kgo.AllISRAcks(), kgo.SeedBrokers(c.seeds()...))
	for i := range 30 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
			t.Fatalf("producing after the elections: %v", err)
		}
	}
	if got := consumeN(t, c.nodes[2].addr, "prefer", 30); got != 30 {
		t.Fatalf("consumed %d of 30", got)
	}
}

// TestAutoLeaderRebalance: with auto.leader.rebalance.enable (the default)
// and a check every second, a restarted broker gets the leadership of
// the partitions it prefers back by itself.
func TestAutoLeaderRebalance(t *testing.T) {
	c := startCluster(t, 3, append(replicatedSets, "leader.imbalance.check.interval.seconds=1")...)
	c.createReplicated(1, "rebalanced", 6)
	c.waitInSync(1, "rebalanced", 6)
	c.nodes[2].kill()
	poll.UntilStatus(t, 60*time.Second, "node 2 to lead nothing", func() (bool, string) {
		for p, l := range c.leaders(1, "rebalanced") {
			if l == 2 || l < 0 {
				return false, fmt.Sprintf("partition %d led by %d", p, l)
			}
		}
		return true, ""
	})
	c.nodes[2].restart()
	poll.UntilStatus(t, 90*time.Second, "every partition led by its preferred replica again", func() (bool, string) {
		off := c.notPreferred(1, "rebalanced")
		return len(off) == 0, fmt.Sprint(off)
	})
	if !strings.Contains(c.nodes[c.controller(1)].logs.String(), "preferred leaders elected") {
		t.Fatalf("the active controller did not say it moved leaders")
	}
}

// TestUncleanElectLeaders: a partition of two replicas whose follower fell
// out of the ISR (SIGSTOP past replica.lag.time.max.ms) loses its leader
// (SIGKILL) while the follower is alive again: no clean election can be
// had, and the partition stays offline until strata topic elect-leaders
// --type unclean makes the out-of-sync follower its leader (a preferred
// election is refused). The records only the old leader had are gone; the
// ones before are read back, and the partition takes writes again.
func TestUncleanElectLeaders(t *testing.T) {
	c := startClusterRoles(t, []string{"controller", "broker", "broker", "broker"}, "broker.session.timeout.ms=3000",
		"broker.heartbeat.interval.ms=500", "replica.lag.time.max.ms=1500", "replica.fetch.wait.max.ms=100",
		"offsets.topic.replication.factor=3")
	c.waitBrokers(2, 3, 4)
	ctx := ctxTimeout(t, 120*time.Second)
	adm := kadm.NewClient(client(t, c.nodes[2].addr))
	if resp, err := adm.CreateTopic(ctx, 1, 2, nil, "unclean"); err != nil || resp.Err != nil {
		t.Fatalf("creating the topic: %v %v", err, resp.Err)
	}
	var leader, follower, other int32
	poll.UntilStatus(t, 60*time.Second, "both replicas in sync", func() (bool, string) {
		m, err := adm.Metadata(ctx, "unclean")
		if err != nil {
			return false, err.Error()
		}
		p := m.Topics["unclean"].Partitions[0]
		if len(p.Replicas) != 2 || len(p.ISR) != 2 || p.Leader < 0 {
			return false, fmt.Sprintf("replicas %v, ISR %v, leader %d", p.Replicas, p.ISR, p.Leader)
		}
		leader = p.Leader
		follower = p.Replicas[0] + p.Replicas[1] - leader
		other = 2 + 3 + 4 - leader - follower
		return true, ""
	})
	loose := plainProducer(t, c.nodes[leader].addr, "unclean", kgo.LeaderAck())
	for i := range 10 {
		if err := loose.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "kept-%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	poll.UntilStatus(t, 30*time.Second, "the follower to have the first records", func() (bool, string) {
		a, b := len(logBytes(t, c.nodes[leader].dir, "unclean", 0)), len(logBytes(t, c.nodes[follower].dir, "unclean", 0))
		return a == b, fmt.Sprint(a, b)
	})
	c.nodes[follower].cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { c.nodes[follower].cmd.Process.Signal(syscall.SIGCONT) })
	for i := range 5 {
		if err := loose.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "lost-%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	poll.UntilStatus(t, 30*time.Second, "the ISR to shrink to the leader", func() (bool, string) {
		_, isr, err := c.partitionState(other, "unclean", 0)
		return err == nil && slices.Equal(isr, []int32{leader}), fmt.Sprint(isr, err)
	})
	loose.Close()
	c.nodes[leader].kill()
	c.nodes[follower].cmd.Process.Signal(syscall.SIGCONT)
	poll.UntilStatus(t, 60*time.Second, "the follower back, the partition without a leader", func() (bool, string) {
		l, isr, elr, _, err := c.eligibleLeaders(other, "unclean", 0)
		if err != nil {
			return false, err.Error()
		}
		m, err := c.admin(other).Metadata(ctx, "unclean")
		if err != nil {
			return false, err.Error()
		}
		offline := m.Topics["unclean"].Partitions[0].OfflineReplicas
		return l < 0 && len(isr) == 0 && !slices.Contains(elr, follower) && slices.Equal(offline, []int32{leader}),
			fmt.Sprintf("leader %d, ISR %v, ELR %v, offline replicas %v", l, isr, elr, offline)
	})
	// A clean election cannot help: the preferred replica is the dead
	// leader or out of sync.
	if out, err := strataCLI(t, "topic", "elect-leaders", "--brokers", c.nodes[other].addr, "unclean:0"); err == nil {
		t.Fatalf("a preferred election of a partition with no replica in sync succeeded:\n%s", out)
	}
	out, err := strataCLI(t, "topic", "elect-leaders", "--type", "unclean", "--brokers", c.nodes[other].addr, "unclean:0")
	if err != nil || !strings.Contains(out, "elected") {
		t.Fatalf("strata topic elect-leaders --type unclean: %v\n%s", err, out)
	}
	poll.UntilStatus(t, 30*time.Second, "the follower to lead", func() (bool, string) {
		for _, via := range []int32{other, follower} {
			l, isr, err := c.partitionState(via, "unclean", 0)
			if err != nil || l != follower || !slices.Equal(isr, []int32{follower}) {
				return false, fmt.Sprintf("node %d: leader %d, ISR %v, %v", via, l, isr, err)
			}
		}
		return true, ""
	})
	// The kept records, then what of the lost ones the follower had
	// fetched before it stopped (a fetch answered as it was stopped may
	// have brought it some), never all: the leader had more, or the
	// follower would have stayed in the ISR.
	got := readAll(t, ctx, c.nodes[follower].addr, "unclean")[0]
	if len(got) < 10 || len(got) >= 15 {
		t.Fatalf("read %d records after the unclean election, want the 10 kept and fewer than all 5 lost", len(got))
	}
	for i, r := range got {
		want := fmt.Sprintf("kept-%d", i)
		if i >= 10 {
			want = fmt.Sprintf("lost-%d", i-10)
		}
		if string(r.Value) != want {
			t.Fatalf("offset %d holds %s, want %s", r.Offset, r.Value, want)
		}
	}
	t.Logf("the unclean election lost %d of the 15 acknowledged records", 15-len(got))
	after := plainProducer(t, c.nodes[follower].addr, "unclean", kgo.AllISRAcks())
	if err := after.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("producing after the unclean election: %v", err)
	}
}
