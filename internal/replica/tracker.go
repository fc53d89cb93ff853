package replica

import (
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
)

// tracker is a partition's replication state as plain data, in the style
// of etcd raft: events in (the partition's state from metadata, a
// follower's fetch, a local append, a tick of the clock, the controller's
// answer to an ISR change, an acks=all produce waiting), effects out (the
// high watermark moved, propose an ISR change, answer these produces). It
// does no I/O, starts no goroutine and reads no clock: times are given in
// milliseconds with each event. It is not safe for concurrent use; the
// Partition that owns it holds Partition.mu around every call.
//
// As leader it follows Kafka's Partition and Replica (core/cluster):
//
//   - The high watermark is the smallest log end offset over the maximal
//     ISR (the committed ISR plus a follower whose addition is in flight)
//     and over followers caught up enough to be about to join it. It never
//     moves backwards and never passes the leader's own log end offset
//     (the flushed end when every append is synced).
//   - A follower's last caught-up time is the latest fetch time at which it
//     had fetched up to the leader's log end offset (or up to the leader's
//     log end offset at its previous fetch, so a follower of a partition
//     that is always written to can still catch up).
//   - A follower leaves the ISR when it has not caught up for
//     replica.lag.time.max.ms (checked at every tick) and rejoins once its
//     log end offset reaches the high watermark and the start of the
//     leader's epoch. One ISR change is in flight at a time.
//   - An acks=all produce is answered once the high watermark passes its
//     records: with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is
//     then smaller than min.insync.replicas, with NOT_LEADER_OR_FOLLOWER if
//     the replica stops leading first.
//
// Departures from Kafka: no broker epochs in ISR eligibility. As in Kafka
// with Eligible Leader Replicas (KIP-966), the high watermark does not
// advance while the ISR is below min.insync.replicas.
type tracker struct {
	nodeID       int32
	lagTimeMaxMs int64 // replica.lag.time.max.ms
	minInsync    int   // min.insync.replicas

	leader         bool
	leaderID       int32
	leaderEpoch    int32
	partitionEpoch int32
	replicas       []int32
	// removing are the replicas a reassignment is removing, among
	// replicas.
	removing []int32
	// isr is the committed ISR; empty on a follower.
	isr []int32
	// ineligible are the replicas whose brokers are fenced or shutting
	// down, as the metadata says: they are not proposed for the ISR, and
	// not waited for as caught up (Kafka's isReplicaIsrEligible).
	ineligible []int32
	// pending is the ISR change sent to the controller and not answered
	// yet, or nil.
	pending *ISRChange
	// epochStart is the leader's log end offset when its epoch began.
	epochStart int64
	// logEnd is the leader's log end offset; committable is how far its
	// own log counts towards the high watermark (logEnd, or the flushed
	// end when every append is synced).
	logEnd, committable int64
	highWatermark       int64
	// leaderHighWatermark is, on a follower, the high watermark its
	// leader last sent (-1 before the first), for the fetcher lag.
	leaderHighWatermark int64
	followers           map[int32]*progress
	// acks are the acks=all produces waiting, by increasing end.
	acks []ackWait
}

// progress is the leader's view of one follower (Kafka's ReplicaState).
type progress struct {
	logStartOffset int64
	logEndOffset   int64 // -1 until its first fetch to this leader
	// lastFetchLeaderLogEnd and lastFetchMs are the leader's log end
	// offset and the time at the follower's previous fetch.
	lastFetchLeaderLogEnd int64
	lastFetchMs           int64
	// lastCaughtUpMs is the latest time at which the follower had fetched
	// everything the leader had.
	lastCaughtUpMs int64
}

// caughtUp reports whether the follower counts as in sync: it has the
// leader's whole log, or had it within lagMs.
func (f *progress) caughtUp(leaderEnd, nowMs, lagMs int64) bool {
	return f.logEndOffset == leaderEnd || nowMs-f.lastCaughtUpMs <= lagMs
}

// ISRChange is an ISR change the leader proposes to the controller
// (AlterPartition, API 56). The controller refuses it when LeaderEpoch or
// PartitionEpoch is stale.
type ISRChange struct {
	Shrink         bool // a shrink, else an expansion
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []int32
}

func (c *ISRChange) String() string {
	kind := "expand"
	if c.Shrink {
		kind = "shrink"
	}
	return fmt.Sprintf("%s isr=%v leader-epoch=%d partition-epoch=%d", kind, c.ISR, c.LeaderEpoch, c.PartitionEpoch)
}

