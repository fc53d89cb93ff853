package replica

import "slices"

// Replication is a partition's replication state as this replica sees it,
// for metrics and health checks.
type Replication struct {
	// Leader is set when this replica leads; Replicas and ISR are then
	// the leader's view (the ISR as last committed), which may be newer
	// than the metadata image's.
	Leader        bool
	Replicas, ISR []int32
	// Removing are the replicas a reassignment is removing.
	Removing []int32
	// MinInsyncReplicas is min.insync.replicas.
	MinInsyncReplicas int
	// FetcherLag, on a follower that has fetched from its leader at this
	// leader epoch, is how many records its log end offset is behind the
	// high watermark the leader last sent, never negative (Kafka's
	// FetcherLagMetrics ConsumerLag); -1 otherwise.
	FetcherLag int64
}

// UnderReplicated reports whether the partition is led here with an ISR
// smaller than its replica set, less the replicas a reassignment is
// removing (Kafka's UnderReplicatedPartitions, whose replication factor
// during a reassignment is the target's).
func (r Replication) UnderReplicated() bool {
	return r.Leader && len(r.ISR) < len(r.Replicas)-len(r.Removing)
}

// UnderMinISR reports whether the partition is led here with an ISR
// smaller than min.insync.replicas (Kafka's UnderMinIsrPartitionCount):
// acks=all produces fail with NOT_ENOUGH_REPLICAS.
func (r Replication) UnderMinISR() bool { return r.Leader && len(r.ISR) < r.MinInsyncReplicas }

// Replication returns the partition's replication state.
func (p *Partition) Replication() Replication {
	leo := p.log.LogEndOffset()
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tracker
	r := Replication{Leader: t.leader, Replicas: slices.Clone(t.replicas), ISR: slices.Clone(t.isr), Removing: slices.Clone(t.removing),
		MinInsyncReplicas: t.minInsync, FetcherLag: -1}
	if !t.leader && t.leaderHighWatermark >= 0 {
		r.FetcherLag = max(t.leaderHighWatermark-leo, 0)
	}
	return r
}
