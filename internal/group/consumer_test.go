package group

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// simMember is a KIP-848 client as the coordinator sees it: it owns what
// it was last assigned, and reports that on every heartbeat.
type simMember struct {
	h        *harness
	group    string
	id       string
	instance *string
	epoch    int32
	topics   []string
	regex    *string
	assignor *string
	owned    partitions
	left     bool
}

func (h *harness) newMember(group string, topics ...string) *simMember {
	return &simMember{h: h, group: group, id: newConsumerMemberID(randomUUID()), topics: topics, owned: make(partitions)}
}

func (m *simMember) request() *kmsg.ConsumerGroupHeartbeatRequest {
	r := kmsg.NewConsumerGroupHeartbeatRequest()
	r.Version = 1
	r.Group, r.MemberID, r.MemberEpoch, r.InstanceID = m.group, m.id, m.epoch, m.instance
	r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	for _, t := range sortedTopicIDs(m.owned) {
		r.Topics = append(r.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: t, Partitions: m.owned.sortedPartitions(t)})
	}
	if m.epoch == 0 {
		r.RebalanceTimeoutMillis = 30000
		r.SubscribedTopicNames = m.topics
		if r.SubscribedTopicNames == nil && m.regex == nil {
			r.SubscribedTopicNames = []string{}
		}
		r.SubscribedTopicRegex = m.regex
		r.ServerAssignor = m.assignor
		r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	return &r
}

func (m *simMember) send(r *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	m.h.t.Helper()
	return m.h.c.ConsumerGroupHeartbeat(context.Background(), testClient, r)
}

// heartbeat sends a heartbeat and applies the response as a client does:
// it takes the new epoch, and an assignment replaces what it owns (the
// client revokes what is gone before its next heartbeat).
func (m *simMember) heartbeat() *kmsg.ConsumerGroupHeartbeatResponse {
	m.h.t.Helper()
	resp := m.send(m.request())
	if resp.ErrorCode != 0 {
		return resp
	}
	m.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		m.owned = make(partitions)
		for _, t := range resp.Assignment.Topics {
			for _, p := range t.Partitions {
				m.owned.add(t.TopicID, p)
			}
		}
	}
	return resp
}

func (m *simMember) mustHeartbeat() *kmsg.ConsumerGroupHeartbeatResponse {
	m.h.t.Helper()
	resp := m.heartbeat()
	if resp.ErrorCode != 0 {
		m.h.t.Fatalf("heartbeat of %s: code %d (%v)", m.id, resp.ErrorCode, resp.ErrorMessage)
	}
	return resp
}

func (m *simMember) leave(epoch int32) *kmsg.ConsumerGroupHeartbeatResponse {
	r := kmsg.NewConsumerGroupHeartbeatRequest()
	r.Version = 1
	r.Group, r.MemberID, r.MemberEpoch, r.InstanceID = m.group, m.id, epoch, m.instance
	m.left = true
	m.owned = make(partitions)
	return m.send(&r)
}

// checkExclusive fails if two members own the same partition: the
// guarantee the incremental protocol gives without a group-wide barrier.
func checkExclusive(t *testing.T, members []*simMember) {
	t.Helper()
	seen := make(map[tp]string)
	for _, m := range members {
		if m.left {
			continue
		}
		for tid, ps := range m.owned {
			for p := range ps {
				if other, ok := seen[tp{tid, p}]; ok {
					t.Fatalf("partition %d owned by %s and %s", p, other, m.id)
				}
				seen[tp{tid, p}] = m.id
			}
		}
	}
}

func (h *harness) consumerState(group string) (groupState string, epoch, assignmentEpoch int32) {
	h.shard(group, func(s *state) {
		if g := s.consumerGroup(group); g != nil {
			groupState, epoch, assignmentEpoch = g.state().String(), g.groupEpoch, g.assignmentEpoch
		}
	})
	return
}