type ackWait struct {
	id  uint64
	end int64
}

// ackDone answers one waiting produce; err is nil when acknowledged.
type ackDone struct {
	id  uint64
	err error
}

// effects are what the owner of a tracker must do after an event.
type effects struct {
	// highWatermarkMoved: publish tracker.highWatermark, wake long polls.
	highWatermarkMoved bool
	// propose, when set, is to be sent to the controller; the answer comes
	// back through alterPartitionDone.
	propose *ISRChange
	// acks are the waiting produces to answer now.
	acks []ackDone
	// committed is the ISR change the controller just committed, for the
	// shrink and expand counts.
	committed *ISRChange
}

// Errors the tracker answers with, besides ErrNotLeader and
// ErrNotEnoughReplicas.
var (
	// ErrNotEnoughReplicasAfterAppend answers an acks=all produce whose
	// records were appended, and are committed, while the ISR shrank below
	// min.insync.replicas.
	ErrNotEnoughReplicasAfterAppend = fmt.Errorf("replica: %w", kerr.NotEnoughReplicasAfterAppend)
	// ErrUnknownReplica is returned for a fetch from a broker that is not
	// one of the partition's replicas at the leader's epoch.
	ErrUnknownReplica = fmt.Errorf("replica: %w: not a replica of this partition", kerr.UnknownLeaderEpoch)
)

func newTracker(nodeID int32, highWatermark int64, minInsync int, lagTimeMaxMs int64) *tracker {
	return &tracker{nodeID: nodeID, minInsync: minInsync, lagTimeMaxMs: lagTimeMaxMs,
		leaderID: -1, leaderEpoch: -1, partitionEpoch: -1, highWatermark: highWatermark, leaderHighWatermark: -1,
		followers: map[int32]*progress{}}
}

// configure applies new min.insync.replicas and replica.lag.time.max.ms.
// Waiting produces see the new minimum when the high watermark passes
// them.
func (t *tracker) configure(minInsync int, lagTimeMaxMs int64) {
	t.minInsync, t.lagTimeMaxMs = minInsync, lagTimeMaxMs
}

// becomeLeader makes this replica leader in s, with its log ending at
// logEnd (committable counting towards the high watermark). A state at an
// older partition epoch than the tracker's is ignored (the tracker may
// already know a newer one from an AlterPartition answer). A new leader
// epoch starts at logEnd and resets what the leader knows of its
// followers; the same epoch only updates the replicas and the ISR.
//
// The high watermark carries over, as in Kafka's Partition.makeLeader: a
// follower's (its leader's, bounded by its log end) or, after a restart,
// the checkpointed one. Records past it may never have been committed, so
// they stay invisible until every ISR member has fetched them (a member
// that does not leaves the ISR after replica.lag.time.max.ms). Only the
// sole replica of a partition, first led since the log was opened, takes
// its whole log as committed.
func (t *tracker) becomeLeader(s State, logEnd, committable, nowMs int64) effects {
	if s.PartitionEpoch < t.partitionEpoch {
		return effects{}
	}
	newLeader := !t.leader
	newEpoch := s.LeaderEpoch > t.leaderEpoch
	first := t.leaderEpoch < 0 && t.partitionEpoch < 0
	t.leader, t.leaderID = true, t.nodeID
	t.replicas, t.removing = slices.Clone(s.Replicas), slices.Clone(s.Removing)
	if !newLeader {
		// A follower the controller took out of the ISR (it was fenced:
		// its session expired, or it is shutting down) is no longer
		// waited for as caught up, or every acks=all produce would wait
		// replica.lag.time.max.ms for a replica that is gone. As in
		// Kafka, where only ISR-eligible replicas are waited for. It
		// counts again once it fetches to the log end.
		for id, f := range t.followers {
			if slices.Contains(t.isr, id) && !slices.Contains(s.ISR, id) {
				f.lastCaughtUpMs = 0
			}
		}
	}
	t.isr = slices.Clone(s.ISR)
	t.ineligible = slices.Clone(s.Ineligible)
	t.pending = nil
	t.logEnd, t.committable = logEnd, committable
	for id := range t.followers {
		if !slices.Contains(t.replicas, id) || id == t.nodeID {
			delete(t.followers, id)
		}
	}
	for _, id := range t.replicas {
		if id != t.nodeID && t.followers[id] == nil {
			t.followers[id] = &progress{logStartOffset: -1, logEndOffset: -1, lastFetchLeaderLogEnd: -1}
		}
	}
	if newEpoch {
		t.epochStart = logEnd
		for id, f := range t.followers {
			inSync := slices.Contains(t.isr, id)
			f.lastCaughtUpMs, f.lastFetchMs = 0, 0
			if inSync {
				f.lastCaughtUpMs, f.lastFetchMs = nowMs, nowMs
			}
			if newLeader {
				*f = progress{logStartOffset: -1, logEndOffset: -1, lastFetchLeaderLogEnd: -1, lastCaughtUpMs: f.lastCaughtUpMs}
			} else {
				f.lastFetchLeaderLogEnd = logEnd
			}
		}
	}
	t.leaderEpoch, t.partitionEpoch = s.LeaderEpoch, s.PartitionEpoch
	if first && len(t.replicas) == 1 && t.replicas[0] == t.nodeID && logEnd > t.highWatermark {
		// The sole replica, first led since the log was opened: all it
		// recovered is visible, whatever the checkpoint said. There is no
		// other copy to wait for, and what survived recovery was flushed
		// or is as durable as acks=1 ever promised.
		t.highWatermark = logEnd
		eff := t.maybeAdvance(nowMs)
		eff.highWatermarkMoved = true
		return eff
	}
	return t.maybeAdvance(nowMs)
}

