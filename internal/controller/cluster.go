package controller

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// The broker lifecycle as KRaft's controller runs it (ClusterControlManager,
// BrokerHeartbeatManager, ReplicationControlManager): pure functions of the
// image, the active controller's in-memory heartbeat times and the time,
// returning the records to commit and the answer. The controller calls
// them under its proposer lock; tests call them with a script and a manual
// clock (testdata/cluster.txt).

// liveness is the active controller's view of brokers' heartbeats: when it
// last heard from each, by node id. It is not in the log: a new active
// controller starts everyone's session afresh, as Kafka's does.
type liveness struct {
	sessionTimeout time.Duration
	lastSeen       map[int32]time.Time
}

func newLiveness(sessionTimeout time.Duration) *liveness {
	return &liveness{sessionTimeout: sessionTimeout, lastSeen: map[int32]time.Time{}}
}

// alive reports whether a broker's session is live at now.
func (l *liveness) alive(id int32, now time.Time) bool {
	seen, ok := l.lastSeen[id]
	return ok && now.Sub(seen) < l.sessionTimeout
}

// Registration is a broker's BrokerRegistration request.
type Registration struct {
	NodeID        int32
	IncarnationID metadata.UUID
	// Listeners are the broker's endpoints, the one clients use first.
	Listeners []metadata.Endpoint
	Rack      string
	// PreviousBrokerEpoch is the epoch the node had when it last shut
	// down cleanly, or -1 after an unclean shutdown (or none before).
	PreviousBrokerEpoch int64
	// Features are the feature levels the broker supports.
	Features []metadata.Feature
}

// planRegister registers a broker, fenced until it has caught up with the
// metadata log. A retry of the same incarnation gets the same epoch and
// commits nothing; a new incarnation of a node whose session is still live
// is refused (DUPLICATE_BROKER_REGISTRATION), so two processes with one
// node id cannot both run, unless the node is self, the active
// controller's own: the process that runs this controller is the only one
// with that id, so its old incarnation is gone (a single node restarting).
// A new incarnation whose PreviousBrokerEpoch is not the registered epoch
// shut down uncleanly: it leaves the ISRs and ELRs (KIP-966).
func planRegister(img *metadata.Image, pol Policy, live *liveness, reg Registration, now time.Time, self int32) ([]metadata.Record, int64, error) {
	if len(reg.Listeners) == 0 {
		return nil, -1, fmt.Errorf("%w: a broker registration without listeners", kerr.InvalidRequest)
	}
	old, ok := img.Brokers[reg.NodeID]
	if ok && old.IncarnationID == reg.IncarnationID && slices.Equal(old.Listeners, reg.Listeners) && old.Rack == reg.Rack &&
		slices.Equal(old.Features, reg.Features) {
		live.lastSeen[reg.NodeID] = now
		return nil, old.Epoch, nil
	}
	if ok && old.IncarnationID != reg.IncarnationID && !old.Fenced && live.alive(reg.NodeID, now) && reg.NodeID != self {
		return nil, -1, fmt.Errorf("%w: node %d is registered by another live process (incarnation %s)", kerr.DuplicateBrokerRegistration, reg.NodeID, old.IncarnationID)
	}
	var epoch int64 = 1
	if ok {
		epoch = old.Epoch + 1
	}
	live.lastSeen[reg.NodeID] = now
	records := []metadata.Record{{Broker: &metadata.BrokerRecord{
		NodeID: reg.NodeID, Host: reg.Listeners[0].Host, Port: reg.Listeners[0].Port, Listeners: reg.Listeners, Rack: reg.Rack,
		IncarnationID: reg.IncarnationID, Epoch: epoch, Fenced: true, Features: reg.Features,
	}}}
	switch {
	case ok && reg.PreviousBrokerEpoch != old.Epoch:
		records = append(uncleanShutdownChanges(img, pol, reg.NodeID), records...)
	case ok && !old.Fenced:
		// The old incarnation is gone without being fenced: its
		// leaderships move now.
		records = append(leaderChangesWithout(img, pol, reg.NodeID, false), records...)
	}
	return records, epoch, nil
}