func TestConsumerGroupIncrementalRebalance(t *testing.T) {
	h := newHarness(t, nil, topic("t", 6))
	a := h.newMember("g", "t")
	r := a.mustHeartbeat()
	if r.MemberEpoch != 1 || a.owned.count() != 6 || r.HeartbeatIntervalMillis != 5000 || *r.MemberID != a.id {
		t.Fatalf("first member %+v owns %d", r, a.owned.count())
	}
	if st, e, ae := h.consumerState("g"); st != "Stable" || e != 1 || ae != 1 {
		t.Fatalf("state %s epoch %d/%d", st, e, ae)
	}

	// b joins: the target splits 3/3, but b gets nothing until a has
	// revoked; a keeps consuming its other three partitions throughout.
	b := h.newMember("g", "t")
	r = b.mustHeartbeat()
	if r.MemberEpoch != 2 || b.owned.count() != 0 {
		t.Fatalf("b joins: epoch %d owns %d", r.MemberEpoch, b.owned.count())
	}
	checkExclusive(t, []*simMember{a, b})

	// a learns it must give three up; its epoch waits until it has.
	r = a.mustHeartbeat()
	if r.MemberEpoch != 1 || a.owned.count() != 3 || r.Assignment == nil {
		t.Fatalf("a revokes: %+v owns %d", r, a.owned.count())
	}
	if st, _, _ := h.consumerState("g"); st != "Reconciling" {
		t.Fatalf("state %s", st)
	}
	// b is still waiting for them.
	if r = b.mustHeartbeat(); b.owned.count() != 0 {
		t.Fatalf("b got partitions a still owns: %+v", r)
	}
	checkExclusive(t, []*simMember{a, b})
	// a reports the revocation and moves to epoch 2; then b gets them.
	if r = a.mustHeartbeat(); r.MemberEpoch != 2 {
		t.Fatalf("a after revoking: %+v", r)
	}
	r = b.mustHeartbeat()
	if b.owned.count() != 3 || r.MemberEpoch != 2 {
		t.Fatalf("b after a revoked: %+v owns %d", r, b.owned.count())
	}
	checkExclusive(t, []*simMember{a, b})
	if st, e, _ := h.consumerState("g"); st != "Stable" || e != 2 {
		t.Fatalf("state %s epoch %d", st, e)
	}

	// Describe shows both members with their assignments.
	dr := kmsg.NewConsumerGroupDescribeRequest()
	dr.Groups = []string{"g", "missing"}
	d := h.c.ConsumerGroupDescribe(&dr)
	g := d.Groups[0]
	if g.ErrorCode != 0 || g.State != "Stable" || g.Epoch != 2 || g.AssignmentEpoch != 2 || g.AssignorName != "uniform" || len(g.Members) != 2 {
		t.Fatalf("describe %+v", g)
	}
	for _, m := range g.Members {
		if len(m.Assignment.TopicPartitions) != 1 || len(m.Assignment.TopicPartitions[0].Partitions) != 3 || m.Assignment.TopicPartitions[0].Topic != "t" || m.MemberEpoch != 2 || m.ClientHost != "/127.0.0.1" {
			t.Fatalf("member %+v", m)
		}
	}
	if d.Groups[1].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("describe missing %+v", d.Groups[1])
	}
	// ListGroups sees a consumer group.
	lr := kmsg.NewListGroupsRequest()
	lr.Version = 5
	lr.TypesFilter = []string{"consumer"}
	if l := h.c.ListGroups(&lr); len(l.Groups) != 1 || l.Groups[0].GroupType != "consumer" || l.Groups[0].ProtocolType != "consumer" {
		t.Fatalf("list %+v", l)
	}

	// b leaves: a gets everything back on its next heartbeat.
	if r := b.leave(-1); r.ErrorCode != 0 || r.MemberEpoch != -1 {
		t.Fatalf("leave %+v", r)
	}
	if r = a.mustHeartbeat(); a.owned.count() != 6 || r.MemberEpoch != 3 {
		t.Fatalf("a after b left: %+v owns %d", r, a.owned.count())
	}
}

func TestConsumerGroupSessionAndRebalanceTimeouts(t *testing.T) {
	h := newHarness(t, nil, topic("t", 4))
	a := h.newMember("g", "t")
	a.mustHeartbeat()
	b := h.newMember("g", "t")
	b.mustHeartbeat()

	// a is told to revoke but never does, though it keeps heartbeating
	// (keepalives carry no owned partitions, which counts as still owning).
	a.mustHeartbeat()
	keepalive := func(m *simMember) int16 {
		r := kmsg.NewConsumerGroupHeartbeatRequest()
		r.Version = 1
		r.Group, r.MemberID, r.MemberEpoch = m.group, m.id, m.epoch
		return m.send(&r).ErrorCode
	}
	for i := 0; i < 5; i++ {
		h.clock.Advance(5 * time.Second)
		if code := keepalive(a); code != 0 {
			t.Fatalf("keepalive %d: %d", i, code)
		}
		b.mustHeartbeat()
	}
	// 30s (its rebalance timeout) after it was asked to revoke, a is
	// fenced, and b can take everything.
	h.clock.Advance(5 * time.Second)
	h.idle()
	if code := keepalive(a); code != kerr.UnknownMemberID.Code {
		t.Fatalf("a after rebalance timeout: %d", code)
	}
	b.mustHeartbeat()
	if b.mustHeartbeat(); b.owned.count() != 4 {
		t.Fatalf("b owns %d", b.owned.count())
	}

	// b stops heartbeating: its 45s session ends and the group empties.
	h.clock.Advance(45 * time.Second)
	h.idle()
	if st, _, _ := h.consumerState("g"); st != "Empty" {
		t.Fatalf("state %s after session expiry", st)
	}
	if r := b.heartbeat(); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("expired member: %d", r.ErrorCode)
	}
}

