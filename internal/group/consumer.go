package group

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"regexp"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KIP-848 member epochs with a meaning of their own.
const (
	leaveGroupMemberEpoch       = -1 // the member leaves
	leaveGroupStaticMemberEpoch = -2 // a static member leaves for now, keeping its partitions
)

// regexRefreshInterval bounds how stale a resolved subscription regex may
// get before a heartbeat resolves it again against the topics.
const regexRefreshInterval = 10 * time.Second

// memberState is a KIP-848 member's reconciliation state (Kafka's
// MemberState).
type memberState uint8

const (
	memberStable               memberState = iota // reconciled to its epoch
	memberUnrevokedPartitions                     // must revoke partitions before going on
	memberUnreleasedPartitions                    // waits for partitions other members still own
)

func (s memberState) String() string {
	switch s {
	case memberUnrevokedPartitions:
		return "UNREVOKED_PARTITIONS"
	case memberUnreleasedPartitions:
		return "UNRELEASED_PARTITIONS"
	default:
		return "STABLE"
	}
}

type topicID = [16]byte

// partitions is a set of topic partitions keyed by topic id.
type partitions map[topicID]map[int32]struct{}

func (ps partitions) has(t topicID, p int32) bool {
	_, ok := ps[t][p]
	return ok
}

func (ps partitions) add(t topicID, p int32) {
	m := ps[t]
	if m == nil {
		m = make(map[int32]struct{})
		ps[t] = m
	}
	m[p] = struct{}{}
}

func (ps partitions) count() int {
	n := 0
	for _, m := range ps {
		n += len(m)
	}
	return n
}

func (ps partitions) clone() partitions {
	out := make(partitions, len(ps))
	for t, m := range ps {
		c := make(map[int32]struct{}, len(m))
		for p := range m {
			c[p] = struct{}{}
		}
		out[t] = c
	}
	return out
}

func (ps partitions) equal(o partitions) bool {
	if ps.count() != o.count() {
		return false
	}
	for t, m := range ps {
		for p := range m {
			if !o.has(t, p) {
				return false
			}
		}
	}
	return true
}

func sortedTopicIDs[V any](m map[topicID]V) []topicID {
	ids := make([]topicID, 0, len(m))
	for t := range m {
		ids = append(ids, t)
	}
	sort.Slice(ids, func(i, j int) bool { return bytes.Compare(ids[i][:], ids[j][:]) < 0 })
	return ids
}

