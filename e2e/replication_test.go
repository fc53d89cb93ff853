package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// longReplication runs the replication tests at the length (five
// hard and five clean bounces); CI runs one of each.
var longReplication = flag.Bool("replication.long", false, "run the replication failover tests at full length")

// replicatedSets are the settings of a cluster whose failures tests cause:
// a killed broker is fenced within seconds.
var replicatedSets = []string{"broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500",
	"replica.fetch.wait.max.ms=100", "offsets.topic.replication.factor=3"}

// seeds returns every broker's address, for clients that outlive any one.
func (c *cluster) seeds() []string {
	var out []string
	for id := int32(1); int(id) <= len(c.nodes); id++ {
		out = append(out, c.nodes[id].addr)
	}
	return out
}

// alive returns a node that is running, other than not.
func (c *cluster) alive(not int32) int32 {
	for id := int32(1); int(id) <= len(c.nodes); id++ {
		if p := c.nodes[id]; id != not && p.cmd != nil && p.cmd.ProcessState == nil {
			return id
		}
	}
	c.t.Fatal("no node alive")
	return -1
}

// partitionState is a partition's leader and ISR as node via reports them.
func (c *cluster) partitionState(via int32, topic string, partition int32) (leader int32, isr []int32, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.admin(via).Metadata(ctx, topic)
	if err != nil {
		return -1, nil, err
	}
	p, ok := m.Topics[topic].Partitions[partition]
	if !ok {
		return -1, nil, fmt.Errorf("no partition %s/%d", topic, partition)
	}
	isr = slices.Clone(p.ISR)
	slices.Sort(isr)
	return p.Leader, isr, nil
}

// waitInSync waits until every partition of topic has a leader and all
// three replicas in its ISR.
func (c *cluster) waitInSync(via int32, topic string, partitions int32) {
	c.t.Helper()
	poll.UntilStatus(c.t, 90*time.Second, topic+" fully in sync", func() (bool, string) {
		for p := range partitions {
			leader, isr, err := c.partitionState(via, topic, p)
			if err != nil || leader < 0 || len(isr) != 3 {
				return false, fmt.Sprintf("partition %d: leader %d, ISR %v, %v", p, leader, isr, err)
			}
		}
		return true, ""
	})
}

// createReplicated creates topic with RF 3 and min.insync.replicas=2.
func (c *cluster) createReplicated(via int32, topic string, partitions int32) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	two := "2"
	resp, err := c.admin(via).CreateTopic(ctx, partitions, 3, map[string]*string{"min.insync.replicas": &two}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		c.t.Fatalf("creating %s: %v", topic, err)
	}
}

// logBytes returns the batches of a partition's log in a node's data
// directory, every segment in order, as stored.
func logBytes(t testing.TB, dir, topic string, partition int32) []byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, fmt.Sprintf("%s-%d", topic, partition), "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	var out []byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// TestReplicationRF3 replicates a topic over three real processes: an
// acks=all producer is answered, every replica's log holds the same bytes,
// and the ISR is all three.
func TestReplicationRF3(t *testing.T) {
	c := startCluster(t, 3, replicatedSets...)
	c.createReplicated(1, "rf3", 3)
	c.waitInSync(2, "rf3", 3)
	cl := franzIdempotentProducer(t, c.nodes[1].addr)
	ctx := ctxTimeout(t, 60*time.Second)
	const n = 3000
	acks := newAckTracker(n)
	if err := produceSequenced(ctx, cl, "rf3", 3, n, acks); err != nil {
		t.Fatal(err)
	}
	acks.waitSettled(t, ctx)
	acks.check(t)
	checkExactlyOnce(t, readAll(t, ctx, c.nodes[3].addr, "rf3"), perPartition(n, 3))
	c.waitInSync(1, "rf3", 3)
	c.checkIdenticalLogs("rf3", 3)
}

// checkIdenticalLogs stops every node cleanly once the replicas have
// converged, and compares their logs of each partition byte for byte.
func (c *cluster) checkIdenticalLogs(topic string, partitions int32) {
	c.t.Helper()
	c.checkIdenticalLogsOn(topic, partitions, ids(len(c.nodes))...)
}

// checkIdenticalLogsOn is checkIdenticalLogs over the nodes that hold the
// replicas (the first is the reference); it stops every node.
func (c *cluster) checkIdenticalLogsOn(topic string, partitions int32, nodes ...int32) {
	c.t.Helper()
	// Converged: every replica's log ends where the leader's does.
	poll.UntilStatus(c.t, 60*time.Second, "the replicas' logs to converge", func() (bool, string) {
		for p := range partitions {
			ends := map[int64]bool{}
			for _, id := range nodes {
				ends[int64(len(logBytes(c.t, c.nodes[id].dir, topic, p)))] = true
			}
			if len(ends) != 1 {
				return false, fmt.Sprintf("partition %d: log sizes %v", p, ends)
			}
		}
		return true, ""
	})
	for id := int32(1); int(id) <= len(c.nodes); id++ {
		c.nodes[id].stop()
	}
	first := nodes[0]
	for p := range partitions {
		want := logBytes(c.t, c.nodes[first].dir, topic, p)
		if len(want) == 0 {
			c.t.Fatalf("partition %d: node %d's log is empty", p, first)
		}
		for _, id := range nodes[1:] {
			if got := logBytes(c.t, c.nodes[id].dir, topic, p); !bytes.Equal(got, want) {
				c.t.Fatalf("partition %d: node %d's log (%d bytes) differs from node %d's (%d bytes)", p, id, len(got), first, len(want))
			}
		}
	}
}

