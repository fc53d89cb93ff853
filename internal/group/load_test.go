package group

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/coordinator/coordinatortest"
)

// moveTo starts a second coordinator (another broker taking over) that
// loads the same partitions, as after a leader change or a restart.
func (h *harness) moveTo() *harness {
	h.t.Helper()
	h.idle()
	cfg := h.c.cfg
	n := &harness{t: h.t, clock: coordinatortest.NewManualClock(h.clock.Now()), topics: h.topics, parts: h.parts}
	n.c = NewCoordinator(cfg, Deps{Clock: n.clock, Topics: h.topics, Logger: testLogger(h.t)})
	h.c.Close()
	for p, mp := range h.parts {
		n.load(int32(p), mp)
	}
	h.t.Cleanup(n.c.Close)
	return n
}

func TestLoadRebuildsGroupsAndOffsets(t *testing.T) {
	h := newHarness(t, nil, topic("t", 4), topic("u", 1))

	// A stable classic group with offsets.
	ids := h.stableGroup("classic", 2)
	h.commit(commitReq(8, "classic", ids[0], 1, map[string]map[int32]int64{"t": {0: 10, 1: 11}}))
	// A static member's group.
	sj := joinReq(9, "static", "")
	sj.InstanceID = kmsg.StringPtr("instance-1")
	sch := h.join(sj)
	h.eventually("static member to park", func() bool { return h.awaitingJoin("static") == 1 })
	h.clock.Advance(3 * time.Second)
	sr := recv(t, sch)
	recv(t, h.sync(syncReq(5, "static", sr.MemberID, 1, map[string][]byte{sr.MemberID: []byte("mine")})))
	// A simple group, one of whose offsets is later deleted.
	h.commit(commitReq(8, "simple", "", -1, map[string]map[int32]int64{"t": {2: 20, 3: 21}, "u": {0: 22}}))
	del := kmsg.NewOffsetDeleteRequest()
	del.Group = "simple"
	del.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "u", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
	if r := h.c.OffsetDelete(context.Background(), &del); r.ErrorCode != 0 || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("offset delete %+v", r)
	}
	// A group deleted with its offsets.
	h.commit(commitReq(8, "gone", "", -1, map[string]map[int32]int64{"t": {0: 1}}))
	dg := kmsg.NewDeleteGroupsRequest()
	dg.Groups = []string{"gone"}
	if r := h.c.DeleteGroups(context.Background(), &dg); r.Groups[0].ErrorCode != 0 {
		t.Fatalf("delete %+v", r)
	}
	// A group that emptied after committing.
	eids := h.stableGroup("emptied", 1)
	h.commit(commitReq(8, "emptied", eids[0], 1, map[string]map[int32]int64{"u": {0: 30}}))
	lv := kmsg.NewLeaveGroupRequest()
	lv.Version, lv.Group = 5, "emptied"
	lv.Members = []kmsg.LeaveGroupRequestMember{{MemberID: eids[0]}}
	h.c.LeaveGroup(context.Background(), &lv)
	// A KIP-848 group with offsets.
	a := h.newMember("kip848", "t")
	a.mustHeartbeat()
	b := h.newMember("kip848", "t")
	b.mustHeartbeat()
	h.commit(commitReq(9, "kip848", a.id, a.epoch, map[string]map[int32]int64{"t": {3: 40}}))
	_, epoch, _ := h.consumerState("kip848")

	before := h.c.GroupOffsets()
	describeBefore := h.c.DescribeGroups(&kmsg.DescribeGroupsRequest{Version: 5, Groups: []string{"classic", "static", "emptied"}})
	var classicGen int32
	h.shard("classic", func(s *state) { classicGen = s.classicGroup("classic").generation })

	n := h.moveTo()

	after := n.c.GroupOffsets()
	// The KIP-848 group comes back without its members.
	for i := range before {
		if before[i].Group == "kip848" {
			before[i].State, before[i].Members = "Empty", 0
		}
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("groups and offsets after load:\n got %+v\nwant %+v", after, before)
	}
	describeAfter := n.c.DescribeGroups(&kmsg.DescribeGroupsRequest{Version: 5, Groups: []string{"classic", "static", "emptied"}})
	if !reflect.DeepEqual(describeBefore, describeAfter) {
		t.Fatalf("describe after load:\n got %+v\nwant %+v", describeAfter, describeBefore)
	}
	n.shard("classic", func(s *state) {
		if g := s.classicGroup("classic"); g.generation != classicGen || g.leader != ids[0] {
			t.Errorf("classic group generation %d leader %s", g.generation, g.leader)
		}
	})

	// Classic members carry on across the move without rejoining.
	if code := n.heartbeat("classic", ids[1], classicGen); code != 0 {
		t.Fatalf("classic member after move: %d", code)
	}
	if r := recv(t, n.sync(syncReq(5, "static", sr.MemberID, 1, nil))); r.ErrorCode != 0 || string(r.MemberAssignment) != "mine" {
		t.Fatalf("static member after move %+v", r)
	}
	if got, _ := n.fetch("simple", nil); len(got) != 2 || got["t/2"] != 20 {
		t.Fatalf("simple offsets %v", got)
	}
	if got, _ := n.fetch("gone", map[string][]int32{"t": {0}}); got["t/0"] != -1 {
		t.Fatalf("deleted group's offsets %v", got)
	}

	// KIP-848 members are unknown to the new coordinator: they rejoin,
	// and the group epoch keeps going up from where it was.
	a.h, b.h = n, n
	if r := a.heartbeat(); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("KIP-848 member after move: %d", r.ErrorCode)
	}
	a.epoch, a.owned = 0, make(partitions)
	if r := a.mustHeartbeat(); r.MemberEpoch != epoch+1 || a.owned.count() != 4 {
		t.Fatalf("rejoin after move: %+v", r)
	}
	if got, _ := n.fetch("kip848", map[string][]int32{"t": {3}}); got["t/3"] != 40 {
		t.Fatalf("KIP-848 offsets after move %v", got)
	}

	// Loaded classic members get a fresh session: the one that never
	// heartbeats again is removed.
	for i := 0; i < 3; i++ {
		n.clock.Advance(4 * time.Second)
		n.heartbeat("classic", ids[1], classicGen)
	}
	if st := n.classicState("classic"); st != "PreparingRebalance" {
		t.Fatalf("classic group after a loaded member's session ended: %s", st)
	}
}