func (ps partitions) sortedPartitions(t topicID) []int32 {
	out := make([]int32, 0, len(ps[t]))
	for p := range ps[t] {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// consumerMember is a KIP-848 member (Kafka's ConsumerGroupMember).
// Members are values in spirit: a change builds a new one with clone, and
// the group swaps it in with updateMember, which keeps the partition owners
// in step.
type consumerMember struct {
	id                   string
	instanceID           *string
	rackID               *string
	clientID             string
	clientHost           string
	rebalanceTimeoutMs   int32
	serverAssignor       string
	subscribedTopicNames []string // sorted, no duplicates
	subscribedTopicRegex string
	memberEpoch          int32
	previousMemberEpoch  int32
	state                memberState
	assigned             partitions
	pendingRevocation    partitions
}

func newConsumerMember(id string) *consumerMember {
	return &consumerMember{
		id:                 id,
		rebalanceTimeoutMs: -1,
		assigned:           make(partitions),
		pendingRevocation:  make(partitions),
	}
}

func (m *consumerMember) clone() *consumerMember {
	c := *m
	c.subscribedTopicNames = append([]string(nil), m.subscribedTopicNames...)
	c.assigned = m.assigned.clone()
	c.pendingRevocation = m.pendingRevocation.clone()
	return &c
}

func (m *consumerMember) isReconciledTo(epoch int32) bool {
	return m.state == memberStable && m.memberEpoch == epoch
}

// sameAssignmentState is whether reconciliation changed nothing.
func (m *consumerMember) sameAssignmentState(o *consumerMember) bool {
	return m.memberEpoch == o.memberEpoch && m.previousMemberEpoch == o.previousMemberEpoch &&
		m.state == o.state && m.assigned.equal(o.assigned) && m.pendingRevocation.equal(o.pendingRevocation)
}

func (m *consumerMember) updateMemberEpoch(epoch int32) {
	m.previousMemberEpoch, m.memberEpoch = m.memberEpoch, epoch
}

// consumerGroupState is a KIP-848 group's state (Kafka's ConsumerGroupState).
type consumerGroupState uint8

const (
	consumerEmpty consumerGroupState = iota
	consumerAssigning
	consumerReconciling
	consumerStable
)

func (s consumerGroupState) String() string {
	switch s {
	case consumerEmpty:
		return "Empty"
	case consumerAssigning:
		return "Assigning"
	case consumerReconciling:
		return "Reconciling"
	default:
		return "Stable"
	}
}

type partitionOwner struct {
	member string
	epoch  int32
}

type resolvedRegex struct {
	topics     map[string]struct{}
	resolvedAt time.Time
}

// consumerGroup is a KIP-848 group (Kafka's ConsumerGroup).
type consumerGroup struct {
	id              string
	groupEpoch      int32
	assignmentEpoch int32
	members         map[string]*consumerMember
	staticMembers   map[string]string     // instance id -> member id
	target          map[string]partitions // member id -> target assignment
	// owners is Kafka's currentPartitionEpoch map: which member holds a
	// partition (assigned or pending revocation) and at what epoch. A
	// partition is free for another member only when it has no owner.
	owners       map[topicID]map[int32]partitionOwner
	metadataHash uint64
	regexes      map[string]*resolvedRegex
}

func newConsumerGroup(id string) *consumerGroup {
	return &consumerGroup{
		id:            id,
		members:       make(map[string]*consumerMember),
		staticMembers: make(map[string]string),
		target:        make(map[string]partitions),
		owners:        make(map[topicID]map[int32]partitionOwner),
		regexes:       make(map[string]*resolvedRegex),
	}
}

func (g *consumerGroup) state() consumerGroupState {
	if len(g.members) == 0 {
		return consumerEmpty
	}
	if g.groupEpoch > g.assignmentEpoch {
		return consumerAssigning
	}
	for _, m := range g.members {
		if !m.isReconciledTo(g.assignmentEpoch) {
			return consumerReconciling
		}
	}
	return consumerStable
}

func (g *consumerGroup) staticMember(instanceID string) *consumerMember {
	if id, ok := g.staticMembers[instanceID]; ok {
		return g.members[id]
	}
	return nil
}

// currentPartitionEpoch is the epoch of the partition's owner, or -1.
func (g *consumerGroup) currentPartitionEpoch(t topicID, p int32) int32 {
	if o, ok := g.owners[t][p]; ok {
		return o.epoch
	}
	return -1
}

// updateMember swaps old for updated (either may be nil) and moves their
// partitions' ownership accordingly.
func (g *consumerGroup) updateMember(old, updated *consumerMember) {
	if old != nil {
		g.releasePartitions(old.id, old.assigned)
		g.releasePartitions(old.id, old.pendingRevocation)
		delete(g.members, old.id)
		if old.instanceID != nil && g.staticMembers[*old.instanceID] == old.id {
			delete(g.staticMembers, *old.instanceID)
		}
	}
	if updated != nil {
		g.members[updated.id] = updated
		if updated.instanceID != nil {
			g.staticMembers[*updated.instanceID] = updated.id
		}
		g.claimPartitions(updated.id, updated.memberEpoch, updated.assigned)
		g.claimPartitions(updated.id, updated.memberEpoch, updated.pendingRevocation)
	}
}

func (g *consumerGroup) releasePartitions(member string, ps partitions) {
	for t, m := range ps {
		owners := g.owners[t]
		for p := range m {
			if o, ok := owners[p]; ok && o.member == member {
				delete(owners, p)
			}
		}
		if len(owners) == 0 {
			delete(g.owners, t)
		}
	}
}

func (g *consumerGroup) claimPartitions(member string, epoch int32, ps partitions) {
	for t, m := range ps {
		owners := g.owners[t]
		if owners == nil {
			owners = make(map[int32]partitionOwner)
			g.owners[t] = owners
		}
		for p := range m {
			if o, ok := owners[p]; ok && o.member != member {
				// Reconciliation only hands out free partitions, so two
				// members never own one: the guarantee that no partition
				// is consumed twice.
				panic(fmt.Sprintf("group: invariant: partition %x-%d of group %q claimed by %s while owned by %s at epoch %d", t, p, g.id, member, o.member, o.epoch))
			}
			owners[p] = partitionOwner{member: member, epoch: epoch}
		}
	}
}

// removeMember removes a member and its target assignment.
func (g *consumerGroup) removeMember(id string) {
	if m := g.members[id]; m != nil {
		g.updateMember(m, nil)
	}
	delete(g.target, id)
}

// subscribedTopicNames is every topic a member subscribes to, by name or
// through a resolved regular expression.
func (g *consumerGroup) subscribedTopicNames() map[string]struct{} {
	out := make(map[string]struct{})
	for _, m := range g.members {
		for _, t := range m.subscribedTopicNames {
			out[t] = struct{}{}
		}
		if r := g.regexes[m.subscribedTopicRegex]; m.subscribedTopicRegex != "" && r != nil {
			for t := range r.topics {
				out[t] = struct{}{}
			}
		}
	}
	return out
}

func (g *consumerGroup) isSubscribedToTopic(topic string) bool {
	_, ok := g.subscribedTopicNames()[topic]
	return ok
}

// preferredAssignor is the server assignor most members ask for (Kafka's
// computePreferredServerAssignor), or def.
func (g *consumerGroup) preferredAssignor(def string) string {
	counts := make(map[string]int)
	for _, m := range g.members {
		if m.serverAssignor != "" {
			counts[m.serverAssignor]++
		}
	}
	best, n := def, 0
	for _, a := range sortedKeys(counts) {
		if counts[a] > n {
			best, n = a, counts[a]
		}
	}
	return best
}

// memberSubscribedTopicIDs resolves a member's subscription to topic ids;
// unknown topics are left out, as Kafka's TopicIds does.
func (s *state) memberSubscribedTopicIDs(g *consumerGroup, m *consumerMember) map[topicID]TopicInfo {
	out := make(map[topicID]TopicInfo)
	addName := func(name string) {
		if info, ok := s.topics.TopicByName(name); ok {
			out[info.ID] = info
		}
	}
	for _, name := range m.subscribedTopicNames {
		addName(name)
	}
	if m.subscribedTopicRegex != "" {
		if r := g.regexes[m.subscribedTopicRegex]; r != nil {
			for name := range r.topics {
				addName(name)
			}
		}
	}
	return out
}

// maybeResolveRegexes resolves the group's regular expressions that are new
// or stale, and forgets those no member uses any more.
func (s *state) maybeResolveRegexes(g *consumerGroup) {
	used := make(map[string]bool)
	for _, m := range g.members {
		if m.subscribedTopicRegex != "" {
			used[m.subscribedTopicRegex] = true
		}
	}
	for re := range g.regexes {
		if !used[re] {
			delete(g.regexes, re)
		}
	}
	for _, re := range sortedKeys(used) {
		if r := g.regexes[re]; r != nil && s.now.Sub(r.resolvedAt) < regexRefreshInterval {
			continue
		}
		compiled, err := compileSubscriptionRegex(re)
		if err != nil {
			continue
		}
		// Every topic in the image is a candidate, internal ones included:
		// Kafka's refreshRegularExpressions matches __consumer_offsets too.
		topics := make(map[string]struct{})
		for _, t := range s.topics.Topics() {
			if compiled.MatchString(t.Name) {
				topics[t.Name] = struct{}{}
			}
		}
		g.regexes[re] = &resolvedRegex{topics: topics, resolvedAt: s.now}
	}
}

// compileSubscriptionRegex compiles a KIP-848 subscription regex, which
// must match a whole topic name (RE2 syntax, as Kafka's RE2/J).
func compileSubscriptionRegex(re string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + re + ")$")
}

// computeMetadataHash fingerprints the subscribed topics' ids and partition
// counts: when it changes, the group epoch is bumped and the target
// assignment recomputed (Kafka's ModernGroup.computeMetadataHash).
func (s *state) computeMetadataHash(g *consumerGroup) uint64 {
	h := fnv.New64a()
	for _, name := range sortedKeys(g.subscribedTopicNames()) {
		info, ok := s.topics.TopicByName(name)
		if !ok {
			continue
		}
		h.Write([]byte(name))
		h.Write(info.ID[:])
		h.Write([]byte{byte(info.Partitions >> 24), byte(info.Partitions >> 16), byte(info.Partitions >> 8), byte(info.Partitions)})
	}
	return h.Sum64()
}

// computeTargetAssignment runs the group's assignor over every member,
// sticky to the previous target, and moves the target epoch to the group
// epoch (Kafka's TargetAssignmentBuilder).
func (s *state) computeTargetAssignment(g *consumerGroup) {
	specs := make([]memberSpec, 0, len(g.members))
	topics := make(map[topicID]int32)
	for _, id := range sortedKeys(g.members) {
		m := g.members[id]
		subs := s.memberSubscribedTopicIDs(g, m)
		spec := memberSpec{id: id, topics: sortedTopicIDs(subs)}
		for t, info := range subs {
			topics[t] = info.Partitions
		}
		specs = append(specs, spec)
	}
	assignor := g.preferredAssignor(s.cfg.ConsumerAssignors[0])
	var target map[string]partitions
	if assignor == AssignorRange {
		target = assignRange(specs, topics, g.target)
	} else {
		target = assignUniform(specs, topics, g.target)
	}
	g.target = target
	g.assignmentEpoch = g.groupEpoch
}

// reconcile is Kafka's CurrentAssignmentBuilder: it moves a member towards
// its target assignment, revoking before assigning and never assigning a
// partition another member still owns.
func (s *state) reconcile(g *consumerGroup, m *consumerMember, targetEpoch int32, target partitions, enforceSubscription bool, owned []kmsg.ConsumerGroupHeartbeatRequestTopic) *consumerMember {
	switch m.state {
	case memberStable:
		if m.memberEpoch != targetEpoch {
			return s.computeNextAssignment(g, m, targetEpoch, target, owned)
		}
		if enforceSubscription {
			return s.updateCurrentAssignment(g, m, owned)
		}
		return m
	case memberUnrevokedPartitions:
		if ownsRevokedPartitions(m.pendingRevocation, owned) {
			if enforceSubscription {
				return s.updateCurrentAssignment(g, m, owned)
			}
			return m
		}
		return s.computeNextAssignment(g, m, targetEpoch, target, owned)
	default:
		return s.computeNextAssignment(g, m, targetEpoch, target, owned)
	}
}

// ownsRevokedPartitions is whether the member still reports owning a
// partition it was asked to revoke; a heartbeat without the owned list
// counts as still owning them.
func ownsRevokedPartitions(pending partitions, owned []kmsg.ConsumerGroupHeartbeatRequestTopic) bool {
	if owned == nil {
		return true
	}
	for _, t := range owned {
		for _, p := range t.Partitions {
			if pending.has(t.TopicID, p) {
				return true
			}
		}
	}
	return false
}

// updateCurrentAssignment strips topics the member no longer subscribes to
// from its assignment, revoking them if it still owns them.
func (s *state) updateCurrentAssignment(g *consumerGroup, m *consumerMember, owned []kmsg.ConsumerGroupHeartbeatRequestTopic) *consumerMember {
	subscribed := s.memberSubscribedTopicIDs(g, m)
	next := m.clone()
	removed := false
	for t, ps := range m.assigned {
		if _, ok := subscribed[t]; ok {
			continue
		}
		removed = true
		delete(next.assigned, t)
		for p := range ps {
			next.pendingRevocation.add(t, p)
		}
	}
	if !removed {
		return m
	}
	next.updateMemberEpoch(m.memberEpoch)
	if len(next.pendingRevocation) > 0 && ownsRevokedPartitions(next.pendingRevocation, owned) {
		next.state = memberUnrevokedPartitions
		return next
	}
	// The removed partitions were already revoked.
	next.pendingRevocation = m.pendingRevocation.clone()
	return next
}

func (s *state) computeNextAssignment(g *consumerGroup, m *consumerMember, targetEpoch int32, target partitions, owned []kmsg.ConsumerGroupHeartbeatRequestTopic) *consumerMember {
	subscribed := s.memberSubscribedTopicIDs(g, m)
	hasUnreleased := false
	newAssigned := make(partitions)
	newPendingRevocation := make(partitions)
	newPendingAssignment := make(partitions)

	topics := make(map[topicID]struct{})
	for t := range target {
		topics[t] = struct{}{}
	}
	for t := range m.assigned {
		topics[t] = struct{}{}
	}
	for t := range topics {
		tgt := target[t]
		if _, ok := subscribed[t]; !ok {
			tgt = nil
		}
		for p := range m.assigned[t] {
			if _, keep := tgt[p]; keep {
				newAssigned.add(t, p)
			} else {
				newPendingRevocation.add(t, p)
			}
		}
		for p := range tgt {
			if newAssigned.has(t, p) {
				continue
			}
			if g.currentPartitionEpoch(t, p) != -1 && !m.pendingRevocation.has(t, p) {
				hasUnreleased = true
				continue
			}
			newPendingAssignment.add(t, p)
		}
	}

	next := m.clone()
	switch {
	case len(newPendingRevocation) > 0 && ownsRevokedPartitions(newPendingRevocation, owned):
		// Revoke first; the epoch does not move until the member has.
		next.state = memberUnrevokedPartitions
		next.updateMemberEpoch(m.memberEpoch)
		next.assigned = newAssigned
		next.pendingRevocation = newPendingRevocation
	case len(newPendingAssignment) > 0:
		for t, ps := range newPendingAssignment {
			for p := range ps {
				newAssigned.add(t, p)
			}
		}
		next.state = memberStable
		if hasUnreleased {
			next.state = memberUnreleasedPartitions
		}
		next.updateMemberEpoch(targetEpoch)
		next.assigned = newAssigned
		next.pendingRevocation = make(partitions)
	case hasUnreleased:
		next.state = memberUnreleasedPartitions
		next.updateMemberEpoch(targetEpoch)
		next.assigned = newAssigned
		next.pendingRevocation = make(partitions)
	default:
		next.state = memberStable
		next.updateMemberEpoch(targetEpoch)
		next.assigned = newAssigned
		next.pendingRevocation = make(partitions)
	}
	return next
}

// isSubsetOfAssigned is whether every owned partition is assigned.
func isSubsetOfAssigned(owned []kmsg.ConsumerGroupHeartbeatRequestTopic, assigned partitions) bool {
	if owned == nil {
		return false
	}
	for _, t := range owned {
		for _, p := range t.Partitions {
			if !assigned.has(t.TopicID, p) {
				return false
			}
		}
	}
	return true
}

// memberEpochError is Kafka's throwIfConsumerGroupMemberEpochIsInvalid: a
// member may be one epoch behind if it still owns only assigned partitions
// (its last response was lost).
func memberEpochError(m *consumerMember, epoch int32, owned []kmsg.ConsumerGroupHeartbeatRequestTopic) (int16, string) {
	if epoch == 0 {
		return 0, ""
	}
	if epoch > m.memberEpoch {
		return kerr.FencedMemberEpoch.Code, fmt.Sprintf("The consumer group member has a greater member epoch (%d) than the one known by the group coordinator (%d). The member must abandon all its partitions and rejoin.", epoch, m.memberEpoch)
	}
	if epoch < m.memberEpoch && (epoch != m.previousMemberEpoch || !isSubsetOfAssigned(owned, m.assigned)) {
		return kerr.FencedMemberEpoch.Code, fmt.Sprintf("The consumer group member has a smaller member epoch (%d) than the one known by the group coordinator (%d). The member must abandon all its partitions and rejoin.", epoch, m.memberEpoch)
	}
	return 0, ""
}

func consumerSessionKey(group, member string) timerKey {
	return timerKey{timerConsumerSession, group, member}
}

func consumerRebalanceKey(group, member string) timerKey {
	return timerKey{timerConsumerRebalance, group, member}
}

func (s *state) consumerGroup(id string) *consumerGroup {
	if g := s.groups[id]; g != nil {
		return g.consumer
	}
	return nil
}

func (s *state) scheduleConsumerSession(g *consumerGroup, memberID string) {
	gid := g.id
	s.timers.schedule(consumerSessionKey(gid, memberID), s.now.Add(ms(s.cfg.ConsumerSessionTimeoutMs)), func() {
		s.append(s.consumerGroupFenceMemberOperation(gid, memberID, "the member session expired"))
	})
}

func (s *state) scheduleConsumerRebalanceTimeout(g *consumerGroup, m *consumerMember) {
	gid, mid, epoch, timeout := g.id, m.id, m.memberEpoch, m.rebalanceTimeoutMs
	s.timers.schedule(consumerRebalanceKey(gid, mid), s.now.Add(ms(timeout)), func() {
		cg := s.consumerGroup(gid)
		if cg == nil {
			return
		}
		if cur := cg.members[mid]; cur != nil && cur.memberEpoch == epoch {
			s.logger().Info("member fenced: did not revoke partitions within its rebalance timeout", "group", gid, "member", mid, "epoch", epoch, "timeout_ms", timeout)
			s.append(s.consumerGroupFenceMember(cg, cur, nil))
		}
	})
}

func (s *state) cancelConsumerTimers(groupID, memberID string) {
	s.timers.cancel(consumerSessionKey(groupID, memberID))
	s.timers.cancel(consumerRebalanceKey(groupID, memberID))
}

func (s *state) consumerGroupFenceMemberOperation(groupID, memberID, reason string) result {
	g := s.consumerGroup(groupID)
	if g == nil {
		return result{}
	}
	m := g.members[memberID]
	if m == nil {
		return result{}
	}
	s.logger().Info("member fenced from the group", "group", groupID, "member", memberID, "reason", reason)
	return s.consumerGroupFenceMember(g, m, nil)
}

// consumerGroupFenceMember removes a member and bumps the group epoch; the
// target assignment is recomputed on the next heartbeat. done, if set, runs
// once the new epoch is persisted.
func (s *state) consumerGroupFenceMember(g *consumerGroup, m *consumerMember, done func(err error)) result {
	g.removeMember(m.id)
	g.groupEpoch++
	s.cancelConsumerTimers(g.id, m.id)
	return result{records: []kv{consumerGroupRecord(g, s.now)}, done: done}
}

// validateConsumerGroupHeartbeat is Kafka's
// throwIfConsumerGroupHeartbeatRequestIsInvalid.
func (c *Coordinator) validateConsumerGroupHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) (int16, string) {
	invalid := func(msg string) (int16, string) { return kerr.InvalidRequest.Code, msg }
	if (req.Version >= 1 || req.MemberEpoch > 0 || req.MemberEpoch == leaveGroupMemberEpoch) && req.MemberID == "" {
		return invalid("MemberId can't be empty.")
	}
	if req.Group == "" {
		return invalid("GroupId can't be empty.")
	}
	if req.InstanceID != nil && *req.InstanceID == "" {
		return invalid("InstanceId can't be empty.")
	}
	if req.RackID != nil && *req.RackID == "" {
		return invalid("RackId can't be empty.")
	}
	switch {
	case req.MemberEpoch == 0:
		if req.RebalanceTimeoutMillis == -1 {
			return invalid("RebalanceTimeoutMs must be provided in first request.")
		}
		if req.Topics == nil || len(req.Topics) > 0 {
			return invalid("TopicPartitions must be empty when (re-)joining.")
		}
		if req.SubscribedTopicNames == nil && req.SubscribedTopicRegex == nil {
			return invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
		}
	case req.MemberEpoch == leaveGroupStaticMemberEpoch:
		if req.InstanceID == nil {
			return invalid("InstanceId can't be null.")
		}
	case req.MemberEpoch < leaveGroupStaticMemberEpoch:
		return invalid("MemberEpoch is invalid.")
	}
	if req.SubscribedTopicRegex != nil {
		if _, err := compileSubscriptionRegex(*req.SubscribedTopicRegex); err != nil {
			return kerr.InvalidRegularExpression.Code, fmt.Sprintf("SubscribedTopicRegex %s is invalid: %v", *req.SubscribedTopicRegex, err)
		}
	}
	if req.ServerAssignor != nil && !c.cfg.hasAssignor(*req.ServerAssignor) {
		return kerr.UnsupportedAssignor.Code, fmt.Sprintf("ServerAssignor %s is not supported. Supported assignors: %s.", *req.ServerAssignor, joinComma(c.cfg.ConsumerAssignors))
	}
	return 0, ""
}

