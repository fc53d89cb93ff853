package group

import (
	"bytes"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// classicState is a classic group's state (Kafka's ClassicGroupState).
type classicState uint8

const (
	classicEmpty classicState = iota
	classicPreparingRebalance
	classicCompletingRebalance
	classicStable
	classicDead
)

func (s classicState) String() string {
	switch s {
	case classicEmpty:
		return "Empty"
	case classicPreparingRebalance:
		return "PreparingRebalance"
	case classicCompletingRebalance:
		return "CompletingRebalance"
	case classicStable:
		return "Stable"
	default:
		return "Dead"
	}
}

// validPrevious reports whether a group may move from prev to s.
func (s classicState) validPrevious(prev classicState) bool {
	switch s {
	case classicEmpty:
		return prev == classicPreparingRebalance
	case classicPreparingRebalance:
		return prev == classicStable || prev == classicCompletingRebalance || prev == classicEmpty
	case classicCompletingRebalance:
		return prev == classicPreparingRebalance
	case classicStable:
		return prev == classicCompletingRebalance
	default:
		return true
	}
}

type protocol struct {
	name     string
	metadata []byte
}

// classicMember is a member of a classic group (Kafka's ClassicGroupMember).
type classicMember struct {
	id                 string
	instanceID         *string
	clientID           string
	clientHost         string
	rebalanceTimeoutMs int32
	sessionTimeoutMs   int32
	protocolType       string
	protocols          []protocol // in the member's order of preference
	assignment         []byte

	// joinReply and syncReply are set while a JoinGroup or SyncGroup is
	// parked, waiting for the rebalance to get there.
	joinReply   chan *kmsg.JoinGroupResponse
	joinVersion int16
	syncReply   chan *kmsg.SyncGroupResponse
	syncVersion int16
	// isNew is set from a member's first join until its join completes; a
	// new member's parked join expires after NewMemberJoinTimeoutMs.
	isNew bool
}

func (m *classicMember) awaitingJoin() bool { return m.joinReply != nil }
func (m *classicMember) awaitingSync() bool { return m.syncReply != nil }

// hasSatisfiedHeartbeat is whether an expiring session is excused: members
// parked in a rebalance cannot heartbeat.
func (m *classicMember) hasSatisfiedHeartbeat() bool {
	if m.isNew {
		return false
	}
	return m.awaitingJoin() || m.awaitingSync()
}

func (m *classicMember) metadata(protocolName string) []byte {
	for _, p := range m.protocols {
		if p.name == protocolName {
			return p.metadata
		}
	}
	return nil
}

// matches is whether a rejoin brings the same protocols and metadata.
func (m *classicMember) matches(protocols []kmsg.JoinGroupRequestProtocol) bool {
	if len(protocols) != len(m.protocols) {
		return false
	}
	for i, p := range protocols {
		if p.Name != m.protocols[i].name || !bytes.Equal(p.Metadata, m.protocols[i].metadata) {
			return false
		}
	}
	return true
}

// vote is the member's most preferred protocol among candidates.
func (m *classicMember) vote(candidates map[string]bool) string {
	for _, p := range m.protocols {
		if candidates[p.name] {
			return p.name
		}
	}
	panic(fmt.Sprintf("group: invariant: member %s supports none of the group's candidate protocols", m.id))
}

func requestProtocols(ps []kmsg.JoinGroupRequestProtocol) []protocol {
	out := make([]protocol, len(ps))
	for i, p := range ps {
		out[i] = protocol{name: p.Name, metadata: append([]byte(nil), p.Metadata...)}
	}
	return out
}

// classicGroup is a classic group (Kafka's ClassicGroup).
type classicGroup struct {
	id             string
	state          classicState
	prevState      classicState
	stateTimestamp int64 // ms of the last transition, -1 if unknown
	protocolType   string
	protocolName   string
	generation     int32
	leader         string

	members            map[string]*classicMember
	staticMembers      map[string]string   // instance id -> member id
	pendingJoin        map[string]struct{} // members told MEMBER_ID_REQUIRED that have not joined
	pendingSync        map[string]struct{} // members yet to send SyncGroup this generation
	numAwaitingJoin    int
	supportedProtocols map[string]int
	// subscribedTopics is known when the group uses the "consumer"
	// protocol type and its members' subscriptions parsed.
	subscribedTopics map[string]struct{}
	subscribedKnown  bool
	newMemberAdded   bool
}

func newClassicGroup(id string, now time.Time) *classicGroup {
	return &classicGroup{
		id:                 id,
		state:              classicEmpty,
		prevState:          classicDead,
		stateTimestamp:     now.UnixMilli(),
		members:            make(map[string]*classicMember),
		staticMembers:      make(map[string]string),
		pendingJoin:        make(map[string]struct{}),
		pendingSync:        make(map[string]struct{}),
		supportedProtocols: make(map[string]int),
	}
}

// classicGroupFromValue rebuilds a group from its last GroupMetadataValue
// (Kafka's replay of GroupMetadataKey): Stable with its members, or Empty.
func classicGroupFromValue(id string, v *kmsg.GroupMetadataValue, now time.Time) *classicGroup {
	g := newClassicGroup(id, now)
	g.protocolType = v.ProtocolType
	g.generation = v.Generation
	if v.Protocol != nil {
		g.protocolName = *v.Protocol
	}
	if v.Leader != nil {
		g.leader = *v.Leader
	}
	g.stateTimestamp = v.CurrentStateTimestamp
	for _, mv := range v.Members {
		rt := mv.RebalanceTimeoutMillis
		if rt == -1 {
			rt = mv.SessionTimeoutMillis
		}
		m := &classicMember{
			id:                 mv.MemberID,
			clientID:           mv.ClientID,
			clientHost:         mv.ClientHost,
			rebalanceTimeoutMs: rt,
			sessionTimeoutMs:   mv.SessionTimeoutMillis,
			protocolType:       v.ProtocolType,
			protocols:          []protocol{{name: g.protocolName, metadata: append([]byte(nil), mv.Subscription...)}},
			assignment:         append([]byte(nil), mv.Assignment...),
		}
		if mv.InstanceID != nil {
			id := *mv.InstanceID
			m.instanceID = &id
			g.staticMembers[id] = m.id
		}
		g.members[m.id] = m
		g.supportedProtocols[g.protocolName]++
	}
	if len(g.members) > 0 {
		g.state = classicStable
	}
	g.subscribedTopics, g.subscribedKnown = g.computeSubscribedTopics()
	return g
}

func (g *classicGroup) sortedMemberIDs() []string { return sortedKeys(g.members) }

func (g *classicGroup) transitionTo(s classicState, now time.Time) {
	if !s.validPrevious(g.state) {
		panic(fmt.Sprintf("group: invariant: classic group %q cannot move from %s to %s", g.id, g.state, s))
	}
	g.prevState = g.state
	g.state = s
	g.stateTimestamp = now.UnixMilli()
}

func (g *classicGroup) canRebalance() bool { return classicPreparingRebalance.validPrevious(g.state) }

func (g *classicGroup) isPendingMember(id string) bool {
	_, ok := g.pendingJoin[id]
	return ok
}

func (g *classicGroup) hasAllMembersJoined() bool {
	return len(g.members) == g.numAwaitingJoin && len(g.pendingJoin) == 0
}

// rebalanceTimeoutMs is the largest rebalance timeout of the members.
func (g *classicGroup) rebalanceTimeoutMs() int32 {
	var max int32
	for _, m := range g.members {
		if m.rebalanceTimeoutMs > max {
			max = m.rebalanceTimeoutMs
		}
	}
	return max
}

// supportsProtocols is whether a member with these protocols may join: an
// empty group takes any non-empty set, a group with members requires the
// same protocol type and one protocol every member supports.
func (g *classicGroup) supportsProtocols(protocolType string, names []string) bool {
	if g.state == classicEmpty {
		return protocolType != "" && len(names) > 0
	}
	if g.protocolType != protocolType {
		return false
	}
	for _, n := range names {
		if g.supportedProtocols[n] == len(g.members) {
			return true
		}
	}
	return false
}

func protocolNames(ps []kmsg.JoinGroupRequestProtocol) []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return names
}

