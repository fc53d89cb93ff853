package group

import (
	"context"
	"sort"
	"time"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// offsetAndMetadata is a committed offset (Kafka's OffsetAndMetadata).
type offsetAndMetadata struct {
	offset          int64
	leaderEpoch     int32 // -1 when the commit carried none
	metadata        string
	commitTimestamp int64 // ms
	expireTimestamp int64 // ms, -1 unless the commit set a retention (v2-v4)
}

type topicPartition struct {
	topic     string
	partition int32
}

// groupOffsets holds a group's committed offsets, and counts commits that
// are appended but not yet committed: those are invisible to OffsetFetch
// but keep the group and its offsets from being deleted under them.
type groupOffsets struct {
	committed map[string]map[int32]offsetAndMetadata
	inflight  map[topicPartition]int
}

func (st *data) groupOffsets(groupID string, create bool) *groupOffsets {
	o := st.offsets[groupID]
	if o == nil && create {
		o = &groupOffsets{committed: make(map[string]map[int32]offsetAndMetadata), inflight: make(map[topicPartition]int)}
		st.offsets[groupID] = o
	}
	return o
}

// replayOffset applies a committed offset. A commit for a group that does
// not exist creates a "simple" classic group (Empty, no protocol type), as
// Kafka does for consumers that commit without joining.
func (st *data) replayOffset(groupID, topic string, partition int32, o offsetAndMetadata, now time.Time) {
	if st.groups[groupID] == nil {
		st.groups[groupID] = &group{classic: newClassicGroup(groupID, now)}
	}
	g := st.groupOffsets(groupID, true)
	ps := g.committed[topic]
	if ps == nil {
		ps = make(map[int32]offsetAndMetadata)
		g.committed[topic] = ps
	}
	ps[partition] = o
}

func (st *data) removeOffset(groupID, topic string, partition int32) {
	g := st.offsets[groupID]
	if g == nil {
		return
	}
	if ps := g.committed[topic]; ps != nil {
		delete(ps, partition)
		if len(ps) == 0 {
			delete(g.committed, topic)
		}
	}
	if len(g.committed) == 0 && len(g.inflight) == 0 {
		delete(st.offsets, groupID)
	}
}

func (st *data) committedOffset(groupID, topic string, partition int32) (offsetAndMetadata, bool) {
	g := st.offsets[groupID]
	if g == nil {
		return offsetAndMetadata{}, false
	}
	o, ok := g.committed[topic][partition]
	return o, ok
}

func (g *groupOffsets) startCommit(tp topicPartition) { g.inflight[tp]++ }

func (g *groupOffsets) endCommit(tp topicPartition) {
	if g.inflight[tp]--; g.inflight[tp] <= 0 {
		delete(g.inflight, tp)
	}
}

// javaLength is Java's String.length: UTF-16 code units, which is what
// offset.metadata.max.bytes is compared with.
func javaLength(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// partitionCheck is the broker-side check Kafka makes before the
// coordinator sees a commit or delete: the topic and partition exist. It
// returns the topic name (resolved from the id for OffsetCommit v10) and the
// error for the partition. Without topic metadata nothing is checked.
func (c *Coordinator) partitionCheck(topic string, id [16]byte, byID bool, partition int32) (string, int16) {
	if !c.checkTopics() {
		if byID {
			return "", kerr.UnknownTopicID.Code
		}
		return topic, 0
	}
	var (
		info TopicInfo
		ok   bool
	)
	if byID {
		info, ok = c.topics.TopicByID(id)
		if !ok {
			return "", kerr.UnknownTopicID.Code
		}
	} else {
		info, ok = c.topics.TopicByName(topic)
		if !ok {
			return topic, kerr.UnknownTopicOrPartition.Code
		}
	}
	if partition < 0 || partition >= info.Partitions {
		return info.Name, kerr.UnknownTopicOrPartition.Code
	}
	return info.Name, 0
}

func (c *Coordinator) checkTopics() bool {
	_, none := c.topics.(noTopics)
	return !none
}

// validateOffsetCommit is Kafka's OffsetMetadataManager.validateOffsetCommit
// with each group type's validateOffsetCommit. A commit with a negative
// generation to a group that does not exist creates a simple group.
func (s *state) validateOffsetCommit(req *kmsg.OffsetCommitRequest) (*group, int16) {
	grp := s.groups[req.Group]
	if grp == nil {
		if req.Generation < 0 {
			grp = &group{classic: newClassicGroup(req.Group, s.now)}
			s.groups[req.Group] = grp
			return grp, 0
		}
		if req.Version >= 9 {
			return nil, kerr.GroupIDNotFound.Code
		}
		return nil, kerr.IllegalGeneration.Code
	}
	if cg := grp.consumer; cg != nil {
		if req.Generation < 0 && len(cg.members) == 0 {
			return grp, 0
		}
		m := cg.members[req.MemberID]
		if m == nil {
			return nil, kerr.UnknownMemberID.Code
		}
		if req.Version < 9 {
			// Members of the consumer protocol must commit with v9+,
			// and STALE_MEMBER_EPOCH does not exist before it.
			return nil, kerr.UnsupportedVersion.Code
		}
		if req.Generation != m.memberEpoch {
			return nil, kerr.StaleMemberEpoch.Code
		}
		return grp, 0
	}
	g := grp.classic
	if g.state == classicDead {
		return nil, codeCoordinatorNotAvailable
	}
	if req.Generation < 0 && g.state == classicEmpty {
		// The admin client, or a consumer not using group management.
		return grp, 0
	}
	if req.Generation >= 0 || req.MemberID != "" || req.InstanceID != nil {
		if code := g.validateMember(req.MemberID, req.InstanceID); code != 0 {
			return nil, code
		}
		if req.Generation != g.generation {
			return nil, kerr.IllegalGeneration.Code
		}
	} else if g.state != classicEmpty {
		return nil, kerr.UnknownMemberID.Code
	}
	if g.state == classicCompletingRebalance {
		// The member has its new generation from JoinGroup but not yet
		// its assignment.
		return nil, kerr.RebalanceInProgress.Code
	}
	return grp, 0
}

// offsetCommit handles the partitions of an OffsetCommit that passed the
// broker-side checks (Kafka's OffsetMetadataManager.commitOffset). resp
// already holds every partition; entries points at the ones handled here.
// The response goes to reply once the records are committed.
func (s *state) offsetCommit(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, entries []commitEntry, reply chan *kmsg.OffsetCommitResponse) result {
	grp, code := s.validateOffsetCommit(req)
	if code != 0 {
		for _, e := range entries {
			*e.code = code
		}
		deliver(reply, resp)
		return result{}
	}
	if g := grp.classic; g != nil && (g.state == classicStable || g.state == classicPreparingRebalance) {
		// Classic members' commits keep their session alive.
		if m := g.members[req.MemberID]; m != nil {
			s.rescheduleClassicHeartbeat(g, m, m.sessionTimeoutMs)
		}
	}
	now := s.now.UnixMilli()
	expire := int64(-1)
	if req.RetentionTimeMillis != -1 && req.Version >= 2 && req.Version <= 4 {
		expire = now + req.RetentionTimeMillis
	}
	type commit struct {
		tp topicPartition
		o  offsetAndMetadata
	}
	var (
		records []kv
		commits []commit
	)
	for _, e := range entries {
		p := e.partition
		if p.Metadata != nil && javaLength(*p.Metadata) > int(s.cfg.OffsetMetadataMaxBytes) {
			*e.code = kerr.OffsetMetadataTooLarge.Code
			continue
		}
		o := offsetAndMetadata{
			offset:          p.Offset,
			leaderEpoch:     p.LeaderEpoch,
			commitTimestamp: now,
			expireTimestamp: expire,
		}
		if p.Metadata != nil {
			o.metadata = *p.Metadata
		}
		if req.Version < 6 {
			o.leaderEpoch = -1
		}
		records = append(records, offsetRecord(req.Group, e.topic, p.Partition, o))
		commits = append(commits, commit{topicPartition{e.topic, p.Partition}, o})
	}
	if len(records) == 0 {
		deliver(reply, resp)
		return result{}
	}
	offsets := s.groupOffsets(req.Group, true)
	for _, c := range commits {
		offsets.startCommit(c.tp)
	}
	groupID := req.Group
	return result{records: records, done: func(err error) {
		for _, c := range commits {
			offsets.endCommit(c.tp)
			if err == nil {
				s.replayOffset(groupID, c.tp.topic, c.tp.partition, c.o, s.now)
			}
		}
		if err != nil {
			code := errCode(err)
			for _, e := range entries {
				*e.code = code
			}
		}
		deliver(reply, resp)
	}}
}

// commitEntry is one partition of an OffsetCommit the coordinator handles:
// its topic name and where its error code goes in the response.
type commitEntry struct {
	topic     string
	partition kmsg.OffsetCommitRequestTopicPartition
	code      *int16
}

func (e commitEntry) errCode() *int16 { return e.code }

// commitOffsets runs an offset commit, plain or transactional, on the
// group's shard. build makes the response and the entries to write, whose
// error codes point into it; with none, the response is the answer. write
// turns the entries into the shard's records, answered on reply once they
// are committed; if ctx ends first, a fresh response answers
// COORDINATOR_NOT_AVAILABLE for every entry.
func commitOffsets[R any, E interface{ errCode() *int16 }](ctx context.Context, c *Coordinator, group string, build func() (R, []E), write func(s *state, resp R, entries []E, reply chan R) result) R {
	resp, entries := build()
	if len(entries) == 0 {
		return resp
	}
	s, code := c.shardFor(group)
	if code != 0 {
		for _, e := range entries {
			*e.errCode() = code
		}
		return resp
	}
	reply := make(chan R, 1)
	s.append(write(s.state, resp, entries, reply))
	s.unlockEvent()
	return wait(ctx, reply, func() R {
		r, es := build()
		for _, e := range es {
			*e.errCode() = codeCoordinatorNotAvailable
		}
		return r
	})
}

// offsetFetch answers one group of an OffsetFetch (Kafka's fetchOffsets and
// fetchAllOffsets). Topics named by id (v10) are resolved first; a group
// that does not exist has no offsets and no error.
func (s *state) offsetFetch(rg *kmsg.OffsetFetchRequestGroup, version int16, requireStable bool) kmsg.OffsetFetchResponseGroup {
	out := kmsg.NewOffsetFetchResponseGroup()
	out.Group = rg.Group
	grp := s.groups[rg.Group]
	exists := grp != nil
	if cg := grp.consumerOrNil(); cg != nil {
		if rg.MemberID != nil || rg.MemberEpoch >= 0 {
			var m *consumerMember
			if rg.MemberID != nil {
				m = cg.members[*rg.MemberID]
			}
			if m == nil {
				out.ErrorCode = kerr.UnknownMemberID.Code
				return out
			}
			if rg.MemberEpoch != m.memberEpoch {
				out.ErrorCode = kerr.StaleMemberEpoch.Code
				return out
			}
		}
	}
	byID := version >= 10
	if rg.Topics == nil {
		if !exists {
			return out
		}
		offsets := s.offsets[rg.Group]
		if offsets == nil {
			return out
		}
		for _, topic := range sortedKeys(offsets.committed) {
			t := kmsg.NewOffsetFetchResponseGroupTopic()
			t.Topic = topic
			if byID {
				info, ok := s.topics.TopicByName(topic)
				if !ok {
					continue
				}
				t.TopicID = info.ID
			}
			ps := offsets.committed[topic]
			ids := make([]int32, 0, len(ps))
			for p := range ps {
				ids = append(ids, p)
			}
			sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
			for _, p := range ids {
				fp := fetchedPartition(p, ps[p], true)
				if requireStable && s.hasPending(rg.Group, topicPartition{topic, p}) {
					// As for listed partitions (Kafka's fetchAllOffsets).
					fp.ErrorCode = kerr.UnstableOffsetCommit.Code
				}
				t.Partitions = append(t.Partitions, fp)
			}
			out.Topics = append(out.Topics, t)
		}
		return out
	}
	for _, rt := range rg.Topics {
		t := kmsg.NewOffsetFetchResponseGroupTopic()
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		name, unknownID := rt.Topic, false
		if byID {
			if info, ok := s.topics.TopicByID(rt.TopicID); ok {
				name = info.Name
			} else {
				unknownID = true
			}
		}
		for _, p := range rt.Partitions {
			o, ok := offsetAndMetadata{}, false
			if exists && !unknownID {
				o, ok = s.committedOffset(rg.Group, name, p)
			}
			fp := fetchedPartition(p, o, ok)
			if unknownID {
				fp.ErrorCode = kerr.UnknownTopicID.Code
			} else if requireStable && s.hasPending(rg.Group, topicPartition{name, p}) {
				// A transaction holds an offset not yet decided.
				fp.ErrorCode = kerr.UnstableOffsetCommit.Code
			}
			t.Partitions = append(t.Partitions, fp)
		}
		out.Topics = append(out.Topics, t)
	}
	return out
}

func fetchedPartition(p int32, o offsetAndMetadata, ok bool) kmsg.OffsetFetchResponseGroupTopicPartition {
	fp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
	fp.Partition = p
	if !ok {
		fp.Offset = -1
		fp.LeaderEpoch = -1
		fp.Metadata = kmsg.StringPtr("")
		return fp
	}
	fp.Offset = o.offset
	fp.LeaderEpoch = o.leaderEpoch
	fp.Metadata = kmsg.StringPtr(o.metadata)
	return fp
}

func (g *group) consumerOrNil() *consumerGroup {
	if g == nil {
		return nil
	}
	return g.consumer
}

// deleteEntry is one partition of an OffsetDelete the coordinator handles.
type deleteEntry struct {
	topic     string
	partition int32
	code      *int16
}

// offsetDelete handles an OffsetDelete (Kafka's deleteOffsets): offsets of
// topics the group does not consume are deleted once the tombstones are
// committed.
func (s *state) offsetDelete(req *kmsg.OffsetDeleteRequest, resp *kmsg.OffsetDeleteResponse, entries []deleteEntry, reply chan *kmsg.OffsetDeleteResponse) result {
	grp := s.groups[req.Group]
	if grp == nil {
		resp.ErrorCode = kerr.GroupIDNotFound.Code
		resp.Topics = nil
		deliver(reply, resp)
		return result{}
	}
	if g := grp.classic; g != nil {
		switch g.state {
		case classicDead:
			resp.ErrorCode = kerr.GroupIDNotFound.Code
			resp.Topics = nil
			deliver(reply, resp)
			return result{}
		case classicStable, classicPreparingRebalance, classicCompletingRebalance:
			if g.protocolType != "consumer" {
				resp.ErrorCode = kerr.NonEmptyGroup.Code
				resp.Topics = nil
				deliver(reply, resp)
				return result{}
			}
		}
	}
	var (
		records []kv
		deleted []topicPartition
	)
	offsets := s.offsets[req.Group]
	for _, e := range entries {
		if s.isSubscribedToTopic(grp, e.topic) {
			*e.code = kerr.GroupSubscribedToTopic.Code
			continue
		}
		tp := topicPartition{e.topic, e.partition}
		_, committed := s.committedOffset(req.Group, e.topic, e.partition)
		if committed || (offsets != nil && offsets.inflight[tp] > 0) {
			records = append(records, offsetTombstone(req.Group, e.topic, e.partition))
			deleted = append(deleted, tp)
		}
	}
	if len(records) == 0 {
		deliver(reply, resp)
		return result{}
	}
	groupID := req.Group
	return result{records: records, done: func(err error) {
		if err != nil {
			resp.ErrorCode = errCode(err)
			resp.Topics = nil
			deliver(reply, resp)
			return
		}
		for _, tp := range deleted {
			s.removeOffset(groupID, tp.topic, tp.partition)
		}
		deliver(reply, resp)
	}}
}

func (s *state) isSubscribedToTopic(grp *group, topic string) bool {
	if grp.consumer != nil {
		return grp.consumer.isSubscribedToTopic(topic)
	}
	return grp.classic.isSubscribedToTopic(topic)
}

func offsetsCleanupKey() timerKey { return timerKey{kind: timerOffsetsCleanup} }

func (s *state) scheduleOffsetsCleanup() {
	s.timers.schedule(offsetsCleanupKey(), s.now.Add(ms64(s.cfg.OffsetsRetentionCheckIntervalMs)), func() {
		s.append(s.cleanupGroupMetadata())
		s.scheduleOffsetsCleanup()
	})
}

// cleanupGroupMetadata is Kafka's periodic GroupCoordinatorShard
// cleanupGroupMetadata: expired offsets are deleted, and an empty group
// left with no offsets is deleted too.
func (s *state) cleanupGroupMetadata() result {
	var (
		records []kv
		expired []struct {
			group string
			tp    topicPartition
		}
		deletedGroups []string
	)
	for _, gid := range sortedKeys(s.groups) {
		grp := s.groups[gid]
		allExpired := true
		if offsets := s.offsets[gid]; offsets != nil {
			allExpired = len(offsets.inflight) == 0
			base, ok := s.offsetExpirationBase(grp)
			if !ok {
				continue
			}
			for _, topic := range sortedKeys(offsets.committed) {
				if s.isSubscribedToTopic(grp, topic) {
					allExpired = false
					continue
				}
				ps := offsets.committed[topic]
				for _, p := range sortedPartitions(ps) {
					o := ps[p]
					if offsets.inflight[topicPartition{topic, p}] > 0 || !s.isOffsetExpired(o, base) {
						allExpired = false
						continue
					}
					records = append(records, offsetTombstone(gid, topic, p))
					expired = append(expired, struct {
						group string
						tp    topicPartition
					}{gid, topicPartition{topic, p}})
				}
			}
		}
		if allExpired && grp.isEmpty() {
			records = append(records, groupTombstone(gid))
			deletedGroups = append(deletedGroups, gid)
			s.deleteGroupLocked(gid)
		}
	}
	if len(records) == 0 {
		return result{}
	}
	if len(expired) > 0 || len(deletedGroups) > 0 {
		s.logger().Info("expiring offsets and groups", "offsets", len(expired), "groups", len(deletedGroups))
	}
	return result{records: records, done: func(err error) {
		if err != nil {
			s.logger().Warn("failed to write expired offsets and groups", "err", err)
			return
		}
		for _, e := range expired {
			s.removeOffset(e.group, e.tp.topic, e.tp.partition)
		}
	}}
}

// offsetExpirationBase is Kafka's Group.offsetExpirationCondition: what an
// offset's age counts from. It reports false when no offset of the group
// may expire now.
func (s *state) offsetExpirationBase(grp *group) (func(o offsetAndMetadata) int64, bool) {
	commitTime := func(o offsetAndMetadata) int64 { return o.commitTimestamp }
	if grp.consumer != nil {
		return commitTime, true
	}
	g := grp.classic
	if g.protocolType == "" {
		// A simple group: offsets age from their commit.
		return commitTime, true
	}
	if g.state == classicEmpty {
		// Offsets of an empty group age from when it became empty.
		if g.stateTimestamp >= 0 {
			ts := g.stateTimestamp
			return func(offsetAndMetadata) int64 { return ts }, true
		}
		return commitTime, true
	}
	if g.protocolType == "consumer" && g.subscribedKnown && g.state == classicStable {
		// Offsets of topics no member subscribes to age from their commit.
		return commitTime, true
	}
	return nil, false
}

func (s *state) isOffsetExpired(o offsetAndMetadata, base func(offsetAndMetadata) int64) bool {
	now := s.now.UnixMilli()
	if o.expireTimestamp >= 0 {
		return now >= o.expireTimestamp
	}
	return now-base(o) >= s.cfg.offsetsRetention().Milliseconds()
}

func sortedPartitions(ps map[int32]offsetAndMetadata) []int32 {
	out := make([]int32, 0, len(ps))
	for p := range ps {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
