package group

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestOffsetCommitAndFetch(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.OffsetMetadataMaxBytes = 8 }, topic("t", 3), topic("u", 1))

	// A consumer that does not use group management commits with
	// generation -1: the group is created as a simple group.
	r := commitReq(8, "simple", "", -1, map[string]map[int32]int64{"t": {0: 10, 1: 11}, "u": {0: 5}})
	r.Topics[0].Partitions[0].LeaderEpoch = 4
	r.Topics[0].Partitions[0].Metadata = kmsg.StringPtr("ok")
	r.Topics[0].Partitions[1].Metadata = kmsg.StringPtr("far too long")
	codes := commitCodes(h.commit(r))
	if codes["t/0"] != 0 || codes["t/1"] != kerr.OffsetMetadataTooLarge.Code || codes["u/0"] != 0 {
		t.Fatalf("codes %v", codes)
	}
	got, code := h.fetch("simple", map[string][]int32{"t": {0, 1, 2}, "u": {0}})
	if code != 0 || got["t/0"] != 10 || got["t/1"] != -1 || got["t/2"] != -1 || got["u/0"] != 5 {
		t.Fatalf("fetch %v %d", got, code)
	}
	all, _ := h.fetch("simple", nil)
	if len(all) != 2 || all["t/0"] != 10 || all["u/0"] != 5 {
		t.Fatalf("fetch all %v", all)
	}

	// Leader epoch and metadata come back as committed.
	fr := kmsg.NewOffsetFetchRequest()
	fr.Version = 7
	fr.Group = "simple"
	fr.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0}}}
	resp := h.c.OffsetFetch(&fr)
	p := resp.Topics[0].Partitions[0]
	if resp.ErrorCode != 0 || p.Offset != 10 || p.LeaderEpoch != 4 || *p.Metadata != "ok" {
		t.Fatalf("v7 fetch %+v", resp)
	}

	// A group that does not exist has offset -1 and no error.
	got, code = h.fetch("nobody", map[string][]int32{"t": {0}})
	if code != 0 || got["t/0"] != -1 {
		t.Fatalf("unknown group fetch %v %d", got, code)
	}

	// Unknown topics and partitions are refused before the coordinator.
	codes = commitCodes(h.commit(commitReq(8, "simple", "", -1, map[string]map[int32]int64{"t": {3: 1}, "nope": {0: 1}})))
	if codes["t/3"] != kerr.UnknownTopicOrPartition.Code || codes["nope/0"] != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("codes %v", codes)
	}

	// A commit with a generation to a group that does not exist.
	for _, tc := range []struct {
		version int16
		want    *kerr.Error
	}{{9, kerr.GroupIDNotFound}, {8, kerr.IllegalGeneration}} {
		codes = commitCodes(h.commit(commitReq(tc.version, "missing", "m", 3, map[string]map[int32]int64{"t": {0: 1}})))
		if codes["t/0"] != tc.want.Code {
			t.Errorf("v%d commit to missing group: %d, want %s", tc.version, codes["t/0"], tc.want.Message)
		}
	}

	// Every accepted commit is in the log, encoded as Kafka encodes it.
	var n int
	for _, rec := range records(t, h.partitionOf("simple")) {
		var k kmsg.OffsetCommitKey
		if k.ReadFrom(rec.key) == nil && k.Version == 1 && k.Group == "simple" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d offset records in the log, want 2", n)
	}
}

