package group

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinNew does the KIP-394 dance: a join without a member id gets
// MEMBER_ID_REQUIRED and an id, and the join with that id parks.
func (h *harness) joinNew(group string, protocols ...string) (string, <-chan *kmsg.JoinGroupResponse) {
	h.t.Helper()
	first := recv(h.t, h.join(joinReq(9, group, "", protocols...)))
	if first.ErrorCode != kerr.MemberIDRequired.Code || first.MemberID == "" {
		h.t.Fatalf("first join: code %d member %q, want MEMBER_ID_REQUIRED with an id", first.ErrorCode, first.MemberID)
	}
	before := h.awaitingJoin(group)
	ch := h.join(joinReq(9, group, first.MemberID, protocols...))
	h.eventually("member to park in join", func() bool { return h.awaitingJoin(group) == before+1 })
	return first.MemberID, ch
}

// stableGroup brings n members into a Stable group, generation 1; the
// first member is the leader.
func (h *harness) stableGroup(group string, n int) []string {
	h.t.Helper()
	ids := make([]string, n)
	chans := make([]<-chan *kmsg.JoinGroupResponse, n)
	for i := range ids {
		ids[i], chans[i] = h.joinNew(group)
	}
	// group.initial.rebalance.delay.ms, extended while members keep coming;
	// the join phase ends inside Advance.
	for i := 0; h.classicState(group) != "CompletingRebalance"; i++ {
		if i == 20 {
			h.t.Fatalf("join phase of %s did not complete", group)
		}
		h.clock.Advance(3 * time.Second)
	}
	responses := make([]*kmsg.JoinGroupResponse, n)
	for i := range chans {
		responses[i] = recv(h.t, chans[i])
	}
	var leader string
	for i := range ids {
		r := responses[i]
		if r.ErrorCode != 0 || r.Generation != 1 {
			h.t.Fatalf("join %d: code %d gen %d", i, r.ErrorCode, r.Generation)
		}
		leader = r.LeaderID
	}
	assignments := make(map[string][]byte)
	for _, id := range ids {
		assignments[id] = []byte("assignment-" + id)
	}
	var syncs []<-chan *kmsg.SyncGroupResponse
	for _, id := range ids {
		if id != leader {
			syncs = append(syncs, h.sync(syncReq(5, group, id, 1, nil)))
		}
	}
	syncs = append(syncs, h.sync(syncReq(5, group, leader, 1, assignments)))
	for _, ch := range syncs {
		if r := recv(h.t, ch); r.ErrorCode != 0 {
			h.t.Fatalf("sync: code %d", r.ErrorCode)
		}
	}
	if st := h.classicState(group); st != "Stable" {
		h.t.Fatalf("state %s after sync", st)
	}
	// Put the leader first.
	for i, id := range ids {
		if id == leader {
			ids[0], ids[i] = ids[i], ids[0]
		}
	}
	return ids
}