// validateMember is Kafka's ClassicGroup.validateMember.
func (g *classicGroup) validateMember(memberID string, instanceID *string) int16 {
	if instanceID != nil {
		existing, ok := g.staticMembers[*instanceID]
		if !ok {
			return kerr.UnknownMemberID.Code
		}
		if existing != memberID {
			return kerr.FencedInstanceID.Code
		}
	}
	if _, ok := g.members[memberID]; !ok {
		return kerr.UnknownMemberID.Code
	}
	return 0
}

// add adds a member, parked in the join phase when reply is set.
func (g *classicGroup) add(m *classicMember, reply chan *kmsg.JoinGroupResponse, version int16) {
	if m.instanceID != nil {
		if _, ok := g.staticMembers[*m.instanceID]; ok {
			panic(fmt.Sprintf("group: invariant: static member %q added twice to group %q", *m.instanceID, g.id))
		}
		g.staticMembers[*m.instanceID] = m.id
	}
	if len(g.members) == 0 {
		g.protocolType = m.protocolType
	}
	if g.leader == "" {
		g.leader = m.id
	}
	g.members[m.id] = m
	for _, p := range m.protocols {
		g.supportedProtocols[p.name]++
	}
	m.joinReply, m.joinVersion = reply, version
	if m.awaitingJoin() {
		g.numAwaitingJoin++
	}
	delete(g.pendingJoin, m.id)
}

// remove removes a member or pending member; a leaving leader is replaced
// by the first remaining member.
func (g *classicGroup) remove(id string) {
	if m, ok := g.members[id]; ok {
		delete(g.members, id)
		for _, p := range m.protocols {
			g.supportedProtocols[p.name]--
		}
		if m.awaitingJoin() {
			g.numAwaitingJoin--
		}
		if m.instanceID != nil {
			delete(g.staticMembers, *m.instanceID)
		}
	}
	if g.leader == id {
		g.leader = ""
		if ids := g.sortedMemberIDs(); len(ids) > 0 {
			g.leader = ids[0]
		}
	}
	delete(g.pendingJoin, id)
	delete(g.pendingSync, id)
}

// updateMember replaces a member's protocols and timeouts and parks it in
// the join phase when reply is set (or unparks it when nil).
func (g *classicGroup) updateMember(m *classicMember, protocols []protocol, rebalanceTimeoutMs, sessionTimeoutMs int32, reply chan *kmsg.JoinGroupResponse, version int16) {
	for _, p := range m.protocols {
		g.supportedProtocols[p.name]--
	}
	m.protocols = protocols
	for _, p := range m.protocols {
		g.supportedProtocols[p.name]++
	}
	m.rebalanceTimeoutMs, m.sessionTimeoutMs = rebalanceTimeoutMs, sessionTimeoutMs
	if reply != nil && !m.awaitingJoin() {
		g.numAwaitingJoin++
	} else if reply == nil && m.awaitingJoin() {
		g.numAwaitingJoin--
	}
	m.joinReply, m.joinVersion = reply, version
}

