package group

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file holds one method per API the broker calls. Each takes the
// decoded request and returns the response for it, built with
// req.ResponseKind() so Version is already the request's; fields a version
// does not have are left for the encoder to skip.
//
// JoinGroup and SyncGroup block until the rebalance gets there (up to the
// members' rebalance timeouts); OffsetCommit, OffsetDelete, LeaveGroup,
// DeleteGroups and ConsumerGroupHeartbeat block until their records are
// committed (up to offsets.commit.timeout.ms). The broker should run them
// off the connection's read loop. If ctx ends first they return an error
// response, but what the request started goes on, as in Kafka.

// JoinGroup handles JoinGroup v0-v9.
func (c *Coordinator) JoinGroup(ctx context.Context, client Client, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	if req.Group == "" {
		return joinError(req.Version, kerr.InvalidGroupID.Code, req.MemberID)
	}
	if req.SessionTimeoutMillis < c.cfg.MinSessionTimeoutMs || req.SessionTimeoutMillis > c.cfg.MaxSessionTimeoutMs {
		return joinError(req.Version, kerr.InvalidSessionTimeout.Code, req.MemberID)
	}
	r := *req
	if r.Version == 0 {
		// v0 has no rebalance timeout; Kafka uses the session timeout.
		r.RebalanceTimeoutMillis = r.SessionTimeoutMillis
	}
	s, code := c.shardFor(r.Group)
	if code != 0 {
		return joinError(r.Version, code, "")
	}
	reply := make(chan *kmsg.JoinGroupResponse, 1)
	s.append(s.classicJoin(&r, client, reply))
	s.unlockEvent()
	return wait(ctx, reply, func() *kmsg.JoinGroupResponse {
		return joinError(r.Version, kerr.RebalanceInProgress.Code, r.MemberID)
	})
}

// SyncGroup handles SyncGroup v0-v5.
func (c *Coordinator) SyncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	fail := func(code int16) *kmsg.SyncGroupResponse {
		r := req.ResponseKind().(*kmsg.SyncGroupResponse)
		r.ErrorCode = code
		r.MemberAssignment = []byte{}
		return r
	}
	if req.Group == "" {
		return fail(kerr.InvalidGroupID.Code)
	}
	s, code := c.shardFor(req.Group)
	if code != 0 {
		return fail(code)
	}
	reply := make(chan *kmsg.SyncGroupResponse, 1)
	s.append(s.classicSync(req, reply))
	s.unlockEvent()
	return wait(ctx, reply, func() *kmsg.SyncGroupResponse { return fail(kerr.RebalanceInProgress.Code) })
}

// Heartbeat handles Heartbeat v0-v4. It never blocks.
func (c *Coordinator) Heartbeat(req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	s, code := c.shardFor(req.Group)
	if code == codeLoadInProgress {
		// Kafka answers a loading coordinator's heartbeats blindly: the
		// member's session is restored with the group.
		return resp
	}
	if code != 0 {
		resp.ErrorCode = code
		return resp
	}
	resp.ErrorCode = s.classicHeartbeat(req)
	s.unlockEvent()
	return resp
}

// LeaveGroup handles LeaveGroup v0-v5, v3+ leaving several members at once.
func (c *Coordinator) LeaveGroup(ctx context.Context, req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	members := req.Members
	if req.Version < 3 {
		members = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	finish := func() *kmsg.LeaveGroupResponse {
		if req.Version < 3 && resp.ErrorCode == 0 && len(resp.Members) > 0 {
			resp.ErrorCode = resp.Members[0].ErrorCode
		}
		return resp
	}
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return finish()
	}
	s, code := c.shardFor(req.Group)
	if code != 0 {
		resp.ErrorCode = code
		return finish()
	}
	grp := s.groups[req.Group]
	var res result
	switch {
	case grp == nil:
		for _, m := range members {
			resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: m.MemberID, InstanceID: m.InstanceID, ErrorCode: kerr.UnknownMemberID.Code})
		}
	case grp.consumer != nil:
		res = s.consumerLeaveViaClassic(grp.consumer, members, resp)
	default:
		res = s.classicLeave(grp.classic, members, resp)
	}
	if res.empty() {
		s.unlockEvent()
		return finish()
	}
	reply := make(chan int16, 1)
	res.done = chainDone(res.done, func(err error) { deliver(reply, errCode(err)) })
	s.append(res)
	s.unlockEvent()
	failed := wait(ctx, reply, func() int16 { return codeCoordinatorNotAvailable })
	if failed != 0 {
		r := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		r.ErrorCode = failed
		return r
	}
	return finish()
}