// consumerGroupHeartbeat handles a ConsumerGroupHeartbeat that passed
// validateConsumerGroupHeartbeat (Kafka's
// GroupMetadataManager.consumerGroupHeartbeat). The response goes to reply,
// after the new group epoch is persisted when it moved.
func (s *state) consumerGroupHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest, client Client, reply chan *kmsg.ConsumerGroupHeartbeatResponse) result {
	fail := func(code int16, msg string) result {
		r := &kmsg.ConsumerGroupHeartbeatResponse{Version: req.Version, ErrorCode: code}
		if msg != "" {
			r.ErrorMessage = kmsg.StringPtr(msg)
		}
		deliver(reply, r)
		return result{}
	}
	if req.MemberEpoch == leaveGroupMemberEpoch || req.MemberEpoch == leaveGroupStaticMemberEpoch {
		return s.consumerGroupLeave(req, reply)
	}

	// Get or create the group.
	create := req.MemberEpoch == 0
	var (
		pre        result
		g          *consumerGroup
		isNewGroup bool
	)
	switch grp := s.groups[req.Group]; {
	case grp == nil:
		if !create {
			return fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("Consumer group %s not found.", req.Group))
		}
		g, isNewGroup = newConsumerGroup(req.Group), true
	case grp.consumer != nil:
		g = grp.consumer
	case create && grp.classic.state == classicEmpty:
		// An empty classic group becomes a consumer group; its offsets stay.
		g, isNewGroup = newConsumerGroup(req.Group), true
		pre = result{records: []kv{groupTombstone(req.Group)}}
	default:
		return fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("Group %s is not a consumer group.", req.Group))
	}
	if int32(len(g.members)) >= s.cfg.ConsumerMaxSize && (req.MemberID == "" || g.members[req.MemberID] == nil) {
		return fail(kerr.GroupMaxSizeReached.Code, fmt.Sprintf("The consumer group has reached its maximum capacity of %d members.", s.cfg.ConsumerMaxSize))
	}

	// Get or create the member.
	memberID := req.MemberID
	if memberID == "" {
		memberID = newConsumerMemberID(s.uuid())
	}
	var member, replaced *consumerMember
	if req.InstanceID == nil {
		member = g.members[memberID]
		if member == nil {
			if !create {
				return fail(kerr.UnknownMemberID.Code, fmt.Sprintf("Member %s is not a member of group %s.", memberID, req.Group))
			}
			member = newConsumerMember(memberID)
		}
		if code, msg := memberEpochError(member, req.MemberEpoch, req.Topics); code != 0 {
			return fail(code, msg)
		}
	} else {
		existing := g.staticMember(*req.InstanceID)
		switch {
		case create && existing == nil:
			member = g.members[memberID]
			if member == nil {
				member = newConsumerMember(memberID)
			}
		case create:
			if existing.memberEpoch != leaveGroupStaticMemberEpoch {
				return fail(kerr.UnreleasedInstanceID.Code, fmt.Sprintf("Static member %s with instance id %s cannot join the group because the instance id is owned by %s member.", memberID, *req.InstanceID, existing.id))
			}
			// The rejoining static member takes over its predecessor's
			// assignment under its new member id.
			member = existing.clone()
			member.id = memberID
			member.memberEpoch, member.previousMemberEpoch = 0, 0
			replaced = existing
		default:
			if existing == nil {
				return fail(kerr.UnknownMemberID.Code, fmt.Sprintf("Instance id %s is unknown.", *req.InstanceID))
			}
			if existing.id != memberID {
				return fail(kerr.FencedInstanceID.Code, fmt.Sprintf("Static member %s with instance id %s was fenced by member %s.", memberID, *req.InstanceID, existing.id))
			}
			if code, msg := memberEpochError(existing, req.MemberEpoch, req.Topics); code != 0 {
				return fail(code, msg)
			}
			member = existing
		}
	}

	// 1. Create or update the member.
	updated := member.clone()
	if req.InstanceID != nil {
		id := *req.InstanceID
		updated.instanceID = &id
	}
	if req.RackID != nil {
		rack := *req.RackID
		updated.rackID = &rack
	}
	if req.RebalanceTimeoutMillis != -1 {
		updated.rebalanceTimeoutMs = req.RebalanceTimeoutMillis
	}
	if req.ServerAssignor != nil {
		updated.serverAssignor = *req.ServerAssignor
	}
	if req.SubscribedTopicNames != nil {
		updated.subscribedTopicNames = sortedUnique(req.SubscribedTopicNames)
	}
	if req.SubscribedTopicRegex != nil {
		updated.subscribedTopicRegex = *req.SubscribedTopicRegex
	}
	updated.clientID, updated.clientHost = client.ID, client.Host
	namesChanged := !equalStrings(updated.subscribedTopicNames, member.subscribedTopicNames)
	regexChanged := updated.subscribedTopicRegex != member.subscribedTopicRegex
	subscriptionChanged := namesChanged || regexChanged

	if isNewGroup {
		s.groups[req.Group] = &group{consumer: g}
	}
	if replaced != nil {
		inherited := g.target[replaced.id]
		g.removeMember(replaced.id)
		s.cancelConsumerTimers(g.id, replaced.id)
		g.updateMember(nil, updated)
		if inherited != nil {
			g.target[updated.id] = inherited
		}
	} else {
		g.updateMember(g.members[member.id], updated)
	}

	s.maybeResolveRegexes(g)
	hash := s.computeMetadataHash(g)
	bump := g.groupEpoch == 0 || subscriptionChanged || hash != g.metadataHash
	g.metadataHash = hash
	res := pre
	if bump {
		g.groupEpoch++
		res = res.and(result{records: []kv{consumerGroupRecord(g, s.now)}})
		s.logger().Info("bumped consumer group epoch", "group", g.id, "epoch", g.groupEpoch)
	}

	// 2. Update the target assignment.
	if g.groupEpoch > g.assignmentEpoch {
		s.computeTargetAssignment(g)
	}

	// 3. Reconcile the member towards its target.
	final := updated
	if subscriptionChanged || !updated.isReconciledTo(g.assignmentEpoch) {
		next := s.reconcile(g, updated, g.assignmentEpoch, g.target[updated.id], subscriptionChanged, req.Topics)
		if !next.sameAssignmentState(updated) {
			g.updateMember(updated, next)
			final = next
			if next.state == memberUnrevokedPartitions {
				s.scheduleConsumerRebalanceTimeout(g, next)
			} else {
				s.timers.cancel(consumerRebalanceKey(g.id, next.id))
			}
		}
	}
	s.scheduleConsumerSession(g, final.id)

	resp := &kmsg.ConsumerGroupHeartbeatResponse{
		Version:                 req.Version,
		MemberID:                kmsg.StringPtr(final.id),
		MemberEpoch:             final.memberEpoch,
		HeartbeatIntervalMillis: s.cfg.ConsumerHeartbeatIntervalMs,
	}
	full := req.RebalanceTimeoutMillis != -1 && (req.SubscribedTopicNames != nil || req.SubscribedTopicRegex != nil) && req.Topics != nil
	if req.MemberEpoch == 0 || full || !final.assigned.equal(member.assigned) {
		resp.Assignment = heartbeatAssignment(final.assigned)
	}
	if res.empty() {
		deliver(reply, resp)
		return result{}
	}
	res.done = chainDone(res.done, func(err error) {
		if err != nil {
			deliver(reply, &kmsg.ConsumerGroupHeartbeatResponse{Version: req.Version, ErrorCode: errCode(err)})
			return
		}
		deliver(reply, resp)
	})
	return res
}