// replaceStaticMember gives a static member a new member id, fencing any
// request the old id has parked (Kafka's ClassicGroup.replaceStaticMember).
func (g *classicGroup) replaceStaticMember(instanceID, oldID, newID string) *classicMember {
	old, ok := g.members[oldID]
	if !ok {
		panic(fmt.Sprintf("group: invariant: cannot replace missing static member %q of group %q", oldID, g.id))
	}
	delete(g.members, oldID)
	g.completeJoin(old, joinError(0, kerr.FencedInstanceID.Code, oldID))
	g.completeSync(old, &kmsg.SyncGroupResponse{
		ErrorCode:        kerr.FencedInstanceID.Code,
		MemberAssignment: []byte{},
	})
	m := &classicMember{
		id:                 newID,
		instanceID:         old.instanceID,
		clientID:           old.clientID,
		clientHost:         old.clientHost,
		rebalanceTimeoutMs: old.rebalanceTimeoutMs,
		sessionTimeoutMs:   old.sessionTimeoutMs,
		protocolType:       old.protocolType,
		protocols:          old.protocols,
		assignment:         old.assignment,
	}
	g.members[newID] = m
	if g.leader == oldID {
		g.leader = newID
	}
	g.staticMembers[instanceID] = newID
	return m
}

// maybeElectNewJoinedLeader makes sure the leader is a member that joined
// this round, and reports false if no member did.
func (g *classicGroup) maybeElectNewJoinedLeader() bool {
	if g.leader == "" {
		return false
	}
	if leader := g.members[g.leader]; leader != nil && leader.awaitingJoin() {
		return true
	}
	for _, id := range g.sortedMemberIDs() {
		if g.members[id].awaitingJoin() {
			g.leader = id
			return true
		}
	}
	return false
}

// selectProtocol is Kafka's protocol vote: each member votes for its most
// preferred protocol among those every member supports, and the most votes
// win (ties go to the lexically first name).
func (g *classicGroup) selectProtocol() string {
	if len(g.members) == 0 {
		panic(fmt.Sprintf("group: invariant: selecting a protocol for empty group %q", g.id))
	}
	candidates := make(map[string]bool)
	for name, n := range g.supportedProtocols {
		if n == len(g.members) {
			candidates[name] = true
		}
	}
	votes := make(map[string]int)
	for _, m := range g.members {
		votes[m.vote(candidates)]++
	}
	best, bestVotes := "", -1
	for _, name := range sortedKeys(votes) {
		if votes[name] > bestVotes {
			best, bestVotes = name, votes[name]
		}
	}
	return best
}

// computeSubscribedTopics parses the members' ConsumerProtocol
// subscriptions when the group uses the "consumer" protocol type. It
// reports false when the topics are unknown.
func (g *classicGroup) computeSubscribedTopics() (map[string]struct{}, bool) {
	if g.protocolType != "consumer" {
		return nil, false
	}
	topics := make(map[string]struct{})
	if len(g.members) == 0 {
		return topics, true
	}
	if g.protocolName == "" {
		return nil, false
	}
	for _, m := range g.members {
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(m.metadata(g.protocolName)); err != nil {
			return nil, false
		}
		for _, t := range meta.Topics {
			topics[t] = struct{}{}
		}
	}
	return topics, true
}

// isSubscribedToTopic is Kafka's ClassicGroup.isSubscribedToTopic: when the
// subscriptions are unknown, a "consumer" group counts as subscribed.
func (g *classicGroup) isSubscribedToTopic(topic string) bool {
	if !g.subscribedKnown {
		return g.protocolType == "consumer"
	}
	_, ok := g.subscribedTopics[topic]
	return ok
}

// initNextGeneration starts the next generation: CompletingRebalance with a
// chosen protocol, or Empty when no member is left.
func (g *classicGroup) initNextGeneration(now time.Time) {
	g.generation++
	if len(g.members) > 0 {
		g.protocolName = g.selectProtocol()
		g.subscribedTopics, g.subscribedKnown = g.computeSubscribedTopics()
		g.transitionTo(classicCompletingRebalance, now)
	} else {
		g.protocolName = ""
		g.subscribedTopics, g.subscribedKnown = g.computeSubscribedTopics()
		g.transitionTo(classicEmpty, now)
	}
	g.pendingSync = make(map[string]struct{})
}

// currentMembers lists the members and their metadata for the leader's
// JoinGroup response.
func (g *classicGroup) currentMembers() []kmsg.JoinGroupResponseMember {
	out := make([]kmsg.JoinGroupResponseMember, 0, len(g.members))
	for _, id := range g.sortedMemberIDs() {
		m := g.members[id]
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.id
		jm.InstanceID = m.instanceID
		jm.ProtocolMetadata = m.metadata(g.protocolName)
		out = append(out, jm)
	}
	return out
}

func (g *classicGroup) groupAssignment() map[string][]byte {
	a := make(map[string][]byte, len(g.members))
	for id, m := range g.members {
		a[id] = m.assignment
	}
	return a
}

// joinResponse is the response a member gets when the join phase completes
// or a rejoin changes nothing.
func (g *classicGroup) joinResponse(m *classicMember, version int16, withMembers bool) *kmsg.JoinGroupResponse {
	r := &kmsg.JoinGroupResponse{
		Version:    version,
		Generation: g.generation,
		LeaderID:   g.leader,
		MemberID:   m.id,
		Members:    []kmsg.JoinGroupResponseMember{},
	}
	if g.protocolName != "" {
		r.Protocol = kmsg.StringPtr(g.protocolName)
	}
	if g.protocolType != "" {
		r.ProtocolType = kmsg.StringPtr(g.protocolType)
	}
	if withMembers {
		r.Members = g.currentMembers()
	}
	return r
}

// joinError is a JoinGroup error response; like Kafka's, its generation is -1.
func joinError(version, code int16, memberID string) *kmsg.JoinGroupResponse {
	r := kmsg.NewJoinGroupResponse()
	r.Version, r.ErrorCode, r.MemberID = version, code, memberID
	return &r
}

