package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/wire"
)

// AlterPartitionReassignments: v0-1 (KIP-455; v1 adds KIP-860's
// AllowReplicationFactorChange).
//
// Behavior: each partition is reassigned (target replicas), or its
// reassignment cancelled (null replicas), independently, in one metadata
// change; the answer comes once it is committed, not when the replicas
// have moved (ListPartitionReassignments shows that). Errors per
// partition, as Kafka's controller: UNKNOWN_TOPIC_OR_PARTITION,
// INVALID_REPLICA_ASSIGNMENT (empty, duplicate or unregistered replicas; a
// cancel that would need an unclean election), NO_REASSIGNMENT_IN_PROGRESS
// (cancel), INVALID_REPLICATION_FACTOR (v1 with the replication factor
// changing and not allowed). Any broker takes it and forwards it to the
// active controller.
func init() {
	register(api{key: kmsg.AlterPartitionAssignments, min: 0, max: 1, handle: (*Broker).handleAlterPartitionReassignments,
		forwarded: true, authorize: clusterRule(auth.OpAlter), errors: alterPartitionAssignmentsErrors, quota: requestTime})
}

func (b *Broker) handleAlterPartitionReassignments(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.AlterPartitionAssignmentsRequest)
	var specs []controller.Reassignment
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			specs = append(specs, controller.Reassignment{Topic: t.Topic, Partition: p.Partition, Replicas: p.Replicas})
		}
	}
	allowRFChange := r.Version < 1 || r.AllowReplicationFactorChange
	return b.deferController(ctx, r.TimeoutMillis, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
		resp.AllowReplicationFactorChange = allowRFChange
		errs := b.controller.AlterPartitionReassignments(ctx, specs, allowRFChange)
		i := 0
		for _, t := range r.Topics {
			st := kmsg.NewAlterPartitionAssignmentsResponseTopic()
			st.Topic = t.Topic
			for _, p := range t.Partitions {
				sp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
				sp.Partition = p.Partition
				sp.ErrorCode, sp.ErrorMessage = errorCode(errs[i]), errorMessage(errs[i])
				if errs[i] == nil {
					b.logger.Info("partition reassignment", "topic", t.Topic, "partition", p.Partition, "replicas", p.Replicas)
				}
				i++
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	})
}

// alterPartitionAssignmentsErrors answers the request and each partition
// it names with code.
func alterPartitionAssignmentsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.AlterPartitionAssignmentsResponse)
	out.ErrorCode = code
	for _, t := range req.(*kmsg.AlterPartitionAssignmentsRequest).Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}
