package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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

// controllerAlterer is the partitionAlterer of a broker in a cluster: it
// sends AlterPartition to the active controller over the controller client
// (or to this node's own controller when it is the active one).
type controllerAlterer struct{ b *Broker }

func (a controllerAlterer) alterPartition(ctx context.Context, topic string, partition, leaderEpoch, partitionEpoch int32, newISR []int32) (int32, error) {
	b := a.b
	if b.ctrl == nil {
		return 0, errors.New("broker: no controller client yet")
	}
	img := b.image.Load()
	t := img.Topics[topic]
	if t == nil {
		return 0, kerr.UnknownTopicOrPartition
	}
	req := kmsg.NewPtrAlterPartitionRequest()
	req.Version = controllerAPIs[req.Key()].max
	req.BrokerID, req.BrokerEpoch = b.nodeID, b.brokerEpoch.Load()
	rt := kmsg.NewAlterPartitionRequestTopic()
	rt.TopicID = t.ID
	rp := kmsg.NewAlterPartitionRequestTopicPartition()
	rp.Partition, rp.LeaderEpoch, rp.PartitionEpoch = partition, leaderEpoch, partitionEpoch
	rp.NewISR = newISR
	for _, id := range newISR {
		e := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
		e.BrokerID, e.BrokerEpoch = id, -1
		if br := img.Brokers[id]; br != nil {
			e.BrokerEpoch = br.Epoch
		}
		rp.NewEpochISR = append(rp.NewEpochISR, e)
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	rctx, cancel := context.WithTimeout(ctx, controllerRequestTimeout)
	defer cancel()
	resp, err := b.ctrl.Request(rctx, req)
	if err != nil {
		return 0, err
	}
	r := resp.(*kmsg.AlterPartitionResponse)
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return 0, err
	}
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("broker: AlterPartition answered %d topics", len(r.Topics))
	}
	sp := r.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(sp.ErrorCode); err != nil {
		return 0, err
	}
	return sp.PartitionEpoch, nil
}
