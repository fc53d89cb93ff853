package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestClusterInfo(t *testing.T) {
	info := okJSON[clusterInfo](t, "", "cluster", "info")
	if info.ClusterID != clusterID || info.ClusterID == "" {
		t.Fatalf("cluster id %q, want %q", info.ClusterID, clusterID)
	}
	if len(info.Brokers) != 1 || info.Brokers[0].Host+":"+itoa(info.Brokers[0].Port) != brokerAddr {
		t.Fatalf("brokers %+v, want the one node at %s", info.Brokers, brokerAddr)
	}
	if info.Controller < 0 || !info.Brokers[0].Controller || info.Brokers[0].NodeID != info.Controller {
		t.Fatalf("controller %d, brokers %+v: want the node as controller", info.Controller, info.Brokers)
	}
	text := ok(t, "", "cluster", "info")
	for _, want := range []string{"CLUSTER", clusterID, "CONTROLLER", "HOST", "PORT"} {
		if !strings.Contains(text, want) {
			t.Fatalf("cluster info text lacks %q:\n%s", want, text)
		}
	}
}

func TestClusterHealth(t *testing.T) {
	newTopic(t, 3)
	rep := okJSON[healthReport](t, "", "cluster", "health")
	if !rep.Healthy || rep.Brokers != 1 || rep.Partitions < 3 || len(rep.Problems) != 0 {
		t.Fatalf("health %+v", rep)
	}
	if out := ok(t, "", "cluster", "health"); !strings.HasPrefix(out, "healthy: 1 brokers") {
		t.Fatalf("health text %q", out)
	}

	addr := deadAddr(t)
	r := cli(t, "", "cluster", "health", "--brokers", addr)
	checkOneLineError(t, r, "unhealthy: cannot reach broker at "+addr, nil)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
}

// TestHealthProblems covers the verdicts a one-node cluster cannot show:
// leaderless and under-replicated partitions, no controller.
func TestHealthProblems(t *testing.T) {
	md := kadm.Metadata{
		Controller: -1,
		Topics: kadm.TopicDetails{
			"ok": {Topic: "ok", Partitions: kadm.PartitionDetails{
				0: {Topic: "ok", Partition: 0, Leader: 1, Replicas: []int32{1, 2}, ISR: []int32{2, 1}},
			}},
			"sick": {Topic: "sick", Partitions: kadm.PartitionDetails{
				0: {Topic: "sick", Partition: 0, Leader: -1, Replicas: []int32{1}, ISR: []int32{}, Err: kerr.LeaderNotAvailable},
				1: {Topic: "sick", Partition: 1, Leader: 2, Replicas: []int32{1, 2, 3}, ISR: []int32{2}},
				2: {Topic: "sick", Partition: 2, Leader: -1, Replicas: []int32{1, 3}, ISR: []int32{1}, OfflineReplicas: []int32{1, 3}, Err: kerr.LeaderNotAvailable},
				3: {Topic: "sick", Partition: 3, Leader: 2, Replicas: []int32{2, 3}, ISR: []int32{2}, OfflineReplicas: []int32{3}},
			}},
			"gone": {Topic: "gone", Err: errors.New("boom")},
		},
	}
	n, problems := healthProblems(md)
	want := []string{
		"no active controller",
		"topic gone: boom",
		"partition sick/0 is offline: no leader (replicas [1], offline [])",
		"partition sick/1 is under-replicated (ISR [2] of replicas [1,2,3])",
		"partition sick/2 is offline: no leader (replicas [1,3], offline [1,3])",
		"partition sick/3 is under-replicated (ISR [2] of replicas [2,3], offline [3])",
	}
	if n != 5 || !slices.Equal(problems, want) {
		t.Fatalf("got %d partitions, %q; want 5, %q", n, problems, want)
	}
	if n, problems := healthProblems(kadm.Metadata{Controller: 1}); n != 0 || len(problems) != 0 {
		t.Fatalf("empty healthy cluster: %d, %q", n, problems)
	}
}
