package group

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestListDescribeDeleteGroups(t *testing.T) {
	h := newHarness(t, nil, topic("t", 1))
	ids := h.stableGroup("stable", 2)
	h.commit(commitReq(8, "simple", "", -1, map[string]map[int32]int64{"t": {0: 3}}))

	list := func(states, types []string) map[string]kmsg.ListGroupsResponseGroup {
		r := kmsg.NewListGroupsRequest()
		r.Version = 5
		r.StatesFilter, r.TypesFilter = states, types
		resp := h.c.ListGroups(&r)
		if resp.ErrorCode != 0 {
			t.Fatalf("list: %d", resp.ErrorCode)
		}
		out := make(map[string]kmsg.ListGroupsResponseGroup)
		for _, g := range resp.Groups {
			out[g.Group] = g
		}
		return out
	}
	all := list(nil, nil)
	if len(all) != 2 || all["stable"].GroupState != "Stable" || all["stable"].ProtocolType != "consumer" || all["stable"].GroupType != "classic" ||
		all["simple"].GroupState != "Empty" || all["simple"].ProtocolType != "" {
		t.Fatalf("list %+v", all)
	}
	if got := list([]string{"empty"}, nil); len(got) != 1 || got["simple"].Group != "simple" {
		t.Fatalf("state filter (case-insensitive) %+v", got)
	}
	if got := list(nil, []string{"Consumer"}); len(got) != 0 {
		t.Fatalf("type filter %+v", got)
	}

	describe := func(version int16, groups ...string) []kmsg.DescribeGroupsResponseGroup {
		r := kmsg.NewDescribeGroupsRequest()
		r.Version = version
		r.Groups = groups
		return h.c.DescribeGroups(&r).Groups
	}
	d := describe(5, "stable", "missing")
	if d[0].State != "Stable" || d[0].Protocol != "range" || len(d[0].Members) != 2 || d[0].Members[0].ClientHost != "/127.0.0.1" {
		t.Fatalf("describe stable %+v", d[0])
	}
	for _, m := range d[0].Members {
		if string(m.MemberAssignment) != "assignment-"+m.MemberID || len(m.ProtocolMetadata) == 0 {
			t.Fatalf("member %+v", m)
		}
	}
	if d[1].State != "Dead" || d[1].ErrorCode != 0 {
		t.Fatalf("describe missing v5 %+v", d[1])
	}
	if d := describe(6, "missing"); d[0].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("describe missing v6 %+v", d[0])
	}

	del := func(groups ...string) map[string]int16 {
		r := kmsg.NewDeleteGroupsRequest()
		r.Version = 2
		r.Groups = groups
		out := make(map[string]int16)
		for _, g := range h.c.DeleteGroups(context.Background(), &r).Groups {
			out[g.Group] = g.ErrorCode
		}
		return out
	}
	codes := del("stable", "simple", "missing")
	if codes["stable"] != kerr.NonEmptyGroup.Code || codes["simple"] != 0 || codes["missing"] != kerr.GroupIDNotFound.Code {
		t.Fatalf("delete %v", codes)
	}
	if got, _ := h.fetch("simple", map[string][]int32{"t": {0}}); got["t/0"] != -1 {
		t.Fatalf("offsets of a deleted group %v", got)
	}
	if got := list(nil, nil); len(got) != 1 {
		t.Fatalf("list after delete %+v", got)
	}
	// The deletion is in the log: offsets tombstoned, then the group.
	recs := records(t, h.partitionOf("simple"))
	if last := recs[len(recs)-1]; last.value != nil {
		t.Fatalf("last record is not a tombstone")
	}

	// The stable group empties and can then be deleted.
	lv := kmsg.NewLeaveGroupRequest()
	lv.Version, lv.Group = 5, "stable"
	lv.Members = []kmsg.LeaveGroupRequestMember{{MemberID: ids[0]}, {MemberID: ids[1]}}
	h.c.LeaveGroup(context.Background(), &lv)
	if codes := del("stable"); codes["stable"] != 0 {
		t.Fatalf("delete emptied group %v", codes)
	}
}

func TestGroupOffsetsForLag(t *testing.T) {
	h := newHarness(t, nil, topic("t", 2))
	h.commit(commitReq(8, "payment", "", -1, map[string]map[int32]int64{"t": {0: 3, 1: 4}}))
	h.commit(commitReq(8, "inventory", "", -1, map[string]map[int32]int64{"t": {1: 9}}))
	gs := h.c.GroupOffsets()
	if len(gs) != 2 || gs[0].Group != "inventory" || gs[1].Group != "payment" || len(gs[1].Offsets) != 2 || gs[1].Offsets[1].Offset != 4 || gs[0].Type != "classic" {
		t.Fatalf("GroupOffsets %+v", gs)
	}
}

func TestDeleteTopicOffsets(t *testing.T) {
	h := newHarness(t, nil, topic("t", 2), topic("u", 1))
	for _, g := range []string{"a", "b", "c"} {
		h.commit(commitReq(8, g, "", -1, map[string]map[int32]int64{"t": {0: 1, 1: 2}, "u": {0: 3}}))
	}
	h.c.DeleteTopicOffsets(context.Background(), []string{"t"})
	for _, g := range []string{"a", "b", "c"} {
		if got, _ := h.fetch(g, nil); len(got) != 1 || got["u/0"] != 3 {
			t.Fatalf("group %s after deleting topic t: %v", g, got)
		}
	}
	n := h.moveTo()
	if got, _ := n.fetch("a", nil); len(got) != 1 {
		t.Fatalf("after load: %v", got)
	}
}