func TestConsumerGroupStaticMembers(t *testing.T) {
	h := newHarness(t, nil, topic("t", 4))
	s1 := h.newMember("g", "t")
	s1.instance = kmsg.StringPtr("i1")
	s1.mustHeartbeat()
	d := h.newMember("g", "t")
	d.mustHeartbeat()
	s1.mustHeartbeat()
	s1.mustHeartbeat()
	d.mustHeartbeat()
	if s1.owned.count() != 2 || d.owned.count() != 2 {
		t.Fatalf("owned %d %d", s1.owned.count(), d.owned.count())
	}
	kept := s1.owned.clone()

	// Another process cannot take the instance id while it is in use.
	intruder := h.newMember("g", "t")
	intruder.instance = kmsg.StringPtr("i1")
	if r := intruder.heartbeat(); r.ErrorCode != kerr.UnreleasedInstanceID.Code {
		t.Fatalf("intruder: %d", r.ErrorCode)
	}

	// The static member leaves for a restart (epoch -2): it keeps its
	// partitions, and nobody else gets them.
	if r := s1.leave(-2); r.ErrorCode != 0 || r.MemberEpoch != -2 {
		t.Fatalf("static leave %+v", r)
	}
	d.mustHeartbeat()
	if d.owned.count() != 2 {
		t.Fatalf("dynamic member took the static member's partitions: %d", d.owned.count())
	}

	// It comes back with a new member id and gets the same partitions at
	// once, without a revocation round.
	restarted := h.newMember("g", "t")
	restarted.instance = kmsg.StringPtr("i1")
	restarted.mustHeartbeat()
	if !restarted.owned.equal(kept) {
		t.Fatalf("restarted static member owns %v, had %v", restarted.owned, kept)
	}
	checkExclusive(t, []*simMember{restarted, d})
	// The old member id is fenced.
	r := kmsg.NewConsumerGroupHeartbeatRequest()
	r.Version = 1
	r.Group, r.MemberID, r.MemberEpoch, r.InstanceID = "g", s1.id, s1.epoch, kmsg.StringPtr("i1")
	if resp := s1.send(&r); resp.ErrorCode != kerr.FencedInstanceID.Code {
		t.Fatalf("old static member: %d", resp.ErrorCode)
	}
}

func TestConsumerGroupEpochsAndValidation(t *testing.T) {
	h := newHarness(t, nil, topic("t", 2))
	a := h.newMember("g", "t")
	a.mustHeartbeat()

	bad := a.request()
	bad.MemberEpoch = a.epoch + 5
	if r := a.send(bad); r.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("epoch ahead: %d", r.ErrorCode)
	}
	// One epoch behind is accepted when the owned partitions are a subset
	// of the assignment: the member lost the response that bumped it.
	b := h.newMember("g", "t")
	b.mustHeartbeat()
	a.mustHeartbeat() // revoke one
	a.mustHeartbeat() // epoch 2
	prev := a.request()
	prev.MemberEpoch = 1
	if r := a.send(prev); r.ErrorCode != 0 || r.MemberEpoch != 2 {
		t.Fatalf("previous epoch: %+v", r)
	}
	prev.MemberEpoch = 0
	prev.MemberEpoch = -7
	if r := a.send(prev); r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("epoch -7: %d", r.ErrorCode)
	}

	unknown := h.newMember("g", "t")
	unknown.epoch = 3
	if r := unknown.heartbeat(); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("unknown member: %d", r.ErrorCode)
	}
	nogroup := h.newMember("nogroup", "t")
	nogroup.epoch = 3
	if r := nogroup.heartbeat(); r.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("unknown group: %d", r.ErrorCode)
	}

	for _, tc := range []struct {
		name string
		mod  func(r *kmsg.ConsumerGroupHeartbeatRequest)
		want *kerr.Error
	}{
		{"no member id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }, kerr.InvalidRequest},
		{"no rebalance timeout", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = -1 }, kerr.InvalidRequest},
		{"owned partitions on join", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: topic("t", 2).ID, Partitions: []int32{0}}}
		}, kerr.InvalidRequest},
		{"no subscription", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil }, kerr.InvalidRequest},
		{"unknown assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = kmsg.StringPtr("sticky") }, kerr.UnsupportedAssignor},
		{"bad regex", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicRegex = kmsg.StringPtr("(") }, kerr.InvalidRegularExpression},
		{"empty instance id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.InstanceID = kmsg.StringPtr("") }, kerr.InvalidRequest},
	} {
		m := h.newMember("g", "t")
		r := m.request()
		tc.mod(r)
		if resp := m.send(r); resp.ErrorCode != tc.want.Code || resp.ErrorMessage == nil {
			t.Errorf("%s: code %d, want %s", tc.name, resp.ErrorCode, tc.want.Message)
		}
	}
}

