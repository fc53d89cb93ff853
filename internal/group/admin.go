package group

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// deleteGroupLocked removes a group and the deadlines that belong to it,
// so none of them can act on a later group of the same id.
func (s *state) deleteGroupLocked(id string) {
	grp := s.groups[id]
	if grp == nil {
		return
	}
	delete(s.groups, id)
	if g := grp.classic; g != nil {
		s.timers.cancel(timerKey{timerClassicJoin, id, ""})
		s.timers.cancel(timerKey{timerClassicSync, id, ""})
		for mid := range g.members {
			s.timers.cancel(classicHeartbeatKey(id, mid))
		}
		for mid := range g.pendingJoin {
			s.timers.cancel(classicHeartbeatKey(id, mid))
		}
		return
	}
	for mid := range grp.consumer.members {
		s.cancelConsumerTimers(id, mid)
	}
}

// listGroups appends the shard's groups that pass the filters (Kafka's
// GroupMetadataManager.listGroups; both filters are case-insensitive).
func (s *state) listGroups(states, types map[string]bool, out []kmsg.ListGroupsResponseGroup) []kmsg.ListGroupsResponseGroup {
	for _, id := range sortedKeys(s.groups) {
		grp := s.groups[id]
		if len(states) > 0 && !states[strings.ToLower(grp.stateName())] {
			continue
		}
		if len(types) > 0 && !types[grp.typeName()] {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group = id
		lg.GroupState = grp.stateName()
		lg.GroupType = grp.typeName()
		if grp.consumer != nil {
			lg.ProtocolType = "consumer"
		} else {
			lg.ProtocolType = grp.classic.protocolType
		}
		out = append(out, lg)
	}
	return out
}

// describeGroup describes a classic group (Kafka's describeGroups): a
// group that does not exist, or is not classic, is Dead, with
// GROUP_ID_NOT_FOUND from v6.
func (s *state) describeGroup(id string, version int16) kmsg.DescribeGroupsResponseGroup {
	d := kmsg.NewDescribeGroupsResponseGroup()
	d.Group = id
	g := s.classicGroup(id)
	if g == nil {
		d.State = classicDead.String()
		if version >= 6 {
			d.ErrorCode = kerr.GroupIDNotFound.Code
			msg := fmt.Sprintf("Group %s not found.", id)
			if s.groups[id] != nil {
				msg = fmt.Sprintf("Group %s is not a classic group.", id)
			}
			d.ErrorMessage = kmsg.StringPtr(msg)
		}
		return d
	}
	d.State = g.state.String()
	d.ProtocolType = g.protocolType
	stable := g.state == classicStable
	if stable {
		d.Protocol = g.protocolName
	}
	d.Members = []kmsg.DescribeGroupsResponseGroupMember{}
	for _, mid := range g.sortedMemberIDs() {
		m := g.members[mid]
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID = m.id
		dm.InstanceID = m.instanceID
		dm.ClientID = m.clientID
		dm.ClientHost = m.clientHost
		dm.ProtocolMetadata = []byte{}
		dm.MemberAssignment = []byte{}
		if stable {
			dm.ProtocolMetadata = m.metadata(g.protocolName)
			dm.MemberAssignment = m.assignment
		}
		d.Members = append(d.Members, dm)
	}
	return d
}

// describeConsumerGroup describes a KIP-848 group (Kafka's
// consumerGroupDescribe).
func (s *state) describeConsumerGroup(id string) kmsg.ConsumerGroupDescribeResponseGroup {
	d := kmsg.NewConsumerGroupDescribeResponseGroup()
	d.Group = id
	grp := s.groups[id]
	if grp == nil || grp.consumer == nil {
		d.ErrorCode = kerr.GroupIDNotFound.Code
		msg := fmt.Sprintf("Group %s not found.", id)
		if grp != nil {
			msg = fmt.Sprintf("Group %s is not a consumer group.", id)
		}
		d.ErrorMessage = kmsg.StringPtr(msg)
		return d
	}
	g := grp.consumer
	d.State = g.state().String()
	d.Epoch = g.groupEpoch
	d.AssignmentEpoch = g.assignmentEpoch
	d.AssignorName = g.preferredAssignor(s.cfg.ConsumerAssignors[0])
	d.Members = []kmsg.ConsumerGroupDescribeResponseGroupMember{}
	for _, mid := range sortedKeys(g.members) {
		m := g.members[mid]
		dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
		dm.MemberID = m.id
		dm.InstanceID = m.instanceID
		dm.RackID = m.rackID
		dm.MemberEpoch = m.memberEpoch
		dm.ClientID = m.clientID
		dm.ClientHost = m.clientHost
		dm.SubscribedTopics = append([]string{}, m.subscribedTopicNames...)
		if m.subscribedTopicRegex != "" {
			dm.SubscribedTopicRegex = kmsg.StringPtr(m.subscribedTopicRegex)
		}
		dm.MemberType = 1 // a member of the consumer protocol
		dm.Assignment = s.describeAssignment(m.assigned)
		dm.TargetAssignment = s.describeAssignment(g.target[m.id])
		d.Members = append(d.Members, dm)
	}
	return d
}

// deleteGroups deletes the shard's part of a DeleteGroups (Kafka's
// GroupCoordinatorShard.deleteGroups): an empty group's offsets and the
// group itself are tombstoned. results[i] answers ids[i]; they are final
// once the records are committed.
func (s *state) deleteGroups(ids []string, results []*kmsg.DeleteGroupsResponseGroup, reply chan struct{}) result {
	var (
		records []kv
		deleted = make(map[string]*group)
		removed []struct {
			group string
			tp    topicPartition
		}
	)
	for i, id := range ids {
		grp := s.groups[id]
		if code := validateDeleteGroup(grp); code != 0 {
			results[i].ErrorCode = code
			continue
		}
		if offsets := s.offsets[id]; offsets != nil {
			seen := make(map[topicPartition]bool)
			for _, topic := range sortedKeys(offsets.committed) {
				for _, p := range sortedPartitions(offsets.committed[topic]) {
					seen[topicPartition{topic, p}] = true
				}
			}
			for tp := range offsets.inflight {
				seen[tp] = true
			}
			tps := make([]topicPartition, 0, len(seen))
			for tp := range seen {
				tps = append(tps, tp)
			}
			sort.Slice(tps, func(i, j int) bool {
				if tps[i].topic != tps[j].topic {
					return tps[i].topic < tps[j].topic
				}
				return tps[i].partition < tps[j].partition
			})
			for _, tp := range tps {
				records = append(records, offsetTombstone(id, tp.topic, tp.partition))
				removed = append(removed, struct {
					group string
					tp    topicPartition
				}{id, tp})
			}
		}
		records = append(records, groupTombstone(id))
		deleted[id] = grp
		s.deleteGroupLocked(id)
	}
	if len(records) == 0 {
		close(reply)
		return result{}
	}
	return result{records: records, done: func(err error) {
		if err != nil {
			code := errCode(err)
			for i, id := range ids {
				if grp := deleted[id]; grp != nil {
					results[i].ErrorCode = code
					// The group is still in the log: put it back unless
					// the id was reused meanwhile.
					if s.groups[id] == nil {
						s.groups[id] = grp
					}
				}
			}
			close(reply)
			return
		}
		for _, r := range removed {
			s.removeOffset(r.group, r.tp.topic, r.tp.partition)
		}
		close(reply)
	}}
}

// validateDeleteGroup is each group type's validateDeleteGroup.
func validateDeleteGroup(grp *group) int16 {
	switch {
	case grp == nil:
		return kerr.GroupIDNotFound.Code
	case grp.consumer != nil:
		if grp.consumer.state() != consumerEmpty {
			return kerr.NonEmptyGroup.Code
		}
	default:
		switch grp.classic.state {
		case classicDead:
			return kerr.GroupIDNotFound.Code
		case classicStable, classicPreparingRebalance, classicCompletingRebalance:
			return kerr.NonEmptyGroup.Code
		}
	}
	return 0
}

// GroupOffsets is one group and its committed offsets, for metrics and the
// CLI: lag is each partition's high watermark minus Offset.
type GroupOffsets struct {
	Group string
	// Type is "classic" or "consumer" (KIP-848).
	Type string
	// State is the group's state as ListGroups shows it.
	State   string
	Members int
	Offsets []CommittedOffset
}

// CommittedOffset is a committed offset of a group.
type CommittedOffset struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// GroupOffsets lists every group of the partitions this broker coordinates,
// with its committed offsets, in group id order. Partitions still loading
// are left out.
func (c *Coordinator) GroupOffsets() []GroupOffsets {
	shards, _ := c.rt.Shards()
	var out []GroupOffsets
	for _, sh := range shards {
		s, code := lockEvent(sh)
		if code != 0 {
			continue
		}
		for _, id := range sortedKeys(s.groups) {
			grp := s.groups[id]
			g := GroupOffsets{Group: id, Type: grp.typeName(), State: grp.stateName()}
			if grp.consumer != nil {
				g.Members = len(grp.consumer.members)
			} else {
				g.Members = len(grp.classic.members)
			}
			if offsets := s.offsets[id]; offsets != nil {
				for _, topic := range sortedKeys(offsets.committed) {
					ps := offsets.committed[topic]
					for _, p := range sortedPartitions(ps) {
						o := ps[p]
						g.Offsets = append(g.Offsets, CommittedOffset{Topic: topic, Partition: p, Offset: o.offset, LeaderEpoch: o.leaderEpoch, Metadata: o.metadata})
					}
				}
			}
			out = append(out, g)
		}
		s.unlockEvent()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// DeleteTopicOffsets deletes every group's committed offsets for topics,
// which were deleted (Kafka's onPartitionsDeleted). The broker calls it
// when it deletes topics; it returns once the tombstones are committed on
// every partition this broker coordinates, or ctx ends.
func (c *Coordinator) DeleteTopicOffsets(ctx context.Context, topics []string) {
	deleted := make(map[string]bool, len(topics))
	for _, t := range topics {
		deleted[t] = true
	}
	shards, _ := c.rt.Shards()
	var replies []chan struct{}
	for _, sh := range shards {
		s, code := lockEvent(sh)
		if code != 0 {
			continue
		}
		reply := make(chan struct{})
		s.append(s.deleteTopicOffsets(deleted, reply))
		s.unlockEvent()
		replies = append(replies, reply)
	}
	for _, r := range replies {
		select {
		case <-r:
		case <-ctx.Done():
			return
		}
	}
}

func (s *state) deleteTopicOffsets(deleted map[string]bool, reply chan struct{}) result {
	var (
		records []kv
		removed []struct {
			group string
			tp    topicPartition
		}
	)
	for _, gid := range sortedKeys(s.offsets) {
		offsets := s.offsets[gid]
		for _, topic := range sortedKeys(offsets.committed) {
			if !deleted[topic] {
				continue
			}
			for _, p := range sortedPartitions(offsets.committed[topic]) {
				records = append(records, offsetTombstone(gid, topic, p))
				removed = append(removed, struct {
					group string
					tp    topicPartition
				}{gid, topicPartition{topic, p}})
			}
		}
	}
	if len(records) == 0 {
		close(reply)
		return result{}
	}
	return result{records: records, done: func(err error) {
		if err != nil {
			s.logger().Warn("failed to delete offsets of deleted topics", "err", err)
		} else {
			for _, r := range removed {
				s.removeOffset(r.group, r.tp.topic, r.tp.partition)
			}
		}
		close(reply)
	}}
}