// completeJoin answers a member's parked JoinGroup, if it has one.
func (g *classicGroup) completeJoin(m *classicMember, r *kmsg.JoinGroupResponse) bool {
	if !m.awaitingJoin() {
		return false
	}
	if r.Version == 0 {
		r.Version = m.joinVersion
	}
	deliver(m.joinReply, r)
	m.joinReply = nil
	g.numAwaitingJoin--
	return true
}

// completeSync answers a member's parked SyncGroup, if it has one.
func (g *classicGroup) completeSync(m *classicMember, r *kmsg.SyncGroupResponse) bool {
	if !m.awaitingSync() {
		return false
	}
	if r.Version == 0 {
		r.Version = m.syncVersion
	}
	deliver(m.syncReply, r)
	m.syncReply = nil
	return true
}

func (g *classicGroup) completeAllJoins(code int16) {
	for _, id := range g.sortedMemberIDs() {
		g.completeJoin(g.members[id], joinError(0, code, id))
	}
}

func (g *classicGroup) completeAllSyncs(code int16) {
	for _, id := range g.sortedMemberIDs() {
		g.completeSync(g.members[id], &kmsg.SyncGroupResponse{ErrorCode: code, MemberAssignment: []byte{}})
	}
}

// The steps below are Kafka's GroupMetadataManager classic-group handling,
// one function per Kafka method of the same name. They run with the shard
// locked and s.now set; responses go to the members' reply channels.

func classicHeartbeatKey(group, member string) timerKey {
	return timerKey{timerClassicHeartbeat, group, member}
}

func (s *state) classicGroup(id string) *classicGroup {
	if g := s.groups[id]; g != nil {
		return g.classic
	}
	return nil
}

func (s *state) rescheduleClassicHeartbeat(g *classicGroup, m *classicMember, timeoutMs int32) {
	gid, mid := g.id, m.id
	s.timers.schedule(classicHeartbeatKey(gid, mid), s.now.Add(ms(timeoutMs)), func() {
		s.append(s.expireClassicHeartbeat(gid, mid))
	})
}

func (s *state) expireClassicHeartbeat(groupID, memberID string) result {
	g := s.classicGroup(groupID)
	if g == nil || g.state == classicDead {
		return result{}
	}
	if g.isPendingMember(memberID) {
		s.logger().Info("pending member removed after session timeout", "group", groupID, "member", memberID)
		g.remove(memberID)
		if g.state == classicPreparingRebalance && g.hasAllMembersJoined() {
			return s.completeClassicGroupJoin(g)
		}
		return result{}
	}
	m := g.members[memberID]
	if m == nil || m.hasSatisfiedHeartbeat() {
		return result{}
	}
	s.logger().Info("member failed its session, removing it", "group", groupID, "member", memberID)
	return s.removeMemberAndUpdateClassicGroup(g, m, "heartbeat expiration")
}

func (s *state) removeMemberAndUpdateClassicGroup(g *classicGroup, m *classicMember, reason string) result {
	g.completeJoin(m, joinError(0, kerr.UnknownMemberID.Code, ""))
	g.remove(m.id)
	switch {
	case g.state == classicStable || g.state == classicCompletingRebalance:
		return s.maybePrepareRebalanceOrCompleteJoin(g, reason)
	case g.state == classicPreparingRebalance && g.hasAllMembersJoined():
		return s.completeClassicGroupJoin(g)
	}
	return result{}
}

func (s *state) maybePrepareRebalanceOrCompleteJoin(g *classicGroup, reason string) result {
	if g.canRebalance() {
		return s.prepareRebalance(g, reason)
	}
	return s.maybeCompleteJoinPhase(g)
}

func (s *state) prepareRebalance(g *classicGroup, reason string) result {
	if g.state == classicCompletingRebalance {
		s.resetAndPropagateAssignmentWithError(g, kerr.RebalanceInProgress.Code)
	}
	s.removeSyncExpiration(g)
	initial := g.state == classicEmpty
	if initial {
		delayMs := s.cfg.InitialRebalanceDelayMs
		remainingMs := max(g.rebalanceTimeoutMs()-delayMs, 0)
		gid := g.id
		s.timers.schedule(timerKey{timerClassicJoin, gid, ""}, s.now.Add(ms(delayMs)), func() {
			s.append(s.tryCompleteInitialRebalanceElseSchedule(gid, delayMs, remainingMs))
		})
	}
	g.transitionTo(classicPreparingRebalance, s.now)
	s.logger().Info("preparing to rebalance group", "group", g.id, "generation", g.generation, "reason", reason)
	if initial {
		return result{}
	}
	return s.maybeCompleteJoinElseSchedule(g)
}

func (s *state) maybeCompleteJoinElseSchedule(g *classicGroup) result {
	if g.hasAllMembersJoined() {
		return s.completeClassicGroupJoin(g)
	}
	s.scheduleCompleteJoin(g)
	return result{}
}

func (s *state) scheduleCompleteJoin(g *classicGroup) {
	gid := g.id
	s.timers.schedule(timerKey{timerClassicJoin, gid, ""}, s.now.Add(ms(g.rebalanceTimeoutMs())), func() {
		if g := s.classicGroup(gid); g != nil {
			s.append(s.completeClassicGroupJoin(g))
		}
	})
}