// becomeFollower makes this replica a follower in s: it forgets its
// followers, and the produces waiting for it fail with NOT_LEADER. It
// reports whether the leader epoch is new, so the fetcher restarts from
// the new leader. A state at an older partition epoch is ignored.
func (t *tracker) becomeFollower(s State) (effects, bool) {
	if s.PartitionEpoch < t.partitionEpoch {
		return effects{}, false
	}
	newEpoch := s.LeaderEpoch > t.leaderEpoch
	t.leader, t.leaderID = false, s.Leader
	t.leaderEpoch, t.partitionEpoch = s.LeaderEpoch, s.PartitionEpoch
	t.replicas, t.isr, t.pending = slices.Clone(s.Replicas), nil, nil
	if newEpoch {
		t.leaderHighWatermark = -1
	}
	clear(t.followers)
	var eff effects
	for _, a := range t.acks {
		eff.acks = append(eff.acks, ackDone{a.id, ErrNotLeader})
	}
	t.acks = nil
	return eff, newEpoch
}

// maximalISR is the ISR the high watermark and waiting produces respect:
// the committed one, plus the follower whose addition is in flight (a
// larger ISR only makes the high watermark stricter, so it is safe to
// assume before the controller confirms, KIP-497). A shrink counts only
// once committed.
func (t *tracker) maximalISR() []int32 {
	if t.pending != nil && !t.pending.Shrink {
		return t.pending.ISR
	}
	return t.isr
}

// checkAppend refuses an acks=all produce before it is appended when the
// committed ISR is smaller than min.insync.replicas.
func (t *tracker) checkAppend(acks int16) error {
	if !t.leader {
		return ErrNotLeader
	}
	if acks == -1 && len(t.isr) < t.minInsync {
		return fmt.Errorf("%w: %d in sync, min.insync.replicas is %d", ErrNotEnoughReplicas, len(t.isr), t.minInsync)
	}
	return nil
}

// appended records the leader's log end offset after an append or a
// flush.
func (t *tracker) appended(logEnd, committable, nowMs int64) effects {
	if !t.leader {
		return effects{}
	}
	t.logEnd, t.committable = logEnd, min(committable, logEnd)
	return t.maybeAdvance(nowMs)
}

// isReplica checks, before a follower's fetch is served, that the
// fetching broker is one of the partition's replicas at this epoch.
func (t *tracker) isReplica(id int32) error {
	if !t.leader {
		return ErrNotLeader
	}
	if t.followers[id] == nil {
		return fmt.Errorf("%w: broker %d, replicas %v at leader epoch %d", ErrUnknownReplica, id, t.replicas, t.leaderEpoch)
	}
	return nil
}

// followerFetch is a follower's fetch as the leader served it.
type followerFetch struct {
	replica int32
	// fetchOffset is the follower's log end offset; logStartOffset its log
	// start offset.
	fetchOffset, logStartOffset int64
	// leaderLogEnd is the leader's log end offset when the fetch was read.
	leaderLogEnd int64
	nowMs        int64
}