func TestClassicJoinSyncFlow(t *testing.T) {
	h := newHarness(t, nil)
	const g = "flow"

	// KIP-394: v4+ joins without a member id are given one and must
	// come back with it; the group does not start rebalancing for them.
	a, aJoin := h.joinNew(g, "range", "roundrobin")
	b, bJoin := h.joinNew(g, "roundrobin", "range")
	c, cJoin := h.joinNew(g, "roundrobin")
	if st := h.classicState(g); st != "PreparingRebalance" {
		t.Fatalf("state %s", st)
	}

	// The first join of an empty group waits
	// group.initial.rebalance.delay.ms, extended for each new member up
	// to the rebalance timeout.
	h.clock.Advance(2999 * time.Millisecond)
	noRecv(t, aJoin)
	h.clock.Advance(1 * time.Millisecond)
	// b and c joined during the first delay, so it is extended once more.
	noRecv(t, aJoin)
	h.clock.Advance(3 * time.Second)

	ra, rb, rc := recv(t, aJoin), recv(t, bJoin), recv(t, cJoin)
	for _, r := range []*kmsg.JoinGroupResponse{ra, rb, rc} {
		if r.ErrorCode != 0 || r.Generation != 1 || r.Protocol == nil || *r.Protocol != "roundrobin" || r.LeaderID != ra.LeaderID {
			t.Fatalf("join response %+v", r)
		}
	}
	// Protocol vote: only roundrobin is supported by all three.
	leader := ra.LeaderID
	var leaderResp *kmsg.JoinGroupResponse
	for _, r := range []*kmsg.JoinGroupResponse{ra, rb, rc} {
		if r.MemberID == leader {
			leaderResp = r
		} else if len(r.Members) != 0 {
			t.Fatalf("follower %s got the member list", r.MemberID)
		}
	}
	if leaderResp == nil || len(leaderResp.Members) != 3 {
		t.Fatalf("leader response %+v", leaderResp)
	}

	// A follower's sync parks until the leader's assignment is committed.
	followers := []string{}
	for _, id := range []string{a, b, c} {
		if id != leader {
			followers = append(followers, id)
		}
	}
	fSync := h.sync(syncReq(5, g, followers[0], 1, nil))
	h.eventually("follower sync to park", func() bool {
		parked := false
		h.shard(g, func(s *state) { parked = s.classicGroup(g).members[followers[0]].awaitingSync() })
		return parked
	})
	if code := h.heartbeat(g, followers[0], 1); code != 0 {
		t.Fatalf("heartbeat in CompletingRebalance: %d", code)
	}
	lSync := h.sync(syncReq(5, g, leader, 1, map[string][]byte{a: []byte("A"), b: []byte("B"), c: []byte("C")}))
	want := map[string]string{a: "A", b: "B", c: "C"}
	if r := recv(t, lSync); r.ErrorCode != 0 || string(r.MemberAssignment) != want[leader] || *r.Protocol != "roundrobin" || *r.ProtocolType != "consumer" {
		t.Fatalf("leader sync %+v", r)
	}
	if r := recv(t, fSync); r.ErrorCode != 0 || string(r.MemberAssignment) != want[followers[0]] {
		t.Fatalf("follower sync %+v", r)
	}
	// A late sync in Stable gets the stored assignment at once.
	if r := recv(t, h.sync(syncReq(5, g, followers[1], 1, nil))); r.ErrorCode != 0 || string(r.MemberAssignment) != want[followers[1]] {
		t.Fatalf("late sync %+v", r)
	}
	if st := h.classicState(g); st != "Stable" {
		t.Fatalf("state %s", st)
	}

	// The generation was persisted with every assignment.
	recs := records(t, h.partitionOf(g))
	last := recs[len(recs)-1]
	var v kmsg.GroupMetadataValue
	if err := v.ReadFrom(last.value); err != nil {
		t.Fatal(err)
	}
	if v.Generation != 1 || *v.Protocol != "roundrobin" || *v.Leader != leader || len(v.Members) != 3 {
		t.Fatalf("persisted %+v", v)
	}
	for _, m := range v.Members {
		if string(m.Assignment) != want[m.MemberID] {
			t.Fatalf("persisted assignment of %s: %q", m.MemberID, m.Assignment)
		}
	}
}