func (s *state) tryCompleteInitialRebalanceElseSchedule(groupID string, delayMs, remainingMs int32) result {
	g := s.classicGroup(groupID)
	if g == nil {
		return result{}
	}
	if g.newMemberAdded && remainingMs != 0 {
		g.newMemberAdded = false
		newDelayMs := min(s.cfg.InitialRebalanceDelayMs, remainingMs)
		newRemainingMs := max(remainingMs-delayMs, 0)
		s.timers.schedule(timerKey{timerClassicJoin, groupID, ""}, s.now.Add(ms(newDelayMs)), func() {
			s.append(s.tryCompleteInitialRebalanceElseSchedule(groupID, newDelayMs, newRemainingMs))
		})
		return result{}
	}
	return s.completeClassicGroupJoin(g)
}

func (s *state) maybeCompleteJoinPhase(g *classicGroup) result {
	if g.state != classicPreparingRebalance || g.prevState == classicEmpty || !g.hasAllMembersJoined() {
		return result{}
	}
	return s.completeClassicGroupJoin(g)
}

// completeClassicGroupJoin ends the join phase: dynamic members that did not
// rejoin are removed and the next generation starts.
func (s *state) completeClassicGroupJoin(g *classicGroup) result {
	s.timers.cancel(timerKey{timerClassicJoin, g.id, ""})
	for _, id := range g.sortedMemberIDs() {
		m := g.members[id]
		if !m.awaitingJoin() && m.instanceID == nil {
			g.remove(id)
			s.timers.cancel(classicHeartbeatKey(g.id, id))
			s.logger().Info("removed member that did not rejoin", "group", g.id, "member", id)
		}
	}
	if g.state == classicDead {
		return result{}
	}
	if !g.maybeElectNewJoinedLeader() && len(g.members) > 0 {
		// Only static members that have not rejoined are left; wait for
		// them or for their sessions to end.
		s.scheduleCompleteJoin(g)
		return result{}
	}
	g.initNextGeneration(s.now)
	if g.state == classicEmpty {
		s.logger().Info("group is now empty", "group", g.id, "generation", g.generation)
		gid := g.id
		return result{
			records: []kv{classicGroupRecord(g, nil)},
			done: func(err error) {
				if err != nil {
					s.logger().Warn("failed to write empty group metadata", "group", gid, "err", err)
				}
			},
		}
	}
	s.logger().Info("group generation complete", "group", g.id, "generation", g.generation, "members", len(g.members), "protocol", g.protocolName)
	for _, id := range g.sortedMemberIDs() {
		m := g.members[id]
		g.completeJoin(m, g.joinResponse(m, 0, id == g.leader))
		s.rescheduleClassicHeartbeat(g, m, m.sessionTimeoutMs)
		m.isNew = false
		g.pendingSync[id] = struct{}{}
	}
	gid, gen := g.id, g.generation
	s.timers.schedule(timerKey{timerClassicSync, gid, ""}, s.now.Add(ms(g.rebalanceTimeoutMs())), func() {
		s.append(s.expirePendingSync(gid, gen))
	})
	return result{}
}

func (s *state) expirePendingSync(groupID string, generation int32) result {
	g := s.classicGroup(groupID)
	if g == nil || generation != g.generation {
		return result{}
	}
	if g.state != classicCompletingRebalance && g.state != classicStable {
		return result{}
	}
	if len(g.pendingSync) == 0 {
		return result{}
	}
	pending := sortedKeys(g.pendingSync)
	for _, id := range pending {
		g.remove(id)
		s.timers.cancel(classicHeartbeatKey(g.id, id))
	}
	return s.prepareRebalance(g, fmt.Sprintf("removing %v on pending sync request expiration", pending))
}

func (s *state) removeSyncExpiration(g *classicGroup) {
	g.pendingSync = make(map[string]struct{})
	s.timers.cancel(timerKey{timerClassicSync, g.id, ""})
}

func (s *state) removePendingSyncMember(g *classicGroup, id string) {
	delete(g.pendingSync, id)
	if len(g.pendingSync) == 0 {
		s.timers.cancel(timerKey{timerClassicSync, g.id, ""})
	}
}

func (s *state) resetAndPropagateAssignmentWithError(g *classicGroup, code int16) {
	if g.state != classicCompletingRebalance {
		panic(fmt.Sprintf("group: invariant: resetting assignments of group %q in %s", g.id, g.state))
	}
	for _, m := range g.members {
		m.assignment = []byte{}
	}
	s.propagateAssignment(g, code)
}

func (s *state) setAndPropagateAssignment(g *classicGroup, assignment map[string][]byte) {
	if g.state != classicCompletingRebalance {
		panic(fmt.Sprintf("group: invariant: setting assignments of group %q in %s", g.id, g.state))
	}
	for id, m := range g.members {
		m.assignment = assignment[id]
		if m.assignment == nil {
			m.assignment = []byte{}
		}
	}
	s.propagateAssignment(g, 0)
}

func (s *state) propagateAssignment(g *classicGroup, code int16) {
	for _, id := range g.sortedMemberIDs() {
		m := g.members[id]
		r := &kmsg.SyncGroupResponse{ErrorCode: code, MemberAssignment: m.assignment}
		if code == 0 {
			if g.protocolType != "" {
				r.ProtocolType = kmsg.StringPtr(g.protocolType)
			}
			if g.protocolName != "" {
				r.Protocol = kmsg.StringPtr(g.protocolName)
			}
		}
		if g.completeSync(m, r) {
			s.rescheduleClassicHeartbeat(g, m, m.sessionTimeoutMs)
		}
	}
}

// acceptJoiningMember is Kafka's check of group.max.size.
func (s *state) acceptJoiningMember(g *classicGroup, memberID string) bool {
	switch g.state {
	case classicEmpty, classicDead:
		return true
	case classicPreparingRebalance:
		m := g.members[memberID]
		return (m != nil && m.awaitingJoin()) || int32(g.numAwaitingJoin) < s.cfg.MaxSize
	default:
		_, ok := g.members[memberID]
		return ok || int32(len(g.members)) < s.cfg.MaxSize
	}
}