func TestConsumerGroupOffsets(t *testing.T) {
	h := newHarness(t, nil, topic("t", 2), topic("u", 1))
	a := h.newMember("g", "t")
	a.mustHeartbeat()

	commit := func(version int16, member string, epoch int32) int16 {
		return commitCodes(h.commit(commitReq(version, "g", member, epoch, map[string]map[int32]int64{"t": {0: 5}})))["t/0"]
	}
	for _, tc := range []struct {
		name    string
		version int16
		member  string
		epoch   int32
		want    int16
	}{
		{"current epoch", 9, a.id, a.epoch, 0},
		{"stale epoch", 9, a.id, a.epoch + 1, kerr.StaleMemberEpoch.Code},
		{"old version", 8, a.id, a.epoch, kerr.UnsupportedVersion.Code},
		{"unknown member", 9, "ghost", 1, kerr.UnknownMemberID.Code},
		{"admin commit to a group with members", 9, "", -1, kerr.UnknownMemberID.Code},
	} {
		if got := commit(tc.version, tc.member, tc.epoch); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}

	fetch := func(member *string, epoch int32) int16 {
		r := kmsg.NewOffsetFetchRequest()
		r.Version = 9
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group, g.MemberID, g.MemberEpoch = "g", member, epoch
		r.Groups = []kmsg.OffsetFetchRequestGroup{g}
		return h.c.OffsetFetch(&r).Groups[0].ErrorCode
	}
	if fetch(&a.id, a.epoch) != 0 || fetch(nil, -1) != 0 || fetch(&a.id, a.epoch+1) != kerr.StaleMemberEpoch.Code || fetch(kmsg.StringPtr("ghost"), 1) != kerr.UnknownMemberID.Code {
		t.Fatal("fetch validation")
	}

	// Offsets of a topic the group consumes cannot be deleted.
	h.commit(commitReq(9, "g", a.id, a.epoch, map[string]map[int32]int64{"u": {0: 1}}))
	dr := kmsg.NewOffsetDeleteRequest()
	dr.Group = "g"
	dr.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}, {Topic: "u", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
	resp := h.c.OffsetDelete(context.Background(), &dr)
	if resp.Topics[0].Partitions[0].ErrorCode != kerr.GroupSubscribedToTopic.Code || resp.Topics[1].Partitions[0].ErrorCode != 0 {
		t.Fatalf("offset delete %+v", resp)
	}

	// The group cannot be deleted while a member is in it.
	del := kmsg.NewDeleteGroupsRequest()
	del.Groups = []string{"g"}
	if r := h.c.DeleteGroups(context.Background(), &del); r.Groups[0].ErrorCode != kerr.NonEmptyGroup.Code {
		t.Fatalf("delete %+v", r)
	}
	a.leave(-1)
	// An empty consumer group takes admin commits.
	if got := commit(8, "", -1); got != 0 {
		t.Fatalf("admin commit to empty consumer group: %d", got)
	}
	if r := h.c.DeleteGroups(context.Background(), &del); r.Groups[0].ErrorCode != 0 {
		t.Fatalf("delete empty %+v", r)
	}
}

func TestConsumerGroupRangeAssignorAndRegex(t *testing.T) {
	h := newHarness(t, nil, topic("t1", 4), topic("t2", 4), topic("other", 2))
	a := h.newMember("g", "t1", "t2")
	a.assignor = kmsg.StringPtr("range")
	b := h.newMember("g", "t1", "t2")
	b.assignor = kmsg.StringPtr("range")
	members := []*simMember{a, b}
	for i := 0; i < 4; i++ {
		for _, m := range members {
			m.mustHeartbeat()
			checkExclusive(t, members)
		}
	}
	for _, m := range members {
		// Range: two contiguous partitions of each topic each.
		for _, name := range []string{"t1", "t2"} {
			ps := m.owned.sortedPartitions(topic(name, 4).ID)
			if len(ps) != 2 || ps[1] != ps[0]+1 {
				t.Fatalf("%s owns %v of %s", m.id, ps, name)
			}
		}
	}
	if got := h.c.ConsumerGroupDescribe(&kmsg.ConsumerGroupDescribeRequest{Groups: []string{"g"}}).Groups[0].AssignorName; got != "range" {
		t.Fatalf("assignor %s", got)
	}

	// A regex subscription matches whole topic names.
	re := &simMember{h: h, group: "re", id: newConsumerMemberID(randomUUID()), regex: kmsg.StringPtr("t[0-9]"), owned: make(partitions)}
	re.mustHeartbeat()
	if re.owned.count() != 8 || re.owned[topic("other", 2).ID] != nil {
		t.Fatalf("regex member owns %v", re.owned)
	}
}