func TestClassicErrors(t *testing.T) {
	h := newHarness(t, nil)
	ids := h.stableGroup("g", 2)
	leader, follower := ids[0], ids[1]

	for _, tc := range []struct {
		name string
		got  int16
		want *kerr.Error
	}{
		{"heartbeat wrong generation", h.heartbeat("g", follower, 7), kerr.IllegalGeneration},
		{"heartbeat unknown member", h.heartbeat("g", "nobody", 1), kerr.UnknownMemberID},
		{"heartbeat unknown group", h.heartbeat("nogroup", "x", 1), kerr.UnknownMemberID},
		{"heartbeat empty group id", h.heartbeat("", "x", 1), kerr.InvalidGroupID},
		{"sync wrong generation", recv(t, h.sync(syncReq(5, "g", follower, 2, nil))).ErrorCode, kerr.IllegalGeneration},
		{"sync unknown member", recv(t, h.sync(syncReq(5, "g", "nobody", 1, nil))).ErrorCode, kerr.UnknownMemberID},
		{"join wrong protocol type", func() int16 {
			r := joinReq(9, "g", leader)
			r.ProtocolType = "connect"
			return recv(t, h.join(r)).ErrorCode
		}(), kerr.InconsistentGroupProtocol},
		{"join unsupported protocol", recv(t, h.join(joinReq(9, "g", "", "sticky"))).ErrorCode, kerr.InconsistentGroupProtocol},
		{"join session timeout too small", func() int16 {
			r := joinReq(9, "g", "")
			r.SessionTimeoutMillis = 10
			return recv(t, h.join(r)).ErrorCode
		}(), kerr.InvalidSessionTimeout},
		{"join empty group id", recv(t, h.join(joinReq(9, "", ""))).ErrorCode, kerr.InvalidGroupID},
		{"join unknown member of missing group", recv(t, h.join(joinReq(9, "missing", "m-1"))).ErrorCode, kerr.UnknownMemberID},
		{"sync protocol name mismatch", func() int16 {
			r := syncReq(5, "g", follower, 1, nil)
			r.Protocol = kmsg.StringPtr("roundrobin")
			return recv(t, h.sync(r)).ErrorCode
		}(), kerr.InconsistentGroupProtocol},
	} {
		if tc.got != tc.want.Code {
			t.Errorf("%s: code %d, want %s", tc.name, tc.got, tc.want.Message)
		}
	}
	// A follower's unchanged rejoin in Stable gets the current generation
	// without a rebalance.
	r := recv(t, h.join(joinReq(9, "g", follower)))
	if r.ErrorCode != 0 || r.Generation != 1 || h.classicState("g") != "Stable" {
		t.Fatalf("follower rejoin: %+v state %s", r, h.classicState("g"))
	}
}

func TestClassicRebalanceTimeoutRemovesMembersThatDoNotRejoin(t *testing.T) {
	h := newHarness(t, nil)
	ids := h.stableGroup("g", 2)
	leader, follower := ids[0], ids[1]

	// A third member joins: the group prepares a rebalance.
	newcomer, newJoin := h.joinNew("g")
	if st := h.classicState("g"); st != "PreparingRebalance" {
		t.Fatalf("state %s", st)
	}
	if code := h.heartbeat("g", leader, 1); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat during rebalance: %d", code)
	}
	leaderJoin := h.join(joinReq(9, "g", leader))
	h.eventually("leader to rejoin", func() bool { return h.awaitingJoin("g") == 2 })

	// The follower stops polling and never rejoins; its session is still
	// kept alive by heartbeats until the rebalance timeout (30s).
	for i := 0; i < 5; i++ {
		h.clock.Advance(5 * time.Second)
		if code := h.heartbeat("g", follower, 1); code != kerr.RebalanceInProgress.Code {
			t.Fatalf("follower heartbeat: %d", code)
		}
	}
	noRecv(t, newJoin)
	h.clock.Advance(5 * time.Second)

	rl, rn := recv(t, leaderJoin), recv(t, newJoin)
	if rl.Generation != 2 || rn.Generation != 2 || rl.LeaderID != leader || len(rl.Members) != 2 {
		t.Fatalf("gen 2 responses %+v %+v", rl, rn)
	}
	if rn.MemberID != newcomer {
		t.Fatalf("newcomer id %s", rn.MemberID)
	}
	if code := h.heartbeat("g", follower, 2); code != kerr.UnknownMemberID.Code {
		t.Fatalf("removed follower heartbeat: %d", code)
	}
}

func TestClassicSessionExpiry(t *testing.T) {
	h := newHarness(t, nil)
	ids := h.stableGroup("g", 2)
	leader, follower := ids[0], ids[1]

	// Only the leader heartbeats; the follower's 10s session runs out.
	for i := 0; i < 3; i++ {
		h.clock.Advance(4 * time.Second)
		if code := h.heartbeat("g", leader, 1); code != 0 && code != kerr.RebalanceInProgress.Code {
			t.Fatalf("leader heartbeat %d", code)
		}
	}
	if st := h.classicState("g"); st != "PreparingRebalance" {
		t.Fatalf("state %s after the follower expired", st)
	}
	// The leader rejoins alone and the rebalance completes at once.
	r := recv(t, h.join(joinReq(9, "g", leader)))
	if r.ErrorCode != 0 || r.Generation != 2 || len(r.Members) != 1 {
		t.Fatalf("rejoin %+v", r)
	}
	if code := h.heartbeat("g", follower, 1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("expired follower: %d", code)
	}

	// The leader goes too: the next generation is Empty and persisted.
	h.clock.Advance(11 * time.Second)
	h.eventually("group to become empty", func() bool { return h.classicState("g") == "Empty" })
	// The state changes before the record is written: wait for the
	// record rather than for the write queue, which the write being
	// appended has already left.
	var v kmsg.GroupMetadataValue
	h.eventually("generation 3 written", func() bool {
		recs := records(t, h.partitionOf("g"))
		v = kmsg.GroupMetadataValue{}
		return len(recs) > 0 && v.ReadFrom(recs[len(recs)-1].value) == nil && v.Generation == 3
	})
	if len(v.Members) != 0 || v.Protocol != nil {
		t.Fatalf("empty generation record %+v", v)
	}
}