// classicJoin handles a JoinGroup (Kafka's classicGroupJoin). The response
// goes to reply, now or when the join phase completes.
func (s *state) classicJoin(req *kmsg.JoinGroupRequest, client Client, reply chan *kmsg.JoinGroupResponse) result {
	var res result
	existing := s.groups[req.Group]
	if existing != nil && existing.consumer != nil {
		if len(existing.consumer.members) > 0 {
			deliver(reply, joinError(req.Version, kerr.InconsistentGroupProtocol.Code, ""))
			return result{}
		}
		// An empty KIP-848 group becomes a classic group.
		delete(s.groups, req.Group)
		res = result{records: []kv{groupTombstone(req.Group)}}
		s.logger().Info("converted empty consumer group to classic group", "group", req.Group)
	}
	unknown := req.MemberID == ""
	g := s.classicGroup(req.Group)
	isNew := g == nil
	if g == nil {
		if !unknown {
			deliver(reply, joinError(req.Version, kerr.UnknownMemberID.Code, req.MemberID))
			return res
		}
		g = newClassicGroup(req.Group, s.now)
		s.groups[req.Group] = &group{classic: g}
	}
	var step result
	switch {
	case !s.acceptJoiningMember(g, req.MemberID):
		g.remove(req.MemberID)
		deliver(reply, joinError(req.Version, kerr.GroupMaxSizeReached.Code, ""))
	case unknown:
		step = s.classicJoinNewMember(req, client, g, reply)
	default:
		step = s.classicJoinExistingMember(req, client, g, reply)
	}
	if isNew && step.empty() {
		gid := g.id
		step = result{
			records: []kv{emptyClassicGroupRecord(g)},
			done: func(err error) {
				if err != nil {
					s.logger().Warn("failed to write new group metadata", "group", gid, "err", err)
					deliver(reply, joinError(req.Version, errCode(err), ""))
				}
			},
		}
	}
	return res.and(step)
}

func (s *state) classicJoinNewMember(req *kmsg.JoinGroupRequest, client Client, g *classicGroup, reply chan *kmsg.JoinGroupResponse) result {
	if g.state == classicDead {
		deliver(reply, joinError(req.Version, codeCoordinatorNotAvailable, ""))
		return result{}
	}
	if !g.supportsProtocols(req.ProtocolType, protocolNames(req.Protocols)) {
		deliver(reply, joinError(req.Version, kerr.InconsistentGroupProtocol.Code, ""))
		return result{}
	}
	if req.InstanceID != nil {
		newID := newClassicMemberID(*req.InstanceID, s.uuid())
		if existing, ok := g.staticMembers[*req.InstanceID]; ok {
			s.logger().Info("static member rejoins with unknown member id, replacing it", "group", g.id, "instance", *req.InstanceID, "old", existing, "new", newID)
			return s.updateStaticMemberThenRebalanceOrCompleteJoin(req, g, existing, newID, reply)
		}
		return s.addMemberThenRebalanceOrCompleteJoin(req, client, g, newID, reply)
	}
	newID := newClassicMemberID(client.ID, s.uuid())
	if req.Version >= 4 {
		// KIP-394: the member must come back with the id it is given.
		g.pendingJoin[newID] = struct{}{}
		gid := g.id
		s.timers.schedule(classicHeartbeatKey(gid, newID), s.now.Add(ms(req.SessionTimeoutMillis)), func() {
			s.append(s.expireClassicHeartbeat(gid, newID))
		})
		deliver(reply, joinError(req.Version, kerr.MemberIDRequired.Code, newID))
		return result{}
	}
	return s.addMemberThenRebalanceOrCompleteJoin(req, client, g, newID, reply)
}