func TestOffsetCommitFencingClassic(t *testing.T) {
	h := newHarness(t, nil, topic("t", 2))
	ids := h.stableGroup("g", 2)
	leader, follower := ids[0], ids[1]
	commit := func(member string, gen int32) int16 {
		return commitCodes(h.commit(commitReq(8, "g", member, gen, map[string]map[int32]int64{"t": {0: 7}})))["t/0"]
	}
	for _, tc := range []struct {
		name   string
		member string
		gen    int32
		want   int16
	}{
		{"current generation", follower, 1, 0},
		{"wrong generation", follower, 2, kerr.IllegalGeneration.Code},
		{"unknown member", "ghost", 1, kerr.UnknownMemberID.Code},
		{"no member on a group with members", "", -1, kerr.UnknownMemberID.Code},
	} {
		if got := commit(tc.member, tc.gen); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}

	// A commit keeps a classic member's session alive: the follower
	// commits every 6s instead of heartbeating and is still a member 30s
	// later.
	for i := 0; i < 5; i++ {
		h.clock.Advance(6 * time.Second)
		if got := commit(follower, 1); got != 0 {
			t.Fatalf("commit %d: %d", i, got)
		}
		h.heartbeat("g", leader, 1)
	}

	// While the group prepares a rebalance, members of the current
	// generation keep committing (KIP-429 cooperative members consume the
	// partitions they keep throughout).
	lj := h.join(joinReq(9, "g", leader))
	h.eventually("leader to rejoin", func() bool { return h.awaitingJoin("g") == 1 })
	if got := commit(follower, 1); got != 0 {
		t.Fatalf("commit in PreparingRebalance: %d", got)
	}
	// In CompletingRebalance a commit of the new generation waits for
	// the assignment: REBALANCE_IN_PROGRESS.
	fj := h.join(joinReq(9, "g", follower))
	recv(t, lj)
	recv(t, fj)
	if got := commit(follower, 2); got != kerr.RebalanceInProgress.Code {
		t.Fatalf("commit in CompletingRebalance: %d", got)
	}
}

func TestOffsetFetchVersions(t *testing.T) {
	h := newHarness(t, nil, topic("t", 2))
	h.commit(commitReq(8, "a", "", -1, map[string]map[int32]int64{"t": {0: 1, 1: 2}}))
	h.commit(commitReq(8, "b", "", -1, map[string]map[int32]int64{"t": {0: 3}}))

	// v8+ fetches several groups at once; a group whose partition is not
	// loaded here answers NOT_COORDINATOR alone.
	unloaded := "b"
	h.c.Unload(h.c.HashPartition(unloaded))
	r := kmsg.NewOffsetFetchRequest()
	r.Version = 8
	ga := kmsg.NewOffsetFetchRequestGroup()
	ga.Group = "a"
	gb := kmsg.NewOffsetFetchRequestGroup()
	gb.Group = unloaded
	r.Groups = []kmsg.OffsetFetchRequestGroup{ga, gb}
	resp := h.c.OffsetFetch(&r)
	if len(resp.Groups) != 2 || resp.Groups[0].ErrorCode != 0 || len(resp.Groups[0].Topics[0].Partitions) != 2 || resp.Groups[1].ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("batched fetch %+v", resp.Groups)
	}

	// Before v2 there is no top-level error: each partition carries it.
	v1 := kmsg.NewOffsetFetchRequest()
	v1.Version = 1
	v1.Group = unloaded
	v1.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0}}}
	if resp := h.c.OffsetFetch(&v1); resp.Topics[0].Partitions[0].ErrorCode != kerr.NotCoordinator.Code || resp.Topics[0].Partitions[0].Offset != -1 {
		t.Fatalf("v1 fetch %+v", resp)
	}
	v1.Version = 5
	if resp := h.c.OffsetFetch(&v1); resp.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("v5 fetch %+v", resp)
	}

	// v10 names topics by id.
	v10 := kmsg.NewOffsetFetchRequest()
	v10.Version = 10
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = "a"
	g.Topics = []kmsg.OffsetFetchRequestGroupTopic{{TopicID: topic("t", 2).ID, Partitions: []int32{1}}, {TopicID: [16]byte{9}, Partitions: []int32{0}}}
	v10.Groups = []kmsg.OffsetFetchRequestGroup{g}
	resp = h.c.OffsetFetch(&v10)
	ts := resp.Groups[0].Topics
	if ts[0].Partitions[0].Offset != 2 || ts[1].Partitions[0].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("v10 fetch %+v", ts)
	}
	// And v10 commits too.
	c10 := commitReq(10, "a", "", -1, map[string]map[int32]int64{"": {0: 99}})
	c10.Topics[0].TopicID = topic("t", 2).ID
	if got := h.commit(c10); got.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("v10 commit %+v", got)
	}
	if got, _ := h.fetch("a", map[string][]int32{"t": {0}}); got["t/0"] != 99 {
		t.Fatalf("after v10 commit %v", got)
	}
}