func TestClassicPendingSyncExpiry(t *testing.T) {
	h := newHarness(t, nil)
	a, aJoin := h.joinNew("g")
	b, bJoin := h.joinNew("g")
	h.clock.Advance(6 * time.Second)
	ra, rb := recv(t, aJoin), recv(t, bJoin)
	leader := ra.LeaderID
	_ = rb
	other := a
	if leader == a {
		other = b
	}
	// Only the leader syncs; the other member never does.
	if r := recv(t, h.sync(syncReq(5, "g", leader, 1, map[string][]byte{a: {1}, b: {2}}))); r.ErrorCode != 0 {
		t.Fatalf("leader sync %d", r.ErrorCode)
	}
	// Kafka keeps the members that missed the sync only for the rebalance
	// timeout, then rebalances without them.
	for i := 0; i < 6; i++ {
		h.clock.Advance(5 * time.Second)
		if code := h.heartbeat("g", leader, 1); code != 0 && code != kerr.RebalanceInProgress.Code {
			t.Fatalf("leader heartbeat: %d", code)
		}
	}
	if st := h.classicState("g"); st != "PreparingRebalance" {
		t.Fatalf("state %s", st)
	}
	if code := h.heartbeat("g", other, 1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("member that never synced: %d", code)
	}
}

func TestClassicStaticMembership(t *testing.T) {
	h := newHarness(t, nil)
	static := func(member, instance string) *kmsg.JoinGroupRequest {
		r := joinReq(9, "g", member)
		r.InstanceID = kmsg.StringPtr(instance)
		return r
	}
	// Static members join without MEMBER_ID_REQUIRED.
	j1 := h.join(static("", "i1"))
	j2 := h.join(static("", "i2"))
	h.eventually("static members to park", func() bool { return h.awaitingJoin("g") == 2 })
	h.clock.Advance(6 * time.Second)
	r1, r2 := recv(t, j1), recv(t, j2)
	if r1.ErrorCode != 0 || r2.ErrorCode != 0 {
		t.Fatalf("joins %d %d", r1.ErrorCode, r2.ErrorCode)
	}
	leader := r1.LeaderID
	assign := map[string][]byte{r1.MemberID: []byte("one"), r2.MemberID: []byte("two")}
	lr, fr := r1, r2
	if leader != r1.MemberID {
		lr, fr = r2, r1
	}
	fs := h.sync(syncReq(5, "g", fr.MemberID, 1, nil))
	if r := recv(t, h.sync(syncReq(5, "g", lr.MemberID, 1, assign))); r.ErrorCode != 0 {
		t.Fatal(r.ErrorCode)
	}
	recv(t, fs)

	// i2 restarts and rejoins with no member id: KIP-345 gives it a new id
	// and its old assignment without a rebalance.
	i2Old := r2.MemberID
	rj := recv(t, h.join(static("", "i2")))
	if rj.ErrorCode != 0 || rj.MemberID == i2Old || rj.Generation != 1 || h.classicState("g") != "Stable" {
		t.Fatalf("static rejoin %+v state %s", rj, h.classicState("g"))
	}
	if r := recv(t, h.sync(syncReq(5, "g", rj.MemberID, 1, nil))); string(r.MemberAssignment) != "two" {
		t.Fatalf("replaced member's assignment %q", r.MemberAssignment)
	}
	// The old instance is fenced.
	hb := kmsg.NewHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = 4, "g", i2Old, 1, kmsg.StringPtr("i2")
	if code := h.c.Heartbeat(&hb).ErrorCode; code != kerr.FencedInstanceID.Code {
		t.Fatalf("old instance heartbeat: %d", code)
	}
	// Removing a static member by instance id alone (the admin client's
	// way) triggers a rebalance.
	lv := kmsg.NewLeaveGroupRequest()
	lv.Version, lv.Group = 5, "g"
	lv.Members = []kmsg.LeaveGroupRequestMember{{InstanceID: kmsg.StringPtr("i2")}, {InstanceID: kmsg.StringPtr("nope")}}
	resp := h.c.LeaveGroup(context.Background(), &lv)
	if resp.ErrorCode != 0 || resp.Members[0].ErrorCode != 0 || resp.Members[1].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("leave %+v", resp)
	}
	if st := h.classicState("g"); st != "PreparingRebalance" {
		t.Fatalf("state %s", st)
	}
}

