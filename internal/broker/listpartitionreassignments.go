package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/wire"
)

// ListPartitionReassignments: v0 (KIP-455).
//
// Behavior: the reassignments in progress (replicas, adding, removing) in
// the active controller's latest image, of every partition when the topics
// are null, else of the partitions named; unknown topics and partitions,
// and partitions not being reassigned, are left out, as Kafka's controller
// does. Any broker takes it and forwards it to the active controller.
func init() {
	register(api{key: kmsg.ListPartitionReassignments, min: 0, max: 0, handle: (*Broker).handleListPartitionReassignments,
		forwarded: true, authorize: clusterRule(auth.OpDescribe), quota: requestTime,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.ListPartitionReassignmentsResponse).ErrorCode = code
		}})
}

func (b *Broker) handleListPartitionReassignments(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.ListPartitionReassignmentsRequest)
	return b.deferController(ctx, r.TimeoutMillis, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
		if _, active := b.controller.Leader(); !active {
			resp.ErrorCode = kerr.NotController.Code
			return resp
		}
		var topics map[string][]int32
		if r.Topics != nil {
			topics = map[string][]int32{}
			for _, t := range r.Topics {
				topics[t.Topic] = append(topics[t.Topic], t.Partitions...)
			}
		}
		for _, o := range b.controller.ListPartitionReassignments(topics) {
			if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != o.Topic {
				st := kmsg.NewListPartitionReassignmentsResponseTopic()
				st.Topic = o.Topic
				resp.Topics = append(resp.Topics, st)
			}
			sp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
			sp.Partition, sp.Replicas, sp.AddingReplicas, sp.RemovingReplicas = o.Partition, o.Replicas, o.Adding, o.Removing
			if sp.AddingReplicas == nil {
				sp.AddingReplicas = []int32{}
			}
			if sp.RemovingReplicas == nil {
				sp.RemovingReplicas = []int32{}
			}
			st := &resp.Topics[len(resp.Topics)-1]
			st.Partitions = append(st.Partitions, sp)
		}
		return resp
	})
}