// consumerLeaveViaClassic removes KIP-848 members named in a LeaveGroup
// (Kafka's classicGroupLeaveToConsumerGroup), as the admin client does.
func (s *state) consumerLeaveViaClassic(g *consumerGroup, members []kmsg.LeaveGroupRequestMember, resp *kmsg.LeaveGroupResponse) result {
	var leaving []*consumerMember
	for _, rm := range members {
		mr := kmsg.LeaveGroupResponseMember{MemberID: rm.MemberID, InstanceID: rm.InstanceID}
		var m *consumerMember
		if rm.InstanceID == nil {
			m = g.members[rm.MemberID]
			if m == nil {
				mr.ErrorCode = kerr.UnknownMemberID.Code
			}
		} else {
			m = g.staticMember(*rm.InstanceID)
			switch {
			case m == nil:
				mr.ErrorCode = kerr.UnknownMemberID.Code
			case rm.MemberID != "" && rm.MemberID != m.id:
				mr.ErrorCode = kerr.FencedInstanceID.Code
				m = nil
			}
		}
		if m != nil {
			leaving = append(leaving, m)
		}
		resp.Members = append(resp.Members, mr)
	}
	if len(leaving) == 0 {
		return result{}
	}
	for _, m := range leaving {
		if g.members[m.id] == m {
			g.removeMember(m.id)
			s.cancelConsumerTimers(g.id, m.id)
		}
	}
	g.groupEpoch++
	return result{records: []kv{consumerGroupRecord(g, s.now)}}
}

// OffsetCommit handles OffsetCommit v0-v10 (v10 names topics by id).
func (c *Coordinator) OffsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	build := func() (*kmsg.OffsetCommitResponse, []commitEntry) { return c.offsetCommitEntries(req) }
	return commitOffsets(ctx, c, req.Group, build, func(s *state, resp *kmsg.OffsetCommitResponse, entries []commitEntry, reply chan *kmsg.OffsetCommitResponse) result {
		return s.offsetCommit(req, resp, entries, reply)
	})
}

// offsetCommitEntries is an OffsetCommit's response with every partition
// that fails the topic checks answered, and the entries for the rest.
func (c *Coordinator) offsetCommitEntries(req *kmsg.OffsetCommitRequest) (*kmsg.OffsetCommitResponse, []commitEntry) {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	byID := req.Version >= 10
	var entries []commitEntry
	for _, rt := range req.Topics {
		t := kmsg.NewOffsetCommitResponseTopic()
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		t.Partitions = make([]kmsg.OffsetCommitResponseTopicPartition, len(rt.Partitions))
		resp.Topics = append(resp.Topics, t)
	}
	for i, rt := range req.Topics {
		for j, rp := range rt.Partitions {
			out := &resp.Topics[i].Partitions[j]
			out.Partition = rp.Partition
			name, code := c.partitionCheck(rt.Topic, rt.TopicID, byID, rp.Partition)
			if code != 0 {
				out.ErrorCode = code
				continue
			}
			entries = append(entries, commitEntry{topic: name, partition: rp, code: &out.ErrorCode})
		}
	}
	return resp, entries
}

