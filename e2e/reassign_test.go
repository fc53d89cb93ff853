package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// createAssigned creates topic with the replicas given per partition and
// min.insync.replicas=2.
func (c *cluster) createAssigned(via int32, topic string, assignment ...[]int32) {
	c.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	for p, replicas := range assignment {
		a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		a.Partition, a.Replicas = int32(p), replicas
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
	}
	cfg := kmsg.NewCreateTopicsRequestTopicConfig()
	two := "2"
	cfg.Name, cfg.Value = "min.insync.replicas", &two
	rt.Configs = append(rt.Configs, cfg)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, client(c.t, c.nodes[via].addr))
	if err != nil {
		c.t.Fatal(err)
	}
	if code := resp.Topics[0].ErrorCode; code != 0 {
		c.t.Fatalf("creating %s: error %d", topic, code)
	}
}

// replicasOf returns each partition's replicas and ISR (sorted) as node
// via reports them.
func (c *cluster) replicasOf(via int32, topic string) (replicas, isr map[int32][]int32, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.admin(via).Metadata(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	replicas, isr = map[int32][]int32{}, map[int32][]int32{}
	for _, p := range m.Topics[topic].Partitions {
		replicas[p.Partition] = slices.Sorted(slices.Values(p.Replicas))
		isr[p.Partition] = slices.Sorted(slices.Values(p.ISR))
	}
	return replicas, isr, nil
}

// TestReassignmentUnderLoad moves a topic's three partitions from brokers
// {1,2,3} to {2,3,4} (a fourth process) with kadm while an idempotent
// acks=all producer writes to them: while 4 is paused (SIGSTOP) the
// reassignments are listed in progress, adding 4 and removing 1; once it
// runs again they complete, the partitions are on {2,3,4} with all three
// in sync, node 1 has deleted its copies, every acknowledged record is read
// back exactly once, in order, and the three replicas' logs are
// byte-identical.
func TestReassignmentUnderLoad(t *testing.T) {
	c := startClusterRoles(t, []string{"broker,controller", "broker,controller", "broker,controller", "broker"}, replicatedSets...)
	c.waitBrokers(1, 2, 3, 4)
	const topic = "moved"
	c.createAssigned(1, topic, []int32{1, 2, 3}, []int32{2, 3, 1}, []int32{3, 1, 2})
	c.waitInSync(2, topic, 3)

	cl := franzIdempotentProducer(t, c.nodes[2].addr, kgo.SeedBrokers(c.nodes[2].addr, c.nodes[3].addr))
	const n = 12000
	acks := newAckTracker(n, n/4)
	ctx := ctxTimeout(t, 180*time.Second)
	produced := make(chan error, 1)
	go func() { produced <- produceSequenced(ctx, cl, topic, 3, n, acks) }()
	acks.wait(t, ctx, n/4)

	c.nodes[4].cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { c.nodes[4].cmd.Process.Signal(syscall.SIGCONT) })
	adm := c.admin(2)
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, 0, []int32{2, 3, 4})
	req.Assign(topic, 1, []int32{3, 4, 2})
	req.Assign(topic, 2, []int32{4, 2, 3})
	resps, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := resps.Error(); err != nil {
		t.Fatalf("AlterPartitionReassignments: %v", err)
	}
	listed, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}, 2: {}}})
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(3) {
		r, ok := listed[topic][p]
		if !ok || !slices.Equal(r.AddingReplicas, []int32{4}) || !slices.Equal(r.RemovingReplicas, []int32{1}) || len(r.Replicas) != 4 {
			t.Fatalf("partition %d listed as %+v (ok %v), want adding [4] removing [1] while 4 is paused", p, r, ok)
		}
	}
	c.nodes[4].cmd.Process.Signal(syscall.SIGCONT)

	poll.UntilStatus(t, 90*time.Second, "the reassignments to complete", func() (bool, string) {
		listed, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}, 1: {}, 2: {}}})
		if err != nil || len(listed[topic]) > 0 {
			return false, fmt.Sprint(listed, err)
		}
		replicas, isr, err := c.replicasOf(4, topic)
		if err != nil {
			return false, err.Error()
		}
		for p := range int32(3) {
			if !slices.Equal(replicas[p], []int32{2, 3, 4}) || !slices.Equal(isr[p], []int32{2, 3, 4}) {
				return false, fmt.Sprintf("partition %d: replicas %v, ISR %v", p, replicas[p], isr[p])
			}
		}
		return true, ""
	})
	// Deleted as Kafka deletes a log: renamed to a -delete directory at
	// once, removed after file.delete.delay.ms.
	poll.UntilStatus(t, 30*time.Second, "node 1 to delete its replicas", func() (bool, string) {
		for p := range 3 {
			if _, err := os.Stat(filepath.Join(c.nodes[1].dir, fmt.Sprintf("%s-%d", topic, p))); !errors.Is(err, fs.ErrNotExist) {
				return false, fmt.Sprintf("partition %d: %v", p, err)
			}
		}
		return true, ""
	})

	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	acks.waitSettled(t, ctx)
	acks.check(t)
	// A new leader's high watermark starts where it knew the old one's,
	// and reaches what the old leader acknowledged once its followers
	// fetch again: read once it has.
	want := perPartition(n, 3)
	poll.UntilStatus(t, 30*time.Second, "the high watermarks to pass every acknowledged record", func() (bool, string) {
		listed, err := c.admin(4).ListEndOffsets(ctx, topic)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			return false, err.Error()
		}
		for p, n := range want {
			if o, _ := listed.Lookup(topic, p); o.Offset < int64(n) {
				return false, fmt.Sprintf("partition %d ends at %d", p, o.Offset)
			}
		}
		return true, ""
	})
	checkExactlyOnce(t, readAll(t, ctx, c.nodes[4].addr, topic), want)
	c.checkIdenticalLogsOn(topic, 3, 2, 3, 4)
}