func TestLoadCorruptPartitionFails(t *testing.T) {
	h := newHarness(t, nil, topic("t", 1))
	h.commit(commitReq(8, "g", "", -1, map[string]map[int32]int64{"t": {0: 1}}))
	mp := h.partitionOf("g")
	h.idle()
	mp.CorruptTail()

	n := h.moveTo()
	if _, code := n.fetch("g", nil); code != kerr.NotCoordinator.Code {
		t.Fatalf("fetch from a partition that failed to load: %d", code)
	}
}

// TestConcurrentCommits runs commits from many goroutines against one
// shard and checks each partition ends at the last offset its writer
// committed, in the log as in memory.
func TestConcurrentCommits(t *testing.T) {
	h := newHarness(t, nil, topic("t", 8))
	done := make(chan struct{})
	for w := int32(0); w < 8; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := int64(1); i <= 50; i++ {
				r := commitReq(8, "busy", "", -1, map[string]map[int32]int64{"t": {w: i}})
				if code := commitCodes(h.commit(r))[fmt.Sprintf("t/%d", w)]; code != 0 {
					t.Errorf("commit: %d", code)
					return
				}
			}
		}()
	}
	for i := 0; i < 8; i++ {
		<-done
	}
	got, _ := h.fetch("busy", nil)
	for w := 0; w < 8; w++ {
		if got[fmt.Sprintf("t/%d", w)] != 50 {
			t.Fatalf("offsets %v", got)
		}
	}
	n := h.moveTo()
	if again, _ := n.fetch("busy", nil); !reflect.DeepEqual(got, again) {
		t.Fatalf("after load %v, before %v", again, got)
	}
	// Commits queued together were coalesced into fewer appends.
	t.Logf("400 commits in %d appends", h.partitionOf("busy").Appends())
}