// Heartbeat is a broker's BrokerHeartbeat request.
type Heartbeat struct {
	NodeID int32
	Epoch  int64
	// MetadataOffset is the offset of the image the broker acts on.
	MetadataOffset int64
	WantFence      bool
	WantShutDown   bool
}

// HeartbeatReply is BrokerHeartbeat's answer.
type HeartbeatReply struct {
	IsCaughtUp     bool
	IsFenced       bool
	ShouldShutDown bool
}

// planHeartbeat renews a broker's session and moves it through its states:
// fenced until caught up, then unfenced (leading the partitions that lost
// their leader while it was away); on WantShutDown in controlled shutdown,
// with its leaderships moved to other in-sync replicas, until it leads
// nothing that has another eligible replica, when it is fenced and told to
// shut down.
func planHeartbeat(img *metadata.Image, pol Policy, live *liveness, hb Heartbeat, now time.Time) ([]metadata.Record, HeartbeatReply, error) {
	b, ok := img.Brokers[hb.NodeID]
	if !ok || b.Epoch != hb.Epoch {
		return nil, HeartbeatReply{}, fmt.Errorf("%w: node %d epoch %d is not the registered one", kerr.StaleBrokerEpoch, hb.NodeID, hb.Epoch)
	}
	live.lastSeen[hb.NodeID] = now
	reply := HeartbeatReply{IsCaughtUp: hb.MetadataOffset >= b.RegistrationOffset, IsFenced: b.Fenced}
	change := func(fenced, shutdown *bool) metadata.Record {
		return metadata.Record{BrokerChange: &metadata.BrokerChangeRecord{NodeID: b.NodeID, Epoch: b.Epoch, Fenced: fenced, InControlledShutdown: shutdown}}
	}
	yes, no := true, false
	switch {
	case hb.WantShutDown:
		var records []metadata.Record
		if !b.InControlledShutdown {
			records = append(records, change(nil, &yes))
		}
		moves := leaderChangesWithout(img, pol, b.NodeID, false)
		records = append(records, moves...)
		if len(moves) == 0 {
			// Nothing left to move (what it still leads has no other
			// eligible replica): it may stop, fenced.
			reply.ShouldShutDown = true
			if !b.Fenced {
				records = append(records, leaderChangesWithout(img, pol, b.NodeID, true)...)
				records = append(records, change(&yes, nil))
			}
			reply.IsFenced = true
		}
		return records, reply, nil
	case hb.WantFence:
		if b.Fenced {
			return nil, reply, nil
		}
		reply.IsFenced = true
		return append(leaderChangesWithout(img, pol, b.NodeID, true), change(&yes, nil)), reply, nil
	case b.Fenced && reply.IsCaughtUp:
		reply.IsFenced = false
		records := []metadata.Record{change(&no, &no)}
		return append(records, leaderChangesWith(img, pol, b.NodeID)...), reply, nil
	}
	return nil, reply, nil
}

// planFenceExpired fences the unfenced brokers whose session expired, and
// moves their leaderships; then it elects a leader where one can be had
// (a topic that allows unclean elections now, say).
func planFenceExpired(img *metadata.Image, pol Policy, live *liveness, now time.Time) []metadata.Record {
	var records []metadata.Record
	// Each broker's changes are planned against the image after the
	// previous one's.
	cur := img
	yes := true
	for _, id := range slices.Sorted(maps.Keys(img.Brokers)) {
		b := img.Brokers[id]
		if b.Fenced {
			continue
		}
		if _, ok := live.lastSeen[id]; !ok {
			// A controller new to its role gives every broker a session
			// from now.
			live.lastSeen[id] = now
			continue
		}
		if live.alive(id, now) {
			continue
		}
		fenced := append(leaderChangesWithout(cur, pol, id, true), metadata.Record{BrokerChange: &metadata.BrokerChangeRecord{NodeID: id, Epoch: b.Epoch, Fenced: &yes}})
		next, err := cur.Apply(cur.Offset, fenced...)
		if err != nil {
			panic(fmt.Sprintf("controller: invariant: fencing records do not apply: %v", err))
		}
		records, cur = append(records, fenced...), next
	}
	return append(records, planLeaderless(cur, pol)...)
}

