package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
			// Moving from {1,2,3} to {2,3,4}: 4 not in sync yet is not
			// under-replicated; 3 out of sync too is.
			"moving": {Topic: "moving", Partitions: kadm.PartitionDetails{
				0: {Topic: "moving", Partition: 0, Leader: 1, Replicas: []int32{2, 3, 4, 1}, ISR: []int32{1, 2, 3}},
				1: {Topic: "moving", Partition: 1, Leader: 1, Replicas: []int32{2, 3, 4, 1}, ISR: []int32{1, 2}},
			}},
			"gone": {Topic: "gone", Err: errors.New("boom")},
		},
	}
	moves := kadm.ListPartitionReassignmentsResponses{"moving": {
		0: {Topic: "moving", Partition: 0, Replicas: []int32{2, 3, 4, 1}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{1}},
		1: {Topic: "moving", Partition: 1, Replicas: []int32{2, 3, 4, 1}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{1}},
	}}
	n, problems := healthProblems(md, moves)
	want := []string{
		"no active controller",
		"topic gone: boom",
		"partition moving/1 is under-replicated (ISR [1,2] of replicas [2,3,4,1])",
		"partition sick/0 is offline: no leader (replicas [1], offline [])",
		"partition sick/1 is under-replicated (ISR [2] of replicas [1,2,3])",
		"partition sick/2 is offline: no leader (replicas [1,3], offline [1,3])",
		"partition sick/3 is under-replicated (ISR [2] of replicas [2,3], offline [3])",
	}
	if n != 7 || !slices.Equal(problems, want) {
		t.Fatalf("got %d partitions, %q; want 7, %q", n, problems, want)
	}
	if n, problems := healthProblems(kadm.Metadata{Controller: 1}, nil); n != 0 || len(problems) != 0 {
		t.Fatalf("empty healthy cluster: %d, %q", n, problems)
	}
}

// TestQuorumView covers what three Strata nodes do not show: an answer in
// Kafka's shape (the leader's timestamps -1, observers, a lagging
// follower), and an answer with no leader.
func TestQuorumView(t *testing.T) {
	rs := func(id int32, leo, fetch, caughtUp int64) kmsg.DescribeQuorumResponseTopicPartitionReplicaState {
		r := kmsg.NewDescribeQuorumResponseTopicPartitionReplicaState()
		r.ReplicaID, r.LogEndOffset, r.LastFetchTimestamp, r.LastCaughtUpTimestamp = id, leo, fetch, caughtUp
		return r
	}
	now := time.UnixMilli(1_000_000)
	p := kmsg.NewDescribeQuorumResponseTopicPartition()
	p.LeaderID, p.LeaderEpoch, p.HighWatermark = 3002, 7, 100
	p.CurrentVoters = append(p.CurrentVoters, rs(3001, 90, 999_000, 990_000), rs(3002, 100, -1, -1), rs(3000, 100, 999_900, 999_900))
	p.Observers = append(p.Observers, rs(2, 100, 999_950, 999_950), rs(1, 40, 999_950, 900_000))
	v, err := newQuorumView(&p, map[int32][]string{3002: {"CONTROLLER://c2:9093"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range v.Replicas {
		got = append(got, fmt.Sprintf("%d %d %s", r.NodeID, r.Lag, r.Status))
	}
	if want := []string{"3002 0 Leader", "3000 0 Follower", "3001 10 Follower", "1 60 Observer", "2 0 Observer"}; !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
	s := v.status("c")
	// The leader's last caught-up time is unknown (-1, as Kafka reports
	// it): the lag in time is unknown too.
	if s.MaxFollowerLag != 10 || s.MaxFollowerLagTimeMs != -1 || len(s.CurrentVoters) != 3 || len(s.CurrentObservers) != 2 {
		t.Fatalf("status %+v", s)
	}
	var out strings.Builder
	if err := writeQuorumStatus(&out, s); err != nil {
		t.Fatal(err)
	}
	if want := `CurrentVoters:          [{"id": 3000}, {"id": 3001}, {"id": 3002, "endpoints": ["CONTROLLER://c2:9093"]}]` + "\n" +
		`CurrentObservers:       [{"id": 1}, {"id": 2}]` + "\n"; !strings.HasSuffix(out.String(), want) {
		t.Fatalf("status text:\n%s\nwant it to end with\n%s", out.String(), want)
	}
	// The leader gives no clock: problems are judged by ours. 3001 was
	// heard from 1 s ago, and is behind; 3000 is fine.
	if problems := quorumProblems(v, nil, 500*time.Millisecond, now); !slices.Equal(problems,
		[]string{"controller 3001: the quorum's leader 3002 has not heard from it for 1s"}) {
		t.Fatalf("problems %q", problems)
	}
	if problems := quorumProblems(v, nil, 5*time.Second, now); !slices.Equal(problems,
		[]string{"controller 3001 is 10 offsets behind the quorum's leader 3002"}) {
		t.Fatalf("problems %q", problems)
	}
	p.LeaderID = -1
	if _, err := newQuorumView(&p, nil); !errors.Is(err, errNoQuorumLeader) {
		t.Fatalf("no leader: %v", err)
	}
	if problems := quorumProblems(quorumView{}, errNoQuorumLeader, time.Second, now); len(problems) != 1 || !strings.Contains(problems[0], "no leader") {
		t.Fatalf("problems %q", problems)
	}
}