// OffsetFetch handles OffsetFetch v0-v10: one group before v8, a batch of
// groups from v8, topics by id from v10. A group that does not exist has no
// offsets (-1) and no error. Only committed offsets are returned; with
// RequireStable (v7+), a partition with a transactional offset not yet
// decided answers UNSTABLE_OFFSET_COMMIT, which clients retry, as Kafka
// does. It never blocks.
func (c *Coordinator) OffsetFetch(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	groups := req.Groups
	if req.Version < 8 {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = req.Group
		if req.Topics != nil {
			rg.Topics = make([]kmsg.OffsetFetchRequestGroupTopic, 0, len(req.Topics))
			for _, t := range req.Topics {
				rg.Topics = append(rg.Topics, kmsg.OffsetFetchRequestGroupTopic{Topic: t.Topic, Partitions: t.Partitions})
			}
		}
		groups = []kmsg.OffsetFetchRequestGroup{rg}
	}
	for i := range groups {
		rg := &groups[i]
		s, code := c.shardFor(rg.Group)
		if code != 0 {
			out := kmsg.NewOffsetFetchResponseGroup()
			out.Group, out.ErrorCode = rg.Group, code
			resp.Groups = append(resp.Groups, out)
			continue
		}
		resp.Groups = append(resp.Groups, s.offsetFetch(rg, req.Version, req.RequireStable))
		s.unlockEvent()
	}
	if req.Version >= 8 {
		return resp
	}
	g := resp.Groups[0]
	resp.Groups = nil
	resp.ErrorCode = g.ErrorCode
	if g.ErrorCode != 0 && req.Version < 2 {
		// Before v2 there is no top-level error: every partition asked
		// for carries it.
		for _, t := range groups[0].Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, g.ErrorCode
				rp.Metadata = kmsg.StringPtr("")
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	for _, t := range g.Topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// OffsetDelete handles OffsetDelete v0.
func (c *Coordinator) OffsetDelete(ctx context.Context, req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	var entries []deleteEntry
	for _, rt := range req.Topics {
		t := kmsg.NewOffsetDeleteResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.OffsetDeleteResponseTopicPartition, len(rt.Partitions))
		resp.Topics = append(resp.Topics, t)
	}
	for i, rt := range req.Topics {
		for j, rp := range rt.Partitions {
			out := &resp.Topics[i].Partitions[j]
			out.Partition = rp.Partition
			if _, code := c.partitionCheck(rt.Topic, [16]byte{}, false, rp.Partition); code != 0 {
				out.ErrorCode = code
				continue
			}
			entries = append(entries, deleteEntry{topic: rt.Topic, partition: rp.Partition, code: &out.ErrorCode})
		}
	}
	s, code := c.shardFor(req.Group)
	if code != 0 {
		r := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
		r.ErrorCode = code
		return r
	}
	reply := make(chan *kmsg.OffsetDeleteResponse, 1)
	s.append(s.offsetDelete(req, resp, entries, reply))
	s.unlockEvent()
	return wait(ctx, reply, func() *kmsg.OffsetDeleteResponse {
		r := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
		r.ErrorCode = codeCoordinatorNotAvailable
		return r
	})
}

// ListGroups handles ListGroups v0-v5 over the partitions this broker
// coordinates; the broker merges the answers of all brokers. A partition
// still loading fails the whole request with COORDINATOR_LOAD_IN_PROGRESS,
// as in Kafka. It never blocks.
func (c *Coordinator) ListGroups(req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	shards, closed := c.rt.Shards()
	if closed {
		resp.ErrorCode = codeCoordinatorNotAvailable
		return resp
	}
	states := make(map[string]bool)
	for _, st := range req.StatesFilter {
		states[strings.ToLower(strings.TrimSpace(st))] = true
	}
	types := make(map[string]bool)
	for _, t := range req.TypesFilter {
		types[strings.ToLower(strings.TrimSpace(t))] = true
	}
	resp.Groups = []kmsg.ListGroupsResponseGroup{}
	for _, sh := range shards {
		s, code := lockEvent(sh)
		if code == codeLoadInProgress {
			resp.ErrorCode = code
			resp.Groups = []kmsg.ListGroupsResponseGroup{}
			return resp
		}
		if code != 0 {
			continue
		}
		resp.Groups = s.listGroups(states, types, resp.Groups)
		s.unlockEvent()
	}
	return resp
}

// DescribeGroups handles DescribeGroups v0-v6 for classic groups. It never
// blocks.
func (c *Coordinator) DescribeGroups(req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		s, code := c.shardFor(id)
		if code != 0 {
			d := kmsg.NewDescribeGroupsResponseGroup()
			d.Group, d.ErrorCode = id, code
			resp.Groups = append(resp.Groups, d)
			continue
		}
		resp.Groups = append(resp.Groups, s.describeGroup(id, req.Version))
		s.unlockEvent()
	}
	return resp
}