// leaderChangesWithout moves leadership and ISR membership away from a
// broker that is being fenced, is shutting down or came back as a new
// process: a partition it leads gets another leader from the ISR (or the
// ELR, or an unclean one where the topic allows it), and it leaves every
// ISR, for the ELR when the ISR is then below min.insync.replicas. A
// partition it leads with no other leader goes offline (leader -1) when
// offline is set, and keeps its leader, ISR and all, otherwise.
func leaderChangesWithout(img *metadata.Image, pol Policy, id int32, offline bool) []metadata.Record {
	var records []metadata.Record
	eachPartition(img, func(t *metadata.Topic, index int32, p *metadata.Partition) {
		if p.Leader != id && !slices.Contains(p.ISR, id) {
			return
		}
		c := newChange(img, pol, t, index, p)
		c.isr, c.remove = without(p.ISR, id), id
		rec := c.build()
		if rec == nil || !offline && p.Leader == id && rec.Leader != nil && *rec.Leader < 0 {
			return
		}
		records = append(records, metadata.Record{PartitionChange: rec})
	})
	return records
}

// leaderChangesWith elects leaders, now that broker id is being unfenced,
// for the partitions it is a replica of that have none.
func leaderChangesWith(img *metadata.Image, pol Policy, id int32) []metadata.Record {
	var records []metadata.Record
	eachPartition(img, func(t *metadata.Topic, index int32, p *metadata.Partition) {
		if p.Leader >= 0 || !slices.Contains(p.Replicas, id) {
			return
		}
		c := newChange(img, pol, t, index, p)
		c.add = id
		if rec := c.build(); rec != nil && rec.Leader != nil && *rec.Leader >= 0 {
			records = append(records, metadata.Record{PartitionChange: rec})
		}
	})
	return records
}

// planLeaderless elects a leader for every partition without one that can
// have one now.
func planLeaderless(img *metadata.Image, pol Policy) []metadata.Record {
	var records []metadata.Record
	eachPartition(img, func(t *metadata.Topic, index int32, p *metadata.Partition) {
		if p.Leader >= 0 {
			return
		}
		if rec := newChange(img, pol, t, index, p).build(); rec != nil && rec.Leader != nil && *rec.Leader >= 0 {
			records = append(records, metadata.Record{PartitionChange: rec})
		}
	})
	return records
}

// uncleanShutdownChanges takes a broker that restarted after an unclean
// shutdown out of the ISRs and ELRs of its partitions with other
// replicas, and moves what it led: its log may have lost the unflushed
// records that the others have. A single replica has no other copy and
// stays as it is.
func uncleanShutdownChanges(img *metadata.Image, pol Policy, id int32) []metadata.Record {
	var records []metadata.Record
	eachPartition(img, func(t *metadata.Topic, index int32, p *metadata.Partition) {
		if len(p.Replicas) < 2 || p.Leader != id && !slices.Contains(p.ISR, id) && !slices.Contains(p.ELR, id) {
			return
		}
		c := newChange(img, pol, t, index, p)
		c.isr, c.remove, c.uncleanShutdown = without(p.ISR, id), id, id
		if rec := c.build(); rec != nil {
			records = append(records, metadata.Record{PartitionChange: rec})
		}
	})
	return records
}

// eachPartition calls fn for every partition, topics in name order.
func eachPartition(img *metadata.Image, fn func(t *metadata.Topic, index int32, p *metadata.Partition)) {
	for _, name := range img.TopicNames() {
		t := img.Topics[name]
		for i := range t.Partitions {
			fn(t, int32(i), &t.Partitions[i])
		}
	}
}