// followerFetched records a follower's position, and may expand the ISR
// and advance the high watermark.
func (t *tracker) followerFetched(ff followerFetch) effects {
	f := t.followers[ff.replica]
	if !t.leader || f == nil {
		return effects{}
	}
	switch {
	case ff.fetchOffset >= ff.leaderLogEnd:
		f.lastCaughtUpMs = max(f.lastCaughtUpMs, ff.nowMs)
	case ff.fetchOffset >= f.lastFetchLeaderLogEnd:
		f.lastCaughtUpMs = max(f.lastCaughtUpMs, f.lastFetchMs)
	}
	f.logStartOffset, f.logEndOffset = ff.logStartOffset, ff.fetchOffset
	f.lastFetchLeaderLogEnd = max(f.lastFetchLeaderLogEnd, ff.leaderLogEnd)
	f.lastFetchMs = ff.nowMs

	var eff effects
	if t.pending == nil && !slices.Contains(t.isr, ff.replica) && !slices.Contains(t.ineligible, ff.replica) &&
		f.logEndOffset >= t.highWatermark && f.logEndOffset >= t.epochStart {
		isr := append(slices.Clone(t.isr), ff.replica)
		slices.Sort(isr)
		t.pending = &ISRChange{LeaderEpoch: t.leaderEpoch, PartitionEpoch: t.partitionEpoch, ISR: isr}
		eff.propose = t.pending
	}
	adv := t.maybeAdvance(ff.nowMs)
	adv.propose = eff.propose
	return adv
}

// tick checks, as Kafka's isr-expiration task does every half
// replica.lag.time.max.ms, whether followers in the ISR fell behind, and
// proposes to drop them. It also lets the high watermark pass a follower
// outside the ISR that is no longer caught up.
func (t *tracker) tick(nowMs int64) effects {
	if !t.leader {
		return effects{}
	}
	eff := t.maybeAdvance(nowMs)
	if t.pending != nil {
		return eff
	}
	var isr []int32
	for _, id := range t.isr {
		if f := t.followers[id]; id == t.nodeID || f != nil && f.caughtUp(t.logEnd, nowMs, t.lagTimeMaxMs) {
			isr = append(isr, id)
		}
	}
	if len(isr) < len(t.isr) {
		t.pending = &ISRChange{Shrink: true, LeaderEpoch: t.leaderEpoch, PartitionEpoch: t.partitionEpoch, ISR: isr}
		eff.propose = t.pending
	}
	return eff
}

// alterPartitionDone takes the controller's answer to change: the
// partition epoch it committed, or why not. An answer to anything but the
// change in flight is stale and ignored. Errors that say the change was
// not applied (OPERATION_NOT_ATTEMPTED, INELIGIBLE_REPLICA) drop it; those
// that say the leader's state is out of date keep it in flight until the
// metadata brings the new state (becomeLeader, becomeFollower); any other
// (a lost request, a controller moving) proposes it again.
func (t *tracker) alterPartitionDone(change *ISRChange, partitionEpoch int32, err error, nowMs int64) effects {
	if !t.leader || change != t.pending {
		return effects{}
	}
	if err == nil {
		if partitionEpoch < t.partitionEpoch {
			return effects{} // the metadata is ahead of this answer; wait for it
		}
		t.isr, t.partitionEpoch, t.pending = change.ISR, partitionEpoch, nil
		eff := t.maybeAdvance(nowMs)
		eff.acks = append(eff.acks, t.failAcksUnderMinISR()...)
		eff.committed = change
		return eff
	}
	var ke *kerr.Error
	errors.As(err, &ke)
	switch ke {
	case kerr.OperationNotAttempted, kerr.IneligibleReplica:
		t.pending = nil
	case kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.FencedLeaderEpoch,
		kerr.InvalidUpdateVersion, kerr.InvalidRequest, kerr.NewLeaderElected:
	default:
		return effects{propose: change}
	}
	return effects{}
}

// awaitAck registers an acks=all produce whose records end before end. It
// is answered in the effects of this or a later event.
func (t *tracker) awaitAck(id uint64, end int64) effects {
	if !t.leader {
		return effects{acks: []ackDone{{id, ErrNotLeader}}}
	}
	i, _ := slices.BinarySearchFunc(t.acks, end, func(a ackWait, end int64) int {
		if a.end <= end { // equal ends keep their order of arrival
			return -1
		}
		return 1
	})
	t.acks = slices.Insert(t.acks, i, ackWait{id, end})
	return effects{acks: t.completeAcks()}
}