func TestClassicLeaveGroupBatched(t *testing.T) {
	h := newHarness(t, nil)
	ids := h.stableGroup("g", 3)

	lv := kmsg.NewLeaveGroupRequest()
	lv.Version, lv.Group = 5, "g"
	lv.Members = []kmsg.LeaveGroupRequestMember{{MemberID: ids[1]}, {MemberID: ids[2]}, {MemberID: "ghost"}}
	resp := h.c.LeaveGroup(context.Background(), &lv)
	if resp.ErrorCode != 0 || len(resp.Members) != 3 {
		t.Fatalf("leave %+v", resp)
	}
	if resp.Members[0].ErrorCode != 0 || resp.Members[1].ErrorCode != 0 || resp.Members[2].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("member codes %+v", resp.Members)
	}
	// The remaining member rejoins alone.
	r := recv(t, h.join(joinReq(9, "g", ids[0])))
	if r.Generation != 2 || len(r.Members) != 1 {
		t.Fatalf("rejoin %+v", r)
	}

	// v0-v2 carry one member and answer with a top-level error.
	old := kmsg.NewLeaveGroupRequest()
	old.Version, old.Group, old.MemberID = 2, "g", "ghost"
	if resp := h.c.LeaveGroup(context.Background(), &old); resp.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("v2 leave %+v", resp)
	}
	old.MemberID = ids[0]
	if resp := h.c.LeaveGroup(context.Background(), &old); resp.ErrorCode != 0 {
		t.Fatalf("v2 leave of last member %+v", resp)
	}
	h.eventually("group to empty", func() bool { return h.classicState("g") == "Empty" })
}

func TestClassicGroupMaxSize(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxSize = 1 })
	_, j := h.joinNew("g")
	_ = j
	// The second member gets its id but cannot join the rebalance.
	second := recv(t, h.join(joinReq(9, "g", "")))
	r := recv(t, h.join(joinReq(9, "g", second.MemberID)))
	if r.ErrorCode != kerr.GroupMaxSizeReached.Code {
		t.Fatalf("join beyond group.max.size: %d", r.ErrorCode)
	}
}

func TestClassicV3JoinWithoutMemberIDJoinsAtOnce(t *testing.T) {
	h := newHarness(t, nil)
	j := h.join(joinReq(3, "old", ""))
	h.eventually("v3 member to park", func() bool { return h.awaitingJoin("old") == 1 })
	h.clock.Advance(3 * time.Second)
	if r := recv(t, j); r.ErrorCode != 0 || r.MemberID == "" || r.Generation != 1 {
		t.Fatalf("v3 join %+v", r)
	}
}