// PartitionAlter is one partition of an AlterPartition request: its leader
// asks for newISR.
type PartitionAlter struct {
	Topic          string
	Partition      int32
	Leader         int32
	BrokerEpoch    int64 // -1: not checked
	LeaderEpoch    int32
	PartitionEpoch int32
	NewISR         []int32
}

// AlterResult is the partition after an AlterPartition.
type AlterResult struct {
	Leader, LeaderEpoch, PartitionEpoch int32
	ISR                                 []int32
}

// planAlterPartition checks an ISR change its leader asks for, as Kafka's
// ReplicationControlManager does, and returns its record.
func planAlterPartition(img *metadata.Image, pol Policy, req PartitionAlter) ([]metadata.Record, AlterResult, error) {
	t, p, ok := img.Partition(req.Topic, req.Partition)
	if !ok {
		return nil, AlterResult{}, fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, req.Topic, req.Partition)
	}
	current := AlterResult{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: p.ISR}
	b := img.Brokers[req.Leader]
	switch {
	case b == nil || req.BrokerEpoch >= 0 && b.Epoch != req.BrokerEpoch:
		return nil, current, fmt.Errorf("%w: broker %d epoch %d", kerr.StaleBrokerEpoch, req.Leader, req.BrokerEpoch)
	case p.Leader != req.Leader:
		return nil, current, fmt.Errorf("%w: broker %d does not lead %s-%d (leader %d)", kerr.NotLeaderForPartition, req.Leader, req.Topic, req.Partition, p.Leader)
	case req.LeaderEpoch < p.LeaderEpoch:
		return nil, current, fmt.Errorf("%w: leader epoch %d, current %d", kerr.FencedLeaderEpoch, req.LeaderEpoch, p.LeaderEpoch)
	case req.LeaderEpoch > p.LeaderEpoch:
		return nil, current, fmt.Errorf("%w: leader epoch %d is ahead of %d", kerr.NotLeaderForPartition, req.LeaderEpoch, p.LeaderEpoch)
	case req.PartitionEpoch != p.PartitionEpoch:
		return nil, current, fmt.Errorf("%w: partition epoch %d, current %d", kerr.InvalidUpdateVersion, req.PartitionEpoch, p.PartitionEpoch)
	case !slices.Contains(req.NewISR, req.Leader):
		return nil, current, fmt.Errorf("%w: the ISR must hold its leader", kerr.InvalidRequest)
	}
	seen := map[int32]bool{}
	for _, r := range req.NewISR {
		if seen[r] || !slices.Contains(p.Replicas, r) {
			return nil, current, fmt.Errorf("%w: %d is not a replica of %s-%d, or is named twice", kerr.InvalidRequest, r, req.Topic, req.Partition)
		}
		seen[r] = true
		if !slices.Contains(p.ISR, r) && !img.Brokers[r].Eligible() {
			return nil, current, fmt.Errorf("%w: broker %d is fenced or shutting down", kerr.IneligibleReplica, r)
		}
	}
	if slices.Equal(req.NewISR, p.ISR) {
		return nil, current, nil
	}
	c := newChange(img, pol, t, req.Partition, p)
	c.isr, c.election = slices.Clone(req.NewISR), electNone
	rec := c.build()
	if rec == nil {
		return nil, current, nil
	}
	// The partition as the record leaves it: a change that completes a
	// reassignment may also move the leadership.
	next, err := img.Apply(img.Offset, metadata.Record{PartitionChange: rec})
	if err != nil {
		panic(fmt.Sprintf("controller: invariant: a planned partition change does not apply: %v", err))
	}
	_, np, _ := next.Partition(req.Topic, req.Partition)
	return []metadata.Record{{PartitionChange: rec}}, AlterResult{Leader: np.Leader, LeaderEpoch: np.LeaderEpoch, PartitionEpoch: np.PartitionEpoch, ISR: np.ISR}, nil
}
