package replica

import "slices"

// Fetch from followers (KIP-392): the leader of a partition may point a
// consumer at a replica closer to it, PreferredReadReplica in the Fetch
// answer, chosen as Kafka's RackAwareReplicaSelector chooses.

// ReplicaView is a replica a consumer could read from, as the leader sees
// it (Kafka's ReplicaView).
type ReplicaView struct {
	ID           int32
	LogEndOffset int64
	// TimeSinceCaughtUpMs is how long ago the replica last had the
	// leader's whole log (0 for the leader).
	TimeSinceCaughtUpMs int64
}

// ReadReplicas returns, when this replica leads, itself and the followers
// a consumer fetching at offset could read from instead: those in the ISR
// whose logs hold the offset (Kafka's findPreferredReadReplica). ok is
// false when it does not lead.
func (p *Partition) ReadReplicas(offset int64) (leader ReplicaView, followers []ReplicaView, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tracker
	if !t.leader {
		return ReplicaView{}, nil, false
	}
	now := p.nowMs()
	for _, id := range t.isr {
		f := t.followers[id]
		if id == t.nodeID || f == nil || f.logEndOffset < offset || f.logStartOffset > offset {
			continue
		}
		followers = append(followers, ReplicaView{ID: id, LogEndOffset: f.logEndOffset, TimeSinceCaughtUpMs: now - f.lastCaughtUpMs})
	}
	return ReplicaView{ID: t.nodeID, LogEndOffset: t.logEnd}, followers, true
}

// SelectRackAware is org.apache.kafka.common.replica.RackAwareReplicaSelector:
// for a client in a rack, the leader when it is in that rack (or no
// replica is), else the most caught-up replica of that rack (largest log
// end offset, then most recently caught up). It returns the follower to
// read from, or -1 for the leader.
func SelectRackAware(clientRack string, rackOf func(id int32) string, leader ReplicaView, followers []ReplicaView) int32 {
	if clientRack == "" || rackOf(leader.ID) == clientRack {
		return -1
	}
	var same []ReplicaView
	for _, f := range followers {
		if rackOf(f.ID) == clientRack {
			same = append(same, f)
		}
	}
	if len(same) == 0 {
		return -1
	}
	best := slices.MaxFunc(same, func(a, b ReplicaView) int {
		switch {
		case a.LogEndOffset != b.LogEndOffset:
			return cmpInt64(a.LogEndOffset, b.LogEndOffset)
		case a.TimeSinceCaughtUpMs != b.TimeSinceCaughtUpMs:
			return cmpInt64(b.TimeSinceCaughtUpMs, a.TimeSinceCaughtUpMs)
		}
		return int(b.ID - a.ID) // the lowest id among equals, for determinism
	})
	return best.ID
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