func TestOffsetDelete(t *testing.T) {
	h := newHarness(t, nil, topic("t", 1), topic("u", 1))
	del := func(group string, topics ...string) *kmsg.OffsetDeleteResponse {
		r := kmsg.NewOffsetDeleteRequest()
		r.Group = group
		for _, tp := range topics {
			r.Topics = append(r.Topics, kmsg.OffsetDeleteRequestTopic{Topic: tp, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}})
		}
		return h.c.OffsetDelete(context.Background(), &r)
	}
	if r := del("missing", "t"); r.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("missing group %+v", r)
	}

	// A stable consumer group subscribed to t (its members' metadata say
	// so) keeps t's offsets and lets u's go.
	ids := h.stableGroup("g", 1)
	h.commit(commitReq(8, "g", ids[0], 1, map[string]map[int32]int64{"t": {0: 1}, "u": {0: 2}}))
	r := del("g", "t", "u", "nope")
	if r.ErrorCode != 0 || r.Topics[0].Partitions[0].ErrorCode != kerr.GroupSubscribedToTopic.Code || r.Topics[1].Partitions[0].ErrorCode != 0 || r.Topics[2].Partitions[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("delete %+v", r)
	}
	if got, _ := h.fetch("g", map[string][]int32{"t": {0}, "u": {0}}); got["t/0"] != 1 || got["u/0"] != -1 {
		t.Fatalf("after delete %v", got)
	}

	// A group of another protocol type may not delete while it has members.
	j := joinReq(3, "connect", "")
	j.ProtocolType = "connect"
	ch := h.join(j)
	h.eventually("connect member to park", func() bool { return h.awaitingJoin("connect") == 1 })
	h.clock.Advance(3 * time.Second)
	recv(t, ch)
	if r := del("connect", "t"); r.ErrorCode != kerr.NonEmptyGroup.Code {
		t.Fatalf("non-consumer group %+v", r)
	}
}

func TestOffsetRetention(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.OffsetsRetentionMinutes = 1
		c.OffsetsRetentionCheckIntervalMs = 10000
	}, topic("t", 1), topic("u", 1))

	// A simple group's offsets age from their commit; the group goes with
	// its last offset.
	h.commit(commitReq(8, "simple", "", -1, map[string]map[int32]int64{"t": {0: 1}}))
	h.clock.Advance(30 * time.Second)
	h.commit(commitReq(8, "simple", "", -1, map[string]map[int32]int64{"u": {0: 1}}))
	h.clock.Advance(35 * time.Second)
	h.idle()
	if got, _ := h.fetch("simple", nil); len(got) != 1 || got["u/0"] != 1 {
		t.Fatalf("after first expiry %v", got)
	}
	h.clock.Advance(30 * time.Second)
	h.idle()
	if got, _ := h.fetch("simple", nil); len(got) != 0 {
		t.Fatalf("after second expiry %v", got)
	}
	if gs := h.c.GroupOffsets(); len(gs) != 0 {
		t.Fatalf("expired simple group still listed: %+v", gs)
	}

	// A stable group keeps the offsets of topics it consumes however old,
	// and loses the others.
	ids := h.stableGroup("g", 1)
	h.commit(commitReq(8, "g", ids[0], 1, map[string]map[int32]int64{"t": {0: 5}, "u": {0: 6}}))
	for i := 0; i < 15; i++ {
		h.clock.Advance(5 * time.Second)
		h.heartbeat("g", ids[0], 1)
	}
	h.idle()
	if got, _ := h.fetch("g", nil); len(got) != 1 || got["t/0"] != 5 {
		t.Fatalf("stable group after retention %v", got)
	}

	// Once empty, its offsets age from when it became empty.
	lv := kmsg.NewLeaveGroupRequest()
	lv.Version, lv.Group = 5, "g"
	lv.Members = []kmsg.LeaveGroupRequestMember{{MemberID: ids[0]}}
	h.c.LeaveGroup(context.Background(), &lv)
	h.clock.Advance(50 * time.Second)
	h.idle()
	if got, _ := h.fetch("g", nil); got["t/0"] != 5 {
		t.Fatalf("offsets of a group empty for 50s %v", got)
	}
	h.clock.Advance(20 * time.Second)
	h.idle()
	if got, _ := h.fetch("g", nil); len(got) != 0 {
		t.Fatalf("offsets of a group empty for 70s %v", got)
	}
	h.eventually("empty group to be deleted", func() bool { return h.classicState("g") == "none" })
}