// consumerGroupLeave handles a heartbeat with epoch -1 (leave) or -2 (a
// static member leaving for now).
func (s *state) consumerGroupLeave(req *kmsg.ConsumerGroupHeartbeatRequest, reply chan *kmsg.ConsumerGroupHeartbeatResponse) result {
	fail := func(code int16, msg string) result {
		deliver(reply, &kmsg.ConsumerGroupHeartbeatResponse{Version: req.Version, ErrorCode: code, ErrorMessage: kmsg.StringPtr(msg)})
		return result{}
	}
	grp := s.groups[req.Group]
	if grp == nil {
		return fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("Consumer group %s not found.", req.Group))
	}
	g := grp.consumer
	if g == nil {
		return fail(kerr.GroupIDNotFound.Code, fmt.Sprintf("Group %s is not a consumer group.", req.Group))
	}
	resp := &kmsg.ConsumerGroupHeartbeatResponse{Version: req.Version, MemberID: kmsg.StringPtr(req.MemberID), MemberEpoch: req.MemberEpoch}
	var m *consumerMember
	if req.InstanceID == nil {
		if m = g.members[req.MemberID]; m == nil {
			return fail(kerr.UnknownMemberID.Code, fmt.Sprintf("Member %s is not a member of group %s.", req.MemberID, req.Group))
		}
		s.logger().Info("member left the consumer group", "group", g.id, "member", m.id)
	} else {
		if m = g.staticMember(*req.InstanceID); m == nil {
			return fail(kerr.UnknownMemberID.Code, fmt.Sprintf("Instance id %s is unknown.", *req.InstanceID))
		}
		if m.id != req.MemberID {
			return fail(kerr.FencedInstanceID.Code, fmt.Sprintf("Static member %s with instance id %s was fenced by member %s.", req.MemberID, *req.InstanceID, m.id))
		}
		if req.MemberEpoch == leaveGroupStaticMemberEpoch {
			// The member keeps its partitions and target until it
			// rejoins or its session expires.
			left := m.clone()
			left.memberEpoch = leaveGroupStaticMemberEpoch
			left.pendingRevocation = make(partitions)
			g.updateMember(m, left)
			s.logger().Info("static member temporarily left the consumer group", "group", g.id, "member", m.id, "instance", *req.InstanceID)
			deliver(reply, &kmsg.ConsumerGroupHeartbeatResponse{Version: req.Version, MemberID: kmsg.StringPtr(m.id), MemberEpoch: leaveGroupStaticMemberEpoch})
			return result{}
		}
		s.logger().Info("static member left the consumer group", "group", g.id, "member", m.id, "instance", *req.InstanceID)
	}
	return s.consumerGroupFenceMember(g, m, func(err error) {
		if err != nil {
			deliver(reply, &kmsg.ConsumerGroupHeartbeatResponse{Version: req.Version, ErrorCode: errCode(err)})
			return
		}
		deliver(reply, resp)
	})
}

