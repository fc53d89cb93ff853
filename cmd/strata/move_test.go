package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestTopicMove moves a partition with the plan kafka-reassign-partitions.sh
// takes, on three real nodes: a move to the broker that had no replica
// completes (--status says done, describe shows the new replicas); a move
// to a broker that was shut down shows in progress in --status and is
// reverted by --cancel. Bad plans and refusals are one-line errors.
func TestTopicMove(t *testing.T) {
	c := startThreeNodes(t)
	all := c.seeds()
	ok(t, "", "topic", "create", "movable", "--partitions", "1", "--replicas", "2", "--brokers", all)
	var desc []topicDescription
	poll.UntilStatus(t, 30*time.Second, "every node to know the topic", func() (bool, string) {
		for id := int32(1); id <= 3; id++ {
			r := cli(t, "", "topic", "describe", "movable", "--format", "json", "--brokers", c.addr(id))
			if r.code != 0 {
				return false, r.stderr
			}
			desc = decode[[]topicDescription](t, r.stdout)
		}
		return true, ""
	})
	placed := desc[0].Partitions[0].Replicas
	var fresh int32 = 1
	for slices.Contains(placed, fresh) {
		fresh++
	}
	plan := func(replicas ...int32) string {
		return fmt.Sprintf(`{"version":1,"partitions":[{"topic":"movable","partition":0,"replicas":%s,"log_dirs":[%s]}]}`,
			ints(replicas), strings.TrimSuffix(strings.Repeat(`"any",`, len(replicas)), ","))
	}
	ok(t, "before the move\n", "topic", "produce", "movable", "--brokers", all)

	// To {fresh, placed[0]}, from a file: done once fresh is in sync.
	moved := []int32{fresh, placed[0]}
	file := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(file, []byte(plan(moved...)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := ok(t, "", "topic", "move", file, "--throttle", "100000000", "--brokers", all)
	if out != fmt.Sprintf("throttled to 100000000 bytes a second\nmoving movable-0 to %s\n", ints(moved)) {
		t.Fatalf("move: %q", out)
	}
	// Throttled as kafka-reassign-partitions.sh --throttle does: the
	// current replicas on the leader's side, the new one on the
	// follower's, the rate on the three brokers involved.
	throttles := func() (topic map[string]string, brokers map[int32]map[string]string) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(all, ",")...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		topic, brokers = map[string]string{}, map[int32]map[string]string{}
		tc, err := adm.DescribeTopicConfigs(ctx, "movable")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range tc {
			for _, c := range r.Configs {
				if strings.Contains(c.Key, "throttled") && c.Source == kmsg.ConfigSourceDynamicTopicConfig {
					topic[c.Key] = *c.Value
				}
			}
		}
		for id := int32(1); id <= 3; id++ {
			bc, err := adm.DescribeBrokerConfigs(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range bc {
				for _, c := range r.Configs {
					if strings.Contains(c.Key, "throttled") && c.Source == kmsg.ConfigSourceDynamicBrokerConfig {
						if brokers[id] == nil {
							brokers[id] = map[string]string{}
						}
						brokers[id][c.Key] = *c.Value
					}
				}
			}
		}
		return topic, brokers
	}
	var topicThrottles map[string]string
	var brokerThrottles map[int32]map[string]string
	poll.UntilStatus(t, 30*time.Second, "every broker to know the throttles", func() (bool, string) {
		topicThrottles, brokerThrottles = throttles()
		return len(topicThrottles) == 2 && len(brokerThrottles) == 3, fmt.Sprintf("topic %v, brokers %v", topicThrottles, brokerThrottles)
	})
	wantLeaders := fmt.Sprintf("0:%d,0:%d", placed[0], placed[1])
	if topicThrottles["leader.replication.throttled.replicas"] != wantLeaders ||
		topicThrottles["follower.replication.throttled.replicas"] != fmt.Sprintf("0:%d", fresh) || len(brokerThrottles) != 3 ||
		brokerThrottles[fresh]["follower.replication.throttled.rate"] != "100000000" || brokerThrottles[placed[0]]["leader.replication.throttled.rate"] != "100000000" {
		t.Fatalf("throttles: topic %v, brokers %v", topicThrottles, brokerThrottles)
	}
	poll.UntilStatus(t, 60*time.Second, "the move to complete", func() (bool, string) {
		r := cli(t, "", "topic", "move", file, "--status", "--brokers", all)
		return r.code == 0 && r.stdout == fmt.Sprintf("movable-0 done: replicas %s\nreplication throttles removed\n", ints(moved)), r.stdout + r.stderr
	})
	// Gone, once every broker's metadata has the change.
	poll.UntilStatus(t, 30*time.Second, "the throttles to be removed", func() (bool, string) {
		topicThrottles, brokerThrottles = throttles()
		return len(topicThrottles) == 0 && len(brokerThrottles) == 0, fmt.Sprintf("topic %v, brokers %v", topicThrottles, brokerThrottles)
	})
	fails(t, "--throttle takes a rate above 0", "topic", "move", file, "--throttle", "0", "--brokers", all)
	desc = okJSON[[]topicDescription](t, "", "topic", "describe", "movable", "--brokers", all)
	if p := desc[0].Partitions[0]; fmt.Sprint(p.Replicas) != fmt.Sprint(moved) || len(p.ISR) != 2 {
		t.Fatalf("after the move: %+v", p)
	}

	// To {fresh, gone} with gone shut down: registered, so accepted, but
	// it cannot catch up.
	gone := placed[1]
	c.stop(gone)
	var up []int32
	for id := int32(1); id <= 3; id++ {
		if id != gone {
			up = append(up, id)
		}
	}
	via := c.addr(up[0])
	c.waitBrokers(up[0], up...)
	stuck := plan(fresh, gone)
	ok(t, stuck, "topic", "move", "-", "--brokers", via)
	st := okJSON[[]moveResult](t, stuck, "topic", "move", "-", "--status", "--brokers", via)
	if len(st) != 1 || st[0].Status != "in progress" || fmt.Sprint(st[0].Adding) != fmt.Sprint([]int32{gone}) ||
		fmt.Sprint(st[0].Removing) != fmt.Sprint([]int32{placed[0]}) {
		t.Fatalf("status of the move to the stopped broker %d: %+v", gone, st)
	}
	if out := ok(t, "", "topic", "move", "--status", "--brokers", via); !strings.HasPrefix(out, "movable-0 in progress: replicas [") {
		t.Fatalf("status of every move: %q", out)
	}
	// describe shows the move as kafka-topics.sh --describe does.
	if d := okJSON[[]topicDescription](t, "", "topic", "describe", "movable", "--brokers", via); fmt.Sprint(d[0].Partitions[0].AddingReplicas) != fmt.Sprint([]int32{gone}) ||
		fmt.Sprint(d[0].Partitions[0].RemovingReplicas) != fmt.Sprint([]int32{placed[0]}) {
		t.Fatalf("describe while moving: %+v", d[0].Partitions[0])
	}
	if out := ok(t, "", "topic", "describe", "movable", "--brokers", via); !strings.Contains(out, "ADDING") || !strings.Contains(out, "REMOVING") {
		t.Fatalf("describe while moving:\n%s", out)
	}
	if out := ok(t, stuck, "topic", "move", "-", "--cancel", "--brokers", via); out != "cancelled the move of movable-0\n" {
		t.Fatalf("cancel: %q", out)
	}
	if out := ok(t, "", "topic", "move", "--status", "--brokers", via); out != "no moves in progress\n" {
		t.Fatalf("status after the cancel: %q", out)
	}
	failsWith(t, stuck, "NO_REASSIGNMENT_IN_PROGRESS", "topic", "move", "-", "--cancel", "--brokers", via)
	desc = okJSON[[]topicDescription](t, "", "topic", "describe", "movable", "--brokers", via)
	if got := desc[0].Partitions[0].Replicas; fmt.Sprint(got) != fmt.Sprint(moved) {
		t.Fatalf("replicas after the cancel: %v, want %v", got, moved)
	}

	failsWith(t, `{"version":2,"partitions":[]}`, "only version 1", "topic", "move", "-", "--brokers", via)
	failsWith(t, `{"version":1,"partitions":[{"topic":"movable","partition":0,"replicas":[1],"log_dirs":["/data"]}]}`,
		`only "any"`, "topic", "move", "-", "--brokers", via)
	failsWith(t, `{"version":1,"partitions":[{"topic":"movable","partition":0,"replicas":[1,1]}]}`,
		"INVALID_REPLICA_ASSIGNMENT", "topic", "move", "-", "--brokers", via)
	failsWith(t, `{"version":1,"partitions":[{"topic":"nope","partition":0,"replicas":[1]}]}`,
		"UNKNOWN_TOPIC_OR_PARTITION", "topic", "move", "-", "--brokers", via)
	fails(t, "a plan is needed", "topic", "move", "--brokers", via)
	fails(t, "exclude each other", "topic", "move", file, "--status", "--cancel", "--brokers", via)
}