// DeleteGroups handles DeleteGroups v0-v3.
func (c *Coordinator) DeleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	results := make([]*kmsg.DeleteGroupsResponseGroup, len(req.Groups))
	for i, id := range req.Groups {
		r := kmsg.NewDeleteGroupsResponseGroup()
		r.Group = id
		results[i] = &r
	}
	byShard := make(map[*shard][]int)
	var order []*shard
	for i, id := range req.Groups {
		sh, err := c.rt.Shard(c.HashPartition(id))
		if err != nil {
			results[i].ErrorCode = codeOf(err)
			continue
		}
		if byShard[sh] == nil {
			order = append(order, sh)
		}
		byShard[sh] = append(byShard[sh], i)
	}
	var replies []chan struct{}
	for _, sh := range order {
		idx := byShard[sh]
		s, code := lockEvent(sh)
		if code != 0 {
			for _, i := range idx {
				results[i].ErrorCode = code
			}
			continue
		}
		ids := make([]string, len(idx))
		rs := make([]*kmsg.DeleteGroupsResponseGroup, len(idx))
		for k, i := range idx {
			ids[k], rs[k] = req.Groups[i], results[i]
		}
		reply := make(chan struct{})
		s.append(s.deleteGroups(ids, rs, reply))
		s.unlockEvent()
		replies = append(replies, reply)
	}
	for _, reply := range replies {
		select {
		case <-reply:
		case <-ctx.Done():
			r := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
			for _, id := range req.Groups {
				g := kmsg.NewDeleteGroupsResponseGroup()
				g.Group, g.ErrorCode = id, codeCoordinatorNotAvailable
				r.Groups = append(r.Groups, g)
			}
			return r
		}
	}
	for _, r := range results {
		resp.Groups = append(resp.Groups, *r)
	}
	return resp
}

// ConsumerGroupHeartbeat handles ConsumerGroupHeartbeat v0-v1 (KIP-848).
func (c *Coordinator) ConsumerGroupHeartbeat(ctx context.Context, client Client, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	fail := func(code int16) *kmsg.ConsumerGroupHeartbeatResponse {
		r := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		r.ErrorCode = code
		return r
	}
	if !c.cfg.consumerProtocolEnabled() {
		return fail(kerr.UnsupportedVersion.Code)
	}
	if code, msg := c.validateConsumerGroupHeartbeat(req); code != 0 {
		r := fail(code)
		r.ErrorMessage = kmsg.StringPtr(msg)
		return r
	}
	s, code := c.shardFor(req.Group)
	if code != 0 {
		return fail(code)
	}
	reply := make(chan *kmsg.ConsumerGroupHeartbeatResponse, 1)
	s.append(s.consumerGroupHeartbeat(req, client, reply))
	s.unlockEvent()
	return wait(ctx, reply, func() *kmsg.ConsumerGroupHeartbeatResponse { return fail(codeCoordinatorNotAvailable) })
}

// ConsumerGroupDescribe handles ConsumerGroupDescribe v0-v1. It never
// blocks.
func (c *Coordinator) ConsumerGroupDescribe(req *kmsg.ConsumerGroupDescribeRequest) *kmsg.ConsumerGroupDescribeResponse {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	for _, id := range req.Groups {
		d := kmsg.NewConsumerGroupDescribeResponseGroup()
		d.Group = id
		switch {
		case !c.cfg.consumerProtocolEnabled():
			d.ErrorCode = kerr.UnsupportedVersion.Code
		case id == "":
			d.ErrorCode = kerr.InvalidGroupID.Code
		default:
			s, code := c.shardFor(id)
			if code != 0 {
				d.ErrorCode = code
				break
			}
			d = s.describeConsumerGroup(id)
			s.unlockEvent()
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp
}