func TestCoordinatorRouting(t *testing.T) {
	h := newHarness(t, nil)
	// Unloading a partition answers NOT_COORDINATOR, and answers parked
	// joins the same way.
	group := "routed"
	p := h.c.HashPartition(group)
	_, parked := h.joinNew(group)
	h.c.Unload(p)
	if r := recv(t, parked); r.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("parked join after unload: %d", r.ErrorCode)
	}
	if code := h.heartbeat(group, "m", 1); code != kerr.NotCoordinator.Code {
		t.Fatalf("heartbeat after unload: %d", code)
	}

	// While a partition loads, requests get COORDINATOR_LOAD_IN_PROGRESS
	// (heartbeats are answered blindly, as in Kafka).
	gate := &memPartition{ReadGate: make(chan struct{})}
	h.c.Load(p, gate)
	if r := recv(t, h.join(joinReq(9, group, ""))); r.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("join while loading: %d", r.ErrorCode)
	}
	if code := h.heartbeat(group, "m", 1); code != 0 {
		t.Fatalf("heartbeat while loading: %d", code)
	}
	close(gate.ReadGate)
	h.eventually("load to finish", func() bool {
		return recv(t, h.join(joinReq(9, group, ""))).ErrorCode == kerr.MemberIDRequired.Code
	})

	h.c.Close()
	if code := h.heartbeat(group, "m", 1); code != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("heartbeat after close: %d", code)
	}
}

func TestJoinGroupContextEnds(t *testing.T) {
	h := newHarness(t, nil)
	first := recv(t, h.join(joinReq(9, "g", "")))
	ctx, cancel := context.WithCancel(context.Background())
	ch := async(func() *kmsg.JoinGroupResponse {
		return h.c.JoinGroup(ctx, testClient, joinReq(9, "g", first.MemberID))
	})
	h.eventually("join to park", func() bool { return h.awaitingJoin("g") == 1 })
	cancel()
	if r := recv(t, ch); r.ErrorCode != kerr.RebalanceInProgress.Code {
		t.Fatalf("join after its context ended: %d", r.ErrorCode)
	}
	// As in Kafka, the member stays parked: a client retrying on a new
	// connection finds it there.
	if n := h.awaitingJoin("g"); n != 1 {
		t.Fatalf("awaiting join %d", n)
	}
}

// TestSystemClock runs a rebalance on real timers, to exercise the path
// the broker uses; it takes tens of milliseconds.
func TestSystemClock(t *testing.T) {
	cfg := DefaultConfig()
	cfg.OffsetsTopicNumPartitions = 1
	cfg.InitialRebalanceDelayMs = 20
	c := NewCoordinator(cfg, Deps{})
	defer c.Close()
	c.Load(0, &memPartition{})
	sh, err := c.rt.Shard(0)
	if err != nil {
		t.Fatal(err)
	}
	<-sh.Loaded()
	first := c.JoinGroup(context.Background(), testClient, joinReq(9, "g", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := c.JoinGroup(ctx, testClient, joinReq(9, "g", first.MemberID))
	if r.ErrorCode != 0 || r.Generation != 1 || r.LeaderID != first.MemberID {
		t.Fatalf("join on the system clock: %+v", r)
	}
}

func TestClassicAPIsOnConsumerGroup(t *testing.T) {
	h := newHarness(t, nil, topic("t", 1))
	m := h.newMember("g", "t")
	m.instance = kmsg.StringPtr("i")
	m.mustHeartbeat()
	if code := h.heartbeat("g", m.id, m.epoch); code != kerr.UnknownMemberID.Code {
		t.Fatalf("classic heartbeat to a consumer group: %d", code)
	}
	hb := kmsg.NewHeartbeatRequest()
	hb.Group, hb.MemberID, hb.InstanceID = "g", "other", kmsg.StringPtr("i")
	if code := h.c.Heartbeat(&hb).ErrorCode; code != kerr.FencedInstanceID.Code {
		t.Fatalf("classic heartbeat with a taken instance id: %d", code)
	}
	if r := recv(t, h.sync(syncReq(5, "g", m.id, m.epoch, nil))); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("classic sync to a consumer group: %d", r.ErrorCode)
	}
	// The admin client removes consumer-protocol members with LeaveGroup.
	lv := kmsg.NewLeaveGroupRequest()
	lv.Version, lv.Group = 5, "g"
	lv.Members = []kmsg.LeaveGroupRequestMember{{InstanceID: kmsg.StringPtr("i")}}
	if r := h.c.LeaveGroup(context.Background(), &lv); r.ErrorCode != 0 || r.Members[0].ErrorCode != 0 {
		t.Fatalf("leave %+v", r)
	}
	if st, _, _ := h.consumerState("g"); st != "Empty" {
		t.Fatalf("state %s", st)
	}
}
