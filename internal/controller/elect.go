package controller

import (
	"slices"
	"strconv"

	"github.com/strata-io/strata/internal/metadata"
)

// Leader elections and the eligible leader replicas (KIP-966), as Kafka's
// PartitionChangeBuilder plans them: a planner says what it wants of a
// partition (a new ISR, a broker that may not lead, one that may although
// the image shows it fenced, the kind of election) and build returns the
// one record that gets there, or nil.
//
// The ELR holds the replicas that left the ISR while it was smaller than
// min.insync.replicas (capped at the replication factor): the high
// watermark does not advance under min.insync.replicas (the replica's
// tracker), so they hold every committed record. A replica that comes
// back from an unclean shutdown (its registration's PreviousBrokerEpoch is
// not the epoch it had) may have lost its unflushed tail and leaves the
// ISR and the ELR. With the ISR empty, the leader comes from the ELR; with
// both empty, the last known leader is elected when it returns (Kafka's
// balanced recovery: the single-replica case); an out-of-sync replica
// only with unclean.leader.election.enable.

// Policy is the server's static defaults of the topic settings that
// elections depend on; a topic's own setting, then the cluster-wide
// dynamic default, override them.
type Policy struct {
	// MinInsyncReplicas is min.insync.replicas (1).
	MinInsyncReplicas int
	// UncleanLeaderElection is unclean.leader.election.enable (false).
	UncleanLeaderElection bool
}

// topicSetting resolves a topic's setting: the topic's override, the
// cluster-wide dynamic default, then static.
func topicSetting(img *metadata.Image, topic, key, static string) string {
	if v, ok := img.TopicConfig(topic)[key]; ok {
		return v
	}
	if v, ok := img.Configs[metadata.ConfigResource{Type: metadata.ResourceBroker}][key]; ok {
		return v
	}
	return static
}

// minISR is the topic's effective min.insync.replicas: never more than
// the replicas there are.
func (pol Policy) minISR(img *metadata.Image, t *metadata.Topic, p *metadata.Partition) int {
	n, err := strconv.Atoi(topicSetting(img, t.Name, "min.insync.replicas", strconv.Itoa(pol.MinInsyncReplicas)))
	if err != nil || n < 1 {
		n = 1
	}
	return min(n, len(p.Replicas))
}

// unclean reports whether the topic allows unclean leader elections.
func (pol Policy) unclean(img *metadata.Image, topic string) bool {
	on, err := strconv.ParseBool(topicSetting(img, topic, "unclean.leader.election.enable", strconv.FormatBool(pol.UncleanLeaderElection)))
	return err == nil && on
}

// election is the kind of leader election a change allows.
type election int

const (
	// electOnline keeps the current leader if it may lead, or elects one
	// from the ISR (the ELR when the ISR is empty).
	electOnline election = iota
	// electPreferred elects the first replica if it may lead, and is
	// electOnline otherwise.
	electPreferred
	// electUnclean is electOnline, then any live replica.
	electUnclean
	// electNone keeps the leader as it is (an ISR change its leader asks
	// for).
	electNone
)

// partitionChange is a change being planned for one partition.
type partitionChange struct {
	img      *metadata.Image
	topic    *metadata.Topic
	index    int32
	p        *metadata.Partition
	minISR   int
	election election
	// isr is the ISR wanted.
	isr []int32
	// remove may not lead (fenced, shutting down or restarted); add may
	// although the image shows it fenced (being unfenced); -1 for none.
	remove, add int32
	// uncleanShutdown came back from an unclean shutdown: out of the ISR
	// and the ELR, and it may not lead; -1 for none.
	uncleanShutdown int32
	// replicas, adding and removing are the assignment wanted: the
	// partition's, or a reassignment's (KIP-455, reassign.go). A change
	// whose ISR holds every replica but those being removed completes the
	// reassignment.
	replicas, adding, removing []int32
}

// newChange starts a change of partition index of t that keeps the ISR,
// with the topic's election: unclean when the topic allows it.
func newChange(img *metadata.Image, pol Policy, t *metadata.Topic, index int32, p *metadata.Partition) *partitionChange {
	c := &partitionChange{img: img, topic: t, index: index, p: p, minISR: pol.minISR(img, t, p),
		isr: p.ISR, remove: -1, add: -1, uncleanShutdown: -1, election: electOnline,
		replicas: p.Replicas, adding: p.AddingReplicas, removing: p.RemovingReplicas}
	if pol.unclean(img, t.Name) {
		c.election = electUnclean
	}
	return c
}

// without returns ids without r, as a new slice.
func without(ids []int32, r int32) []int32 {
	return slices.DeleteFunc(slices.Clone(ids), func(x int32) bool { return x == r })
}

// acceptable reports whether r may lead: alive, or being unfenced.
func (c *partitionChange) acceptable(r int32) bool {
	return r >= 0 && r != c.remove && r != c.uncleanShutdown && (r == c.add || c.img.Brokers[r].Eligible())
}