// bounce stops the leader of topic's partition 0 (SIGKILL when hard,
// SIGTERM otherwise), waits for another replica to lead it, and starts
// the old leader again. It returns the node bounced.
func (c *cluster) bounce(topic string, hard bool) int32 { return c.bouncePartition(topic, 0, hard) }

// bouncePartition is bounce for the leader of topic's partition.
func (c *cluster) bouncePartition(topic string, partition int32, hard bool) int32 {
	c.t.Helper()
	via := c.alive(-1)
	leader, _, err := c.partitionState(via, topic, partition)
	if err != nil || leader < 0 {
		c.t.Fatalf("no leader of %s/%d: %v", topic, partition, err)
	}
	if hard {
		c.nodes[leader].kill()
	} else {
		c.nodes[leader].stop()
	}
	via = c.alive(leader)
	poll.UntilStatus(c.t, 60*time.Second, fmt.Sprintf("a new leader of %s/%d after node %d went", topic, partition, leader), func() (bool, string) {
		l, isr, err := c.partitionState(via, topic, partition)
		return err == nil && l >= 0 && l != leader, fmt.Sprintf("leader %d, ISR %v, %v", l, isr, err)
	})
	c.nodes[leader].restart()
	return leader
}

// TestReplicationBounces produces with an idempotent acks=all producer
// while the leader of partition 0 is killed (SIGKILL) and then stopped
// cleanly, each time rejoining: every acknowledged record is read back
// once, in order, and the three logs end byte-identical (Kafka's
// replication_test "hard bounce" and "clean bounce").
func TestReplicationBounces(t *testing.T) {
	bounces := 1
	if *longReplication {
		bounces = 5
	}
	c := startCluster(t, 3, replicatedSets...)
	c.createReplicated(1, "bounced", 3)
	c.waitInSync(1, "bounced", 3)
	cl := franzIdempotentProducer(t, c.nodes[1].addr, kgo.SeedBrokers(c.seeds()...))
	n := 4000 * (2*bounces + 1)
	var milestones []int64
	for i := range 2 * bounces {
		milestones = append(milestones, int64(n*(i+1)/(2*bounces+1)))
	}
	acks := newAckTracker(n, milestones...)
	ctx := ctxTimeout(t, time.Duration(60+60*bounces)*time.Second)
	produced := make(chan error, 1)
	go func() { produced <- produceSequenced(ctx, cl, "bounced", 3, n, acks) }()
	for i, m := range milestones {
		acks.wait(t, ctx, m)
		hard := i < bounces
		node := c.bounce("bounced", hard)
		t.Logf("bounce %d (hard %v): node %d, %d records acknowledged", i+1, hard, node, acks.acked.Load())
		c.waitInSync(c.alive(-1), "bounced", 3)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	acks.waitSettled(t, ctx)
	acks.check(t)
	checkExactlyOnce(t, readAll(t, ctx, c.nodes[c.alive(-1)].addr, "bounced"), perPartition(n, 3))
	c.checkIdenticalLogs("bounced", 3)
}

// TestISRShrinkAndExpand pauses both followers of a partition with SIGSTOP
// past replica.lag.time.max.ms: the leader drops them from the ISR through
// the controller, acks=all produces fail with NOT_ENOUGH_REPLICAS at the
// client while acks=1 ones succeed; after SIGCONT they catch up, rejoin
// the ISR, and acks=all succeeds again.
func TestISRShrinkAndExpand(t *testing.T) {
	// Fencing slower than the lag, so that the leader's own ISR check,
	// not the controller's fencing, removes the paused followers.
	// The quorum is node 1 alone, a controller only, so that pausing two
	// brokers leaves it whole.
	c := startClusterRoles(t, []string{"controller", "broker", "broker", "broker"}, "broker.session.timeout.ms=30000",
		"broker.heartbeat.interval.ms=500", "replica.lag.time.max.ms=1500", "replica.fetch.wait.max.ms=100",
		"offsets.topic.replication.factor=3")
	c.waitBrokers(2, 3, 4)
	c.createReplicated(2, "paused", 1)
	c.waitInSync(2, "paused", 1)
	leader, _, err := c.partitionState(2, "paused", 0)
	if err != nil {
		t.Fatal(err)
	}
	var followers []int32
	for id := int32(2); id <= 4; id++ {
		if id != leader {
			followers = append(followers, id)
		}
	}
	for _, id := range followers {
		c.nodes[id].cmd.Process.Signal(syscall.SIGSTOP)
	}
	t.Cleanup(func() {
		for _, id := range followers {
			c.nodes[id].cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	// A follower whose log ends where the leader's does is in sync
	// however long it is silent (Kafka's isCaughtUp): a record makes the
	// paused ones fall behind.
	addr := c.nodes[leader].addr
	ctx := ctxTimeout(t, 90*time.Second)
	loose := client(t, addr, kgo.DefaultProduceTopic("paused"), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if err := loose.ProduceSync(ctx, &kgo.Record{Value: []byte("behind")}).FirstErr(); err != nil {
		t.Fatalf("acks=1 with the followers paused: %v", err)
	}
	poll.UntilStatus(t, 30*time.Second, "the ISR to shrink to the leader", func() (bool, string) {
		_, isr, err := c.partitionState(leader, "paused", 0)
		return err == nil && slices.Equal(isr, []int32{leader}), fmt.Sprint(isr, err)
	})
	strict := client(t, addr, kgo.DefaultProduceTopic("paused"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DisableIdempotentWrite(), kgo.RecordRetries(0))
	if err := strict.ProduceSync(ctx, &kgo.Record{Value: []byte("refused")}).FirstErr(); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all with the ISR below min.insync.replicas: %v, want NOT_ENOUGH_REPLICAS", err)
	}
	if err := loose.ProduceSync(ctx, &kgo.Record{Value: []byte("leader only")}).FirstErr(); err != nil {
		t.Fatalf("acks=1 with the ISR at the leader: %v", err)
	}

	for _, id := range followers {
		c.nodes[id].cmd.Process.Signal(syscall.SIGCONT)
	}
	c.waitInSync(leader, "paused", 1)
	if err := strict.ProduceSync(ctx, &kgo.Record{Value: []byte("accepted")}).FirstErr(); err != nil {
		t.Fatalf("acks=all once the ISR is whole again: %v", err)
	}
	got := readAll(t, ctx, addr, "paused")[0]
	if len(got) != 3 || string(got[0].Value) != "behind" || string(got[1].Value) != "leader only" || string(got[2].Value) != "accepted" {
		t.Fatalf("read back %d records", len(got))
	}
}

// TestCommittedOffsetsSurviveCoordinatorKill commits a group's offsets,
// kills the group coordinator's node (SIGKILL) and reads them back through
// another: with offsets.topic.replication.factor=3 the new leader of the
// group's __consumer_offsets partition coordinates it with every commit
// that was acknowledged.
func TestCommittedOffsetsSurviveCoordinatorKill(t *testing.T) {
	c := startCluster(t, 3, replicatedSets...)
	c.createReplicated(1, "orders", 4)
	c.waitInSync(1, "orders", 4)
	ctx := ctxTimeout(t, 90*time.Second)
	adm := kadm.NewClient(client(t, c.nodes[1].addr, kgo.SeedBrokers(c.seeds()...)))
	var offsets kadm.Offsets
	for round := range 20 {
		offsets = kadm.Offsets{}
		for p := int32(0); p < 4; p++ {
			offsets.Add(kadm.Offset{Topic: "orders", Partition: p, At: int64(100*round) + int64(p), LeaderEpoch: -1})
		}
		resp, err := adm.CommitOffsets(ctx, "billing", offsets)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("commit %d: %v", round, err)
		}
	}
	coord := adm.FindGroupCoordinators(ctx, "billing")["billing"]
	if coord.Err != nil {
		t.Fatalf("finding the coordinator: %v", coord.Err)
	}
	coordinator := coord.NodeID
	c.nodes[coordinator].kill()
	survivor := c.alive(coordinator)
	asker := client(t, c.nodes[survivor].addr)
	poll.UntilStatus(t, 60*time.Second, "the committed offsets through a new coordinator", func() (bool, string) {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		// The coordinator as the survivor names it, asked directly.
		find := kmsg.NewPtrFindCoordinatorRequest()
		find.CoordinatorKey = "billing"
		find.CoordinatorKeys = []string{"billing"}
		found, err := find.RequestWith(fctx, asker)
		if err != nil {
			return false, err.Error()
		}
		node, code := found.NodeID, found.ErrorCode
		if len(found.Coordinators) == 1 {
			node, code = found.Coordinators[0].NodeID, found.Coordinators[0].ErrorCode
		}
		if code != 0 || node == coordinator || c.nodes[node] == nil {
			return false, fmt.Sprintf("coordinator %d, error %d", node, code)
		}
		got, err := kadm.NewClient(client(t, c.nodes[node].addr)).FetchOffsets(fctx, "billing")
		if err != nil || got.Error() != nil {
			return false, fmt.Sprint(err, got.Error())
		}
		for p := int32(0); p < 4; p++ {
			o, ok := got.Lookup("orders", p)
			want, _ := offsets.Lookup("orders", p)
			if !ok || o.At != want.At {
				return false, fmt.Sprintf("partition %d at %d, want %d", p, o.At, want.At)
			}
		}
		return true, ""
	})
	c.nodes[coordinator].restart()
}
