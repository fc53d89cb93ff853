package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// alterConfigs sets (value non-nil) or deletes configuration keys of a
// topic or, with topic "", of a broker, and fails the test on any error.
func (c *cluster) alterConfigs(topic string, broker int32, kvs map[string]*string) {
	c.t.Helper()
	var alters []kadm.AlterConfig
	for k, v := range kvs {
		op := kadm.SetConfig
		if v == nil {
			op = kadm.DeleteConfig
		}
		alters = append(alters, kadm.AlterConfig{Op: op, Name: k, Value: v})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var resp kadm.AlterConfigsResponses
	var err error
	if topic != "" {
		resp, err = c.admin(1).AlterTopicConfigs(ctx, alters, topic)
	} else {
		resp, err = c.admin(1).AlterBrokerConfigs(ctx, alters, broker)
	}
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = fmt.Errorf("%s: %w (%s)", r.Name, r.Err, r.ErrMessage)
			}
		}
	}
	if err != nil {
		c.t.Fatalf("altering configs %v: %v", kvs, err)
	}
}

// TestReplicationThrottles moves a partition from {1,2} to {1,2,3} under
// replication throttles at one byte a second: with the topic's
// leader.replication.throttled.replicas naming its leader, the leader holds
// back what the new replica (outside the ISR) fetches; with
// follower.replication.throttled.replicas naming the new replica, its
// fetcher holds back itself; each shows in its broker's throttled-reads
// counter while the reassignment stays in progress. Lifted, the move
// completes with the three logs byte-identical.
func TestReplicationThrottles(t *testing.T) {
	admin := map[int32]string{}
	for id := int32(1); id <= 3; id++ {
		admin[id] = "127.0.0.1:" + freePort(t)
	}
	c := startClusterWith(t, []string{"broker,controller", "broker,controller", "broker,controller"},
		func(id int32, _ string) ([]string, []string) {
			return nil, []string{"strata.admin.listener=" + admin[id]}
		},
		append(replicatedSets, "replica.fetch.max.bytes=65536")...)
	c.waitBrokers(1, 2, 3)
	const topic = "throttled"
	c.createAssigned(1, topic, []int32{1, 2})
	ctx := ctxTimeout(t, 120*time.Second)
	cl := client(t, c.nodes[1].addr, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(16<<10),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	value := bytes.Repeat([]byte("t"), 1000)
	const n = 1000 // 1 MB: sixteen fetches of replica.fetch.max.bytes
	for range n {
		cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	one, max := "1", "9223372036854775807"
	held := func(id int32, side string) float64 {
		return scrape(admin[id], fmt.Sprintf(`strata_replication_throttled_reads_total{side=%q}`, side))
	}
	inProgress := func() {
		t.Helper()
		listed, err := c.admin(1).ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}}})
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := listed[topic][0]; !ok || !slices.Equal(r.AddingReplicas, []int32{3}) {
			t.Fatalf("the move is not in progress: %+v (%v)", r, ok)
		}
	}

	// The leader's throttle.
	leaderList := "0:1,0:2"
	c.alterConfigs(topic, 0, map[string]*string{"leader.replication.throttled.replicas": &leaderList})
	c.alterConfigs("", 1, map[string]*string{"leader.replication.throttled.rate": &one})
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, 0, []int32{1, 2, 3})
	if resp, err := c.admin(2).AlterPartitionAssignments(ctx, req); err != nil || resp.Error() != nil {
		t.Fatalf("reassigning: %v %v", err, resp.Error())
	}
	poll.UntilStatus(t, 30*time.Second, "the leader to hold back the new replica", func() (bool, string) {
		h := held(1, "leader")
		return h > 0, fmt.Sprint(h)
	})
	inProgress()

	// The follower's throttle, in place before the leader's is lifted.
	followerList := "0:3"
	c.alterConfigs(topic, 0, map[string]*string{"follower.replication.throttled.replicas": &followerList})
	c.alterConfigs("", 3, map[string]*string{"follower.replication.throttled.rate": &one})
	poll.UntilStatus(t, 30*time.Second, "node 3 to know its throttle", func() (bool, string) {
		rc, err := c.admin(3).DescribeBrokerConfigs(ctx, 3)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range rc {
			for _, cfg := range r.Configs {
				if cfg.Key == "follower.replication.throttled.rate" && cfg.Value != nil && *cfg.Value == "1" {
					return true, ""
				}
			}
		}
		return false, fmt.Sprint(rc)
	})
	c.alterConfigs("", 1, map[string]*string{"leader.replication.throttled.rate": &max})
	poll.UntilStatus(t, 30*time.Second, "the new replica to hold itself back", func() (bool, string) {
		h := held(3, "follower")
		return h > 0, fmt.Sprint(h)
	})
	inProgress()

	// Lifted: the move completes.
	c.alterConfigs("", 3, map[string]*string{"follower.replication.throttled.rate": nil})
	c.alterConfigs(topic, 0, map[string]*string{"leader.replication.throttled.replicas": nil, "follower.replication.throttled.replicas": nil})
	poll.UntilStatus(t, 60*time.Second, "the move to complete", func() (bool, string) {
		replicas, isr, err := c.replicasOf(1, topic)
		if err != nil {
			return false, err.Error()
		}
		return slices.Equal(replicas[0], []int32{1, 2, 3}) && slices.Equal(isr[0], []int32{1, 2, 3}), fmt.Sprint(replicas, isr)
	})
	c.checkIdenticalLogs(topic, 1)
}