func (s *state) classicJoinExistingMember(req *kmsg.JoinGroupRequest, client Client, g *classicGroup, reply chan *kmsg.JoinGroupResponse) result {
	memberID := req.MemberID
	fail := func(code int16) result {
		deliver(reply, joinError(req.Version, code, memberID))
		return result{}
	}
	if g.state == classicDead {
		return fail(codeCoordinatorNotAvailable)
	}
	if !g.supportsProtocols(req.ProtocolType, protocolNames(req.Protocols)) {
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	if g.isPendingMember(memberID) {
		if req.InstanceID != nil {
			// Kafka throws IllegalStateException: pending members are
			// always dynamic.
			return fail(kerr.UnknownServerError.Code)
		}
		return s.addMemberThenRebalanceOrCompleteJoin(req, client, g, memberID, reply)
	}
	if code := g.validateMember(memberID, req.InstanceID); code != 0 {
		return fail(code)
	}
	m := g.members[memberID]
	switch g.state {
	case classicPreparingRebalance:
		return s.updateMemberThenRebalanceOrCompleteJoin(req, g, m, reply)
	case classicCompletingRebalance:
		if m.matches(req.Protocols) {
			// The member lost the join response: send it again.
			deliver(reply, g.joinResponse(m, req.Version, g.leader == memberID))
			return result{}
		}
		return s.updateMemberThenRebalanceOrCompleteJoin(req, g, m, reply)
	case classicStable:
		if g.leader == memberID || !m.matches(req.Protocols) {
			// A rejoining leader forces a rebalance so it can
			// reassign after metadata changes.
			return s.updateMemberThenRebalanceOrCompleteJoin(req, g, m, reply)
		}
		deliver(reply, g.joinResponse(m, req.Version, false))
		return result{}
	default:
		return fail(kerr.UnknownMemberID.Code)
	}
}

func (s *state) updateMemberThenRebalanceOrCompleteJoin(req *kmsg.JoinGroupRequest, g *classicGroup, m *classicMember, reply chan *kmsg.JoinGroupResponse) result {
	g.updateMember(m, requestProtocols(req.Protocols), req.RebalanceTimeoutMillis, req.SessionTimeoutMillis, reply, req.Version)
	return s.maybePrepareRebalanceOrCompleteJoin(g, "member "+m.id+" rejoined with "+g.state.String())
}

func (s *state) addMemberThenRebalanceOrCompleteJoin(req *kmsg.JoinGroupRequest, client Client, g *classicGroup, memberID string, reply chan *kmsg.JoinGroupResponse) result {
	m := &classicMember{
		id:                 memberID,
		clientID:           client.ID,
		clientHost:         client.Host,
		rebalanceTimeoutMs: req.RebalanceTimeoutMillis,
		sessionTimeoutMs:   req.SessionTimeoutMillis,
		protocolType:       req.ProtocolType,
		protocols:          requestProtocols(req.Protocols),
		isNew:              true,
	}
	if req.InstanceID != nil {
		id := *req.InstanceID
		m.instanceID = &id
	}
	if g.state == classicPreparingRebalance && g.prevState == classicEmpty {
		g.newMemberAdded = true
	}
	g.add(m, reply, req.Version)
	// A new member parked in the join phase cannot heartbeat, and a client
	// that gives up and retries would leave it behind; its join expires.
	s.rescheduleClassicHeartbeat(g, m, s.cfg.NewMemberJoinTimeoutMs)
	return s.maybePrepareRebalanceOrCompleteJoin(g, "adding new member "+memberID)
}

func (s *state) updateStaticMemberThenRebalanceOrCompleteJoin(req *kmsg.JoinGroupRequest, g *classicGroup, oldID, newID string, reply chan *kmsg.JoinGroupResponse) result {
	instanceID := *req.InstanceID
	currentLeader := g.leader
	m := g.replaceStaticMember(instanceID, oldID, newID)
	s.rescheduleClassicHeartbeat(g, m, m.sessionTimeoutMs)
	oldRebalanceTimeout, oldSessionTimeout, oldProtocols := m.rebalanceTimeoutMs, m.sessionTimeoutMs, m.protocols
	g.updateMember(m, requestProtocols(req.Protocols), req.RebalanceTimeoutMillis, req.SessionTimeoutMillis, reply, req.Version)

	switch g.state {
	case classicStable:
		if g.protocolName != g.selectProtocol() {
			return s.maybePrepareRebalanceOrCompleteJoin(g, "static member "+newID+" joined with a change of protocol")
		}
		// KIP-345: the member takes its predecessor's place and
		// assignment without a rebalance, once that is persisted.
		version := req.Version
		return result{
			records: []kv{classicGroupRecord(g, g.groupAssignment())},
			done: func(err error) {
				if err != nil {
					s.logger().Warn("failed to persist replaced static member, reverting", "group", g.id, "instance", instanceID, "err", err)
					g.updateMember(m, oldProtocols, oldRebalanceTimeout, oldSessionTimeout, nil, 0)
					old := g.replaceStaticMember(instanceID, newID, oldID)
					s.rescheduleClassicHeartbeat(g, old, old.sessionTimeoutMs)
					r := &kmsg.JoinGroupResponse{Version: version, ErrorCode: errCode(err), Generation: g.generation, LeaderID: currentLeader}
					if g.protocolName != "" {
						r.Protocol = kmsg.StringPtr(g.protocolName)
					}
					if g.protocolType != "" {
						r.ProtocolType = kmsg.StringPtr(g.protocolType)
					}
					deliver(reply, r)
					return
				}
				if version >= 9 {
					// KIP-814: a replaced leader gets the members but
					// must not reassign.
					isLeader := g.leader == newID
					r := g.joinResponse(m, version, isLeader)
					r.SkipAssignment = isLeader
					g.completeJoin(m, r)
					return
				}
				r := g.joinResponse(m, version, false)
				r.LeaderID = currentLeader
				g.completeJoin(m, r)
			},
		}
	case classicCompletingRebalance:
		// The leader may already be assigning to the old member id: start
		// over so the new id gets an assignment.
		return s.prepareRebalance(g, "static member "+newID+" rejoined during CompletingRebalance")
	case classicEmpty, classicDead:
		panic(fmt.Sprintf("group: invariant: static member of group %q rejoined in %s", g.id, g.state))
	}
	return s.maybeCompleteJoinPhase(g)
}

// classicSync handles a SyncGroup (Kafka's classicGroupSyncToClassicGroup).
func (s *state) classicSync(req *kmsg.SyncGroupRequest, reply chan *kmsg.SyncGroupResponse) result {
	fail := func(code int16) result {
		deliver(reply, &kmsg.SyncGroupResponse{Version: req.Version, ErrorCode: code, MemberAssignment: []byte{}})
		return result{}
	}
	grp := s.groups[req.Group]
	if grp == nil || grp.isEmpty() || grp.consumer != nil {
		// No classic member can be in a KIP-848 group here.
		return fail(kerr.UnknownMemberID.Code)
	}
	g := grp.classic
	if code := s.validateSyncGroup(g, req); code != 0 {
		return fail(code)
	}
	switch g.state {
	case classicPreparingRebalance:
		return fail(kerr.RebalanceInProgress.Code)
	case classicCompletingRebalance:
		m := g.members[req.MemberID]
		m.syncReply, m.syncVersion = reply, req.Version
		s.removePendingSyncMember(g, req.MemberID)
		if req.MemberID != g.leader {
			return result{}
		}
		s.logger().Info("assignment received from leader", "group", g.id, "leader", req.MemberID, "generation", g.generation, "members", len(g.members))
		assignment := make(map[string][]byte, len(g.members))
		for _, a := range req.GroupAssignment {
			assignment[a.MemberID] = append([]byte(nil), a.MemberAssignment...)
		}
		for id := range g.members {
			if assignment[id] == nil {
				assignment[id] = []byte{}
			}
		}
		generation := req.Generation
		return result{
			records: []kv{classicGroupRecord(g, assignment)},
			done: func(err error) {
				// Another member may have joined while the write was in
				// flight; then the assignment is stale.
				if g.state != classicCompletingRebalance || g.generation != generation || s.classicGroup(g.id) != g {
					return
				}
				if err != nil {
					code := errCode(err)
					s.resetAndPropagateAssignmentWithError(g, code)
					s.append(s.maybePrepareRebalanceOrCompleteJoin(g, "error storing group assignment"))
					return
				}
				s.setAndPropagateAssignment(g, assignment)
				g.transitionTo(classicStable, s.now)
			},
		}
	case classicStable:
		s.removePendingSyncMember(g, req.MemberID)
		m := g.members[req.MemberID]
		r := &kmsg.SyncGroupResponse{Version: req.Version, MemberAssignment: m.assignment}
		if g.protocolType != "" {
			r.ProtocolType = kmsg.StringPtr(g.protocolType)
		}
		if g.protocolName != "" {
			r.Protocol = kmsg.StringPtr(g.protocolName)
		}
		deliver(reply, r)
	}
	return result{}
}

func (s *state) validateSyncGroup(g *classicGroup, req *kmsg.SyncGroupRequest) int16 {
	if g.state == classicDead {
		return codeCoordinatorNotAvailable
	}
	if code := g.validateMember(req.MemberID, req.InstanceID); code != 0 {
		return code
	}
	if req.Generation != g.generation {
		return kerr.IllegalGeneration.Code
	}
	if protocolInconsistent(req.ProtocolType, g.protocolType) || protocolInconsistent(req.Protocol, g.protocolName) {
		return kerr.InconsistentGroupProtocol.Code
	}
	return 0
}

func protocolInconsistent(requested *string, current string) bool {
	return requested != nil && current != "" && *requested != current
}

// classicHeartbeat handles a Heartbeat (Kafka's classicGroupHeartbeat).
func (s *state) classicHeartbeat(req *kmsg.HeartbeatRequest) int16 {
	grp := s.groups[req.Group]
	if grp == nil {
		return kerr.UnknownMemberID.Code
	}
	if grp.consumer != nil {
		// Kafka looks the member up among the consumer group's members
		// using the classic protocol; there are none here.
		if req.InstanceID != nil {
			if owner, ok := grp.consumer.staticMembers[*req.InstanceID]; ok && owner != req.MemberID {
				return kerr.FencedInstanceID.Code
			}
		}
		return kerr.UnknownMemberID.Code
	}
	g := grp.classic
	if g.state == classicDead {
		return codeCoordinatorNotAvailable
	}
	if code := g.validateMember(req.MemberID, req.InstanceID); code != 0 {
		return code
	}
	if req.Generation != g.generation {
		return kerr.IllegalGeneration.Code
	}
	switch g.state {
	case classicEmpty:
		return kerr.UnknownMemberID.Code
	case classicPreparingRebalance:
		s.rescheduleClassicHeartbeat(g, g.members[req.MemberID], g.members[req.MemberID].sessionTimeoutMs)
		return kerr.RebalanceInProgress.Code
	default:
		s.rescheduleClassicHeartbeat(g, g.members[req.MemberID], g.members[req.MemberID].sessionTimeoutMs)
		return 0
	}
}

// classicLeave handles a LeaveGroup for a classic group (Kafka's
// classicGroupLeaveToClassicGroup); members are already in v3+ form.
func (s *state) classicLeave(g *classicGroup, members []kmsg.LeaveGroupRequestMember, resp *kmsg.LeaveGroupResponse) result {
	if g.state == classicDead {
		resp.ErrorCode = codeCoordinatorNotAvailable
		return result{}
	}
	valid := 0
	for _, rm := range members {
		mr := kmsg.LeaveGroupResponseMember{MemberID: rm.MemberID, InstanceID: rm.InstanceID}
		switch {
		case rm.MemberID == "":
			// Admin removal of a static member by instance id.
			if rm.InstanceID != nil {
				if id, ok := g.staticMembers[*rm.InstanceID]; ok {
					s.removeCurrentMemberFromClassicGroup(g, id)
					valid++
					break
				}
			}
			mr.ErrorCode = kerr.UnknownMemberID.Code
		case g.isPendingMember(rm.MemberID):
			g.remove(rm.MemberID)
			s.timers.cancel(classicHeartbeatKey(g.id, rm.MemberID))
			valid++
		default:
			if code := g.validateMember(rm.MemberID, rm.InstanceID); code != 0 {
				mr.ErrorCode = code
				break
			}
			s.removeCurrentMemberFromClassicGroup(g, rm.MemberID)
			valid++
		}
		resp.Members = append(resp.Members, mr)
	}
	if valid == 0 {
		return result{}
	}
	switch g.state {
	case classicStable, classicCompletingRebalance:
		return s.maybePrepareRebalanceOrCompleteJoin(g, "explicit LeaveGroup")
	case classicPreparingRebalance:
		return s.maybeCompleteJoinPhase(g)
	}
	return result{}
}

func (s *state) removeCurrentMemberFromClassicGroup(g *classicGroup, id string) {
	m := g.members[id]
	s.timers.cancel(classicHeartbeatKey(g.id, id))
	s.logger().Info("member left the group", "group", g.id, "member", id)
	g.completeJoin(m, joinError(0, kerr.UnknownMemberID.Code, ""))
	g.remove(id)
}
