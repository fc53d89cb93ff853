package broker

import "context"

// partitionAlterer is the controller's side of ISR changes, Kafka's
// AlterPartition (API 56): a partition's leader asks it to make newISR the
// partition's ISR. It commits the change when leaderEpoch and
// partitionEpoch are the partition's current ones and returns the new
// partition epoch; otherwise it fails with the Kafka error AlterPartition
// answers (kerr): FENCED_LEADER_EPOCH or INVALID_UPDATE_VERSION for stale
// epochs, INELIGIBLE_REPLICA for a replica that may not join (fenced, or
// shutting down), OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION,
// NEW_LEADER_ELECTED. Any other error (a lost request, a controller that
// moved) is retried. It is called from the replicas' goroutines, for many
// partitions at once; ctx ends when the broker stops.
//
// The committed change also reaches the leader through the metadata image
// (applyImage), as Kafka's does; the replica takes whichever comes first.
type partitionAlterer interface {
	alterPartition(ctx context.Context, topic string, partition, leaderEpoch, partitionEpoch int32, newISR []int32) (newPartitionEpoch int32, err error)
}

// tickPartitions lets every hosted partition notice followers that fell
// out of sync.
func (b *Broker) tickPartitions() {
	b.partitionsMu.RLock()
	defer b.partitionsMu.RUnlock()
	for _, p := range b.partitions {
		p.Tick()
	}
}