func heartbeatAssignment(ps partitions) *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	a := &kmsg.ConsumerGroupHeartbeatResponseAssignment{Topics: []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}}
	for _, t := range sortedTopicIDs(ps) {
		at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		at.TopicID = t
		at.Partitions = ps.sortedPartitions(t)
		a.Topics = append(a.Topics, at)
	}
	return a
}

// describeAssignment is a member's partitions as ConsumerGroupDescribe
// shows them, with topic names where the topic still exists.
func (s *state) describeAssignment(ps partitions) kmsg.Assignment {
	a := kmsg.NewAssignment()
	a.TopicPartitions = []kmsg.AssignmentTopicPartition{}
	for _, t := range sortedTopicIDs(ps) {
		tp := kmsg.NewAssignmentTopicPartition()
		tp.TopicID = t
		if info, ok := s.topics.TopicByID(t); ok {
			tp.Topic = info.Name
		}
		tp.Partitions = ps.sortedPartitions(t)
		a.TopicPartitions = append(a.TopicPartitions, tp)
	}
	return a
}

func chainDone(a, b func(error)) func(error) {
	if a == nil {
		return b
	}
	return func(err error) {
		a(err)
		b(err)
	}
}

func sortedUnique(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	n := 0
	for i, s := range out {
		if i == 0 || s != out[n-1] {
			out[n] = s
			n++
		}
	}
	return out[:n]
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func joinComma(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}