func TestAppendFailures(t *testing.T) {
	h := newHarness(t, nil, topic("t", 1))
	for _, tc := range []struct {
		err  error
		want *kerr.Error
	}{
		{kerr.NotLeaderForPartition, kerr.NotCoordinator},
		{fmt.Errorf("replica: %w", kerr.NotEnoughReplicas), kerr.CoordinatorNotAvailable},
		{kerr.KafkaStorageError, kerr.NotCoordinator},
		{kerr.RequestTimedOut, kerr.CoordinatorNotAvailable},
		{kerr.MessageTooLarge, kerr.UnknownServerError},
		{context.DeadlineExceeded, kerr.CoordinatorNotAvailable},
	} {
		h.partitionOf("g").Fail(tc.err)
		codes := commitCodes(h.commit(commitReq(8, "g", "", -1, map[string]map[int32]int64{"t": {0: 1}})))
		if codes["t/0"] != tc.want.Code {
			t.Errorf("append error %v: code %d, want %s", tc.err, codes["t/0"], tc.want.Message)
		}
		if got, _ := h.fetch("g", map[string][]int32{"t": {0}}); got["t/0"] != -1 {
			t.Fatalf("failed commit is visible: %v", got)
		}
	}

	// A failed write of the leader's assignment fails every member's sync
	// and starts a new rebalance (Kafka's SyncGroup append callback).
	a, aj := h.joinNew("s")
	b, bj := h.joinNew("s")
	h.clock.Advance(6 * time.Second)
	leader := recv(t, aj).LeaderID
	recv(t, bj)
	follower := a
	if leader == a {
		follower = b
	}
	fs := h.sync(syncReq(5, "s", follower, 1, nil))
	h.eventually("follower to park in sync", func() bool {
		parked := false
		h.shard("s", func(s *state) { parked = s.classicGroup("s").members[follower].awaitingSync() })
		return parked
	})
	h.partitionOf("s").Fail(kerr.NotEnoughReplicas)
	ls := recv(t, h.sync(syncReq(5, "s", leader, 1, map[string][]byte{a: {1}, b: {2}})))
	if ls.ErrorCode != kerr.CoordinatorNotAvailable.Code || recv(t, fs).ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("sync after failed append: %d", ls.ErrorCode)
	}
	if st := h.classicState("s"); st != "PreparingRebalance" {
		t.Fatalf("state %s", st)
	}
}

func TestJavaLength(t *testing.T) {
	if n := javaLength("a\U0001F600é"); n != 4 {
		t.Fatalf("javaLength = %d", n)
	}
	if n := javaLength(strings.Repeat("x", 10)); n != 10 {
		t.Fatal(n)
	}
}