// validLeader reports whether r may be the clean leader with this ISR and
// ELR: in the ISR, or in the ELR when the ISR is empty.
func (c *partitionChange) validLeader(r int32, isr, elr []int32) bool {
	return (slices.Contains(isr, r) || len(isr) == 0 && slices.Contains(elr, r)) && c.acceptable(r)
}

// elect returns the leader the change's election picks (-1: none), and
// whether it is an unclean election, which resets the ISR to it.
func (c *partitionChange) elect(isr, elr []int32) (int32, bool) {
	p := c.p
	switch c.election {
	case electNone:
		if slices.Contains(c.replicas, p.Leader) {
			return p.Leader, false
		}
		// A completed reassignment removed the leader: elect another.
	case electPreferred:
		if len(c.replicas) > 0 && c.validLeader(c.replicas[0], isr, elr) {
			return c.replicas[0], false
		}
	}
	if slices.Contains(c.replicas, p.Leader) && c.validLeader(p.Leader, isr, elr) {
		return p.Leader, false
	}
	for _, r := range c.replicas {
		if c.validLeader(r, isr, elr) {
			return r, false
		}
	}
	if len(isr) == 0 && len(elr) == 0 && len(p.LastKnownELR) == 1 && c.acceptable(p.LastKnownELR[0]) {
		// Nothing in sync is left: the last leader, when it returns,
		// has what can be had.
		return p.LastKnownELR[0], true
	}
	if c.election == electUnclean {
		for _, r := range c.replicas {
			if c.acceptable(r) {
				return r, true
			}
		}
	}
	return -1, false
}

// build returns the record that makes the change, or nil when it changes
// nothing.
func (c *partitionChange) build() *metadata.PartitionChangeRecord {
	c.completeReassignment()
	p := c.p
	isr := without(c.isr, c.uncleanShutdown)
	var elr []int32
	if len(isr) < c.minISR {
		// The ISR is below min.insync.replicas: what leaves it (and what
		// was eligible) stays eligible, in replica order.
		for _, r := range c.replicas {
			if (slices.Contains(p.ELR, r) || slices.Contains(p.ISR, r)) && !slices.Contains(isr, r) && r != c.uncleanShutdown {
				elr = append(elr, r)
			}
		}
	}
	rec := &metadata.PartitionChangeRecord{TopicID: c.topic.ID, Partition: c.index}
	leader, unclean := c.elect(isr, elr)
	if leader != p.Leader {
		if len(isr) == 0 && slices.Contains(elr, leader) {
			isr, elr = []int32{leader}, without(elr, leader)
		}
		rec.Leader = &leader
		if unclean {
			rec.ISR = []int32{leader}
			elr = nil
		}
	}
	if !slices.Equal(elr, p.ELR) {
		rec.ELR = nonNil(elr)
	}
	if rec.ISR == nil && !slices.Equal(isr, p.ISR) {
		rec.ISR = nonNil(isr)
	}
	switch {
	case rec.ISR != nil && len(rec.ISR) == 0 && p.Leader >= 0 && !slices.Equal(p.LastKnownELR, []int32{p.Leader}):
		// Leaderless for the first time: remember who led.
		rec.LastKnownELR = []int32{p.Leader}
	case len(p.LastKnownELR) > 0 && (rec.Leader != nil && *rec.Leader >= 0 || p.Leader >= 0 && rec.Leader == nil):
		rec.LastKnownELR = []int32{}
	}
	if !slices.Equal(c.replicas, p.Replicas) {
		rec.Replicas = slices.Clone(c.replicas)
	}
	if !slices.Equal(c.adding, p.AddingReplicas) {
		adding := nonNil(slices.Clone(c.adding))
		rec.AddingReplicas = &adding
	}
	if !slices.Equal(c.removing, p.RemovingReplicas) {
		removing := nonNil(slices.Clone(c.removing))
		rec.RemovingReplicas = &removing
	}
	if rec.Leader == nil && rec.ISR == nil && rec.ELR == nil && rec.LastKnownELR == nil &&
		rec.Replicas == nil && rec.AddingReplicas == nil && rec.RemovingReplicas == nil {
		return nil
	}
	return rec
}

// completeReassignment finishes a reassignment the wanted ISR allows (Kafka's
// PartitionReassignmentReplicas.maybeCompleteReassignment): when the ISR,
// less the replicas being removed, holds every other replica, those are
// dropped from the replicas and the ISR and the reassignment ends.
func (c *partitionChange) completeReassignment() {
	if len(c.adding) == 0 && len(c.removing) == 0 {
		return
	}
	isr, replicas := difference(c.isr, c.removing), difference(c.replicas, c.removing)
	if len(isr) == 0 || len(replicas) == 0 || len(difference(replicas, isr)) > 0 {
		return
	}
	c.isr, c.replicas, c.adding, c.removing = isr, replicas, nil, nil
}

// nonNil returns ids, or an empty slice for nil: a change record's empty
// list, not an absent one.
func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}