// cancelAck forgets a produce that stopped waiting (its timeout).
func (t *tracker) cancelAck(id uint64) {
	t.acks = slices.DeleteFunc(t.acks, func(a ackWait) bool { return a.id == id })
}

// failAcksUnderMinISR answers every waiting produce with
// NOT_ENOUGH_REPLICAS_AFTER_APPEND once the ISR is below
// min.insync.replicas: the high watermark will not pass them before it
// grows back (maybeAdvance), and the producer may as well retry.
func (t *tracker) failAcksUnderMinISR() []ackDone {
	if len(t.isr) >= min(t.minInsync, len(t.replicas)) || len(t.acks) == 0 {
		return nil
	}
	err := fmt.Errorf("%w: %d in sync, min.insync.replicas is %d", ErrNotEnoughReplicasAfterAppend, len(t.isr), t.minInsync)
	done := make([]ackDone, len(t.acks))
	for i, a := range t.acks {
		done[i] = ackDone{a.id, err}
	}
	t.acks = t.acks[:0]
	return done
}

// completeAcks answers the produces the high watermark has passed.
func (t *tracker) completeAcks() []ackDone {
	n := 0
	for n < len(t.acks) && t.acks[n].end <= t.highWatermark {
		n++
	}
	if n == 0 {
		return nil
	}
	var err error
	if isr := t.maximalISR(); len(isr) < t.minInsync {
		err = fmt.Errorf("%w: %d in sync, min.insync.replicas is %d", ErrNotEnoughReplicasAfterAppend, len(isr), t.minInsync)
	}
	done := make([]ackDone, n)
	for i, a := range t.acks[:n] {
		done[i] = ackDone{a.id, err}
	}
	t.acks = slices.Delete(t.acks, 0, n)
	return done
}

// setIneligible takes the replicas that may not join the ISR now (their
// brokers are fenced or shutting down); the high watermark may move, as
// it no longer waits for them.
func (t *tracker) setIneligible(ids []int32, nowMs int64) effects {
	if slices.Equal(ids, t.ineligible) {
		return effects{}
	}
	t.ineligible = slices.Clone(ids)
	if !t.leader {
		return effects{}
	}
	return t.maybeAdvance(nowMs)
}

// maybeAdvance raises the high watermark to the smallest log end offset
// over the maximal ISR and the caught-up followers, if that is higher.
// Under min.insync.replicas (capped at the replicas there are) it stays
// (KIP-966): the replicas that left the ISR then are eligible leaders, and
// must hold every committed record.
func (t *tracker) maybeAdvance(nowMs int64) effects {
	if len(t.isr) < min(t.minInsync, len(t.replicas)) {
		return effects{}
	}
	hw := t.committable
	isr := t.maximalISR()
	for id, f := range t.followers {
		if f.logEndOffset < hw && (slices.Contains(isr, id) || !slices.Contains(t.ineligible, id) && f.caughtUp(t.logEnd, nowMs, t.lagTimeMaxMs)) {
			hw = f.logEndOffset
		}
	}
	if hw <= t.highWatermark {
		return effects{}
	}
	t.highWatermark = hw
	return effects{highWatermarkMoved: true, acks: t.completeAcks()}
}

// followerHighWatermark takes, on a follower, the high watermark its
// leader sent: the smaller of it and the local log end offset. Unlike a
// leader's it may move backwards (a new leader may not know yet how far
// its predecessor had committed), as in Kafka.
func (t *tracker) followerHighWatermark(leaderHighWatermark, logEnd int64) effects {
	if t.leader {
		return effects{}
	}
	t.leaderHighWatermark = leaderHighWatermark
	hw := min(leaderHighWatermark, logEnd)
	if hw == t.highWatermark {
		return effects{}
	}
	t.highWatermark = hw
	return effects{highWatermarkMoved: true}
}

// truncated records that a follower's log now ends at logEnd: the high
// watermark cannot be past it. With reset the log was emptied to start at
// logEnd, which is then the high watermark.
func (t *tracker) truncated(logEnd int64, reset bool) effects {
	if t.leader || (t.highWatermark <= logEnd && !reset) || t.highWatermark == logEnd {
		return effects{}
	}
	t.highWatermark = logEnd
	return effects{highWatermarkMoved: true}
}