func TestConsumerGroupTopicChanges(t *testing.T) {
	h := newHarness(t, nil, topic("t", 2))
	a := h.newMember("g", "t", "later")
	a.mustHeartbeat()
	if a.owned.count() != 2 {
		t.Fatalf("owns %d", a.owned.count())
	}
	// Partitions added and a subscribed topic created: the metadata
	// changes bump the epoch and the next heartbeat assigns them.
	h.topics.set(topic("t", 3))
	h.topics.set(topic("later", 1))
	r := a.mustHeartbeat()
	if a.owned.count() != 4 || r.MemberEpoch != 2 {
		t.Fatalf("after topic changes: %+v owns %d", r, a.owned.count())
	}
}

func TestConsumerGroupProtocolConversion(t *testing.T) {
	h := newHarness(t, nil, topic("t", 1))
	// An empty classic group (here a simple one) becomes a consumer group
	// and keeps its offsets.
	h.commit(commitReq(8, "g", "", -1, map[string]map[int32]int64{"t": {0: 7}}))
	a := h.newMember("g", "t")
	a.mustHeartbeat()
	if got, _ := h.fetch("g", nil); got["t/0"] != 7 {
		t.Fatalf("offsets after conversion %v", got)
	}
	// A classic member cannot join while consumer-protocol members are in
	// it (no online migration).
	if r := recv(t, h.join(joinReq(9, "g", ""))); r.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("classic join of a consumer group: %d", r.ErrorCode)
	}
	a.leave(-1)
	// Empty again, it becomes classic on the next JoinGroup.
	if r := recv(t, h.join(joinReq(9, "g", ""))); r.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("classic join of an empty consumer group: %d", r.ErrorCode)
	}
	// And a classic group with members refuses consumer-protocol members.
	h.stableGroup("c", 1)
	if r := h.newMember("c", "t").heartbeat(); r.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("consumer heartbeat to a classic group: %d", r.ErrorCode)
	}
}

// TestConsumerGroupRandomMembership churns members joining, leaving,
// heartbeating in random order and crashing, and checks after every step
// that no partition is owned by two clients at once, then that the group
// converges to a full, balanced assignment.
func TestConsumerGroupRandomMembership(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			h := newHarness(t, nil, topic("a", 7), topic("b", 5))
			var members []*simMember
			live := func() []*simMember {
				var out []*simMember
				for _, m := range members {
					if !m.left {
						out = append(out, m)
					}
				}
				return out
			}
			for step := 0; step < 300; step++ {
				switch n := rng.Intn(20); {
				case n == 0 || len(live()) == 0:
					topics := []string{"a", "b"}
					if rng.Intn(3) == 0 {
						topics = []string{"a"}
					}
					members = append(members, h.newMember("g", topics...))
				case n == 1 && len(live()) > 1:
					m := live()[rng.Intn(len(live()))]
					m.leave(-1)
				default:
					m := live()[rng.Intn(len(live()))]
					if r := m.heartbeat(); r.ErrorCode != 0 {
						t.Fatalf("step %d: heartbeat: %d %v", step, r.ErrorCode, r.ErrorMessage)
					}
				}
				checkExclusive(t, members)
			}
			// Converge: heartbeat everyone until the group is stable.
			for round := 0; round < 10; round++ {
				for _, m := range live() {
					m.mustHeartbeat()
					checkExclusive(t, members)
				}
			}
			if st, _, _ := h.consumerState("g"); st != "Stable" {
				t.Fatalf("state %s after convergence", st)
			}
			owned := 0
			var counts []int
			for _, m := range live() {
				owned += m.owned.count()
				counts = append(counts, m.owned.count())
			}
			if owned != 12 {
				t.Fatalf("%d of 12 partitions owned", owned)
			}
			sort.Ints(counts)
			t.Logf("%d members, counts %v", len(counts), counts)
		})
	}
}
