package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// eligibleLeaders returns a partition's leader, ISR, ELR and last known
// ELR as node via answers DescribeTopicPartitions.
func (c *cluster) eligibleLeaders(via int32, topic string, partition int32) (leader int32, isr, elr, lastKnown []int32, err error) {
	req := kmsg.NewPtrDescribeTopicPartitionsRequest()
	rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
	rt.Topic = topic
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, client(c.t, c.nodes[via].addr))
	if err != nil {
		return -1, nil, nil, nil, err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Partition == partition {
				return p.LeaderID, p.ISR, p.EligibleLeaderReplicas, p.LastKnownELR, nil
			}
		}
	}
	return -1, nil, nil, nil, fmt.Errorf("no partition %s/%d in the answer", topic, partition)
}

// sorted returns the ids in increasing order, as a new slice.
func sorted(ids ...int32) []int32 {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return ids
}

// TestEligibleLeaderReplicas is KIP-966's scenario on real processes: ISR
// {L, F1, F2}, min.insync.replicas=2. F1 stops cleanly (the ISR, {L, F2},
// still meets min.insync.replicas, and more records are committed without
// F1); F2 stops cleanly (the ISR {L} is below it: F2 becomes an eligible
// leader replica, and the high watermark stops). L crashes and loses its
// unflushed tail: the records committed while F1 was away (its data
// directory is cut back to what F1 has, as a power loss would leave it).
// All three return: L registers after an unclean shutdown and is no longer
// eligible, F2 leads from the ELR, and every committed record is read
// back. Before KIP-966, L, the last in-sync replica, led again and the
// records were lost.
func TestEligibleLeaderReplicas(t *testing.T) {
	// The quorum is node 1 alone, a controller only, so that stopping two
	// brokers leaves it whole.
	c := startClusterRoles(t, []string{"controller", "broker", "broker", "broker"}, "broker.session.timeout.ms=3000",
		"broker.heartbeat.interval.ms=500", "replica.fetch.wait.max.ms=100", "offsets.topic.replication.factor=3")
	c.waitBrokers(2, 3, 4)
	c.createReplicated(2, "elr", 1)
	c.waitInSync(2, "elr", 1)
	ctx := ctxTimeout(t, 180*time.Second)
	leader, _, _ := c.partitionEpoch(2, "elr", 0)
	var followers []int32
	for id := int32(2); id <= 4; id++ {
		if id != leader {
			followers = append(followers, id)
		}
	}
	f1, f2 := followers[0], followers[1]
	// Idempotent: a retry (a produce waiting while the ISR changes) is
	// not written twice.
	strict := client(t, c.nodes[leader].addr, kgo.DefaultProduceTopic("elr"), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(0))
	produce := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			if err := strict.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%s-%03d", prefix, i)}).FirstErr(); err != nil {
				t.Fatalf("acks=all record %s-%d: %v", prefix, i, err)
			}
		}
	}
	produce("all-three", 50)
	poll.UntilStatus(t, 30*time.Second, "every replica to have the first records", func() (bool, string) {
		sizes := map[int]bool{}
		for _, id := range []int32{leader, f1, f2} {
			sizes[len(logBytes(t, c.nodes[id].dir, "elr", 0))] = true
		}
		return len(sizes) == 1, fmt.Sprint(sizes)
	})

	c.nodes[f1].stop()
	poll.UntilStatus(t, 30*time.Second, "the ISR without F1", func() (bool, string) {
		_, isr, elr, _, err := c.eligibleLeaders(leader, "elr", 0)
		return err == nil && len(isr) == 2 && !slices.Contains(isr, f1) && len(elr) == 0, fmt.Sprint(isr, elr, err)
	})
	// Committed with L and F2 only: what L will lose.
	produce("without-f1", 50)
	c.nodes[f2].stop()
	poll.UntilStatus(t, 30*time.Second, "the ISR at the leader alone, F2 eligible", func() (bool, string) {
		_, isr, elr, _, err := c.eligibleLeaders(leader, "elr", 0)
		return err == nil && slices.Equal(isr, []int32{leader}) && slices.Equal(elr, []int32{f2}), fmt.Sprint(isr, elr, err)
	})
	refused := plainProducer(t, c.nodes[leader].addr, "elr", kgo.AllISRAcks(), kgo.RecordRetries(0))
	if err := refused.ProduceSync(ctx, &kgo.Record{Value: []byte("refused")}).FirstErr(); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all under min.insync.replicas: %v, want NOT_ENOUGH_REPLICAS", err)
	}
	strict.Close()
	refused.Close()

	// The leader crashes and loses what F1 lacks: its log is cut back to
	// F1's length, its indexes, producer snapshots and high watermark go
	// (recovery rebuilds them from the log).
	kept := len(logBytes(t, c.nodes[f1].dir, "elr", 0))
	c.nodes[leader].kill()
	dir := filepath.Join(c.nodes[leader].dir, "elr-0")
	segments, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(segments) != 1 {
		t.Fatalf("the leader has segments %v", segments)
	}
	if err := os.Truncate(segments[0], int64(kept)); err != nil {
		t.Fatal(err)
	}
	for _, pattern := range []string{"*.index", "*.timeindex", "*.snapshot"} {
		names, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, n := range names {
			os.Remove(n)
		}
	}
	os.Remove(filepath.Join(c.nodes[leader].dir, "replication-offset-checkpoint"))

	// F1 returns first: it was not eligible, so the partition has no
	// leader; L and F2 are eligible, L the last leader.
	c.nodes[f1].restart()
	poll.UntilStatus(t, 60*time.Second, "the partition without a leader, L and F2 eligible", func() (bool, string) {
		l, isr, elr, last, err := c.eligibleLeaders(f1, "elr", 0)
		return err == nil && l < 0 && len(isr) == 0 && slices.Equal(sorted(elr...), sorted(leader, f2)) && slices.Equal(last, []int32{leader}),
			fmt.Sprint(l, isr, elr, last, err)
	})
	// Then L, which may not lead (its shutdown was unclean), and F2.
	c.nodes[leader].restart()
	c.nodes[f2].restart()
	c.waitBrokers(2, 3, 4)
	poll.UntilStatus(t, 60*time.Second, "F2 to lead", func() (bool, string) {
		l, isr, elr, _, err := c.eligibleLeaders(f1, "elr", 0)
		return err == nil && l == f2, fmt.Sprint(l, isr, elr, err)
	})
	c.waitInSync(f2, "elr", 1)
	got := readAll(t, ctx, c.nodes[f2].addr, "elr")[0]
	if len(got) != 100 {
		var values []string
		for _, r := range got {
			values = append(values, fmt.Sprintf("%d:%s", r.Offset, r.Value))
		}
		t.Fatalf("read %d records after the crash, want the 100 committed: %v", len(got), values)
	}
	for i, r := range got {
		want := fmt.Sprintf("all-three-%03d", i)
		if i >= 50 {
			want = fmt.Sprintf("without-f1-%03d", i-50)
		}
		if string(r.Value) != want {
			t.Fatalf("offset %d holds %s, want %s", r.Offset, r.Value, want)
		}
	}
}
