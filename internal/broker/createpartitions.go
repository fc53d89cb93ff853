package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/wire"
)

// CreatePartitions: v0-3.
//
// Behavior: a topic can only grow (INVALID_PARTITIONS otherwise); new
// partitions get the given assignment or an automatic one with the topic's
// replication factor; validate_only creates nothing.
func init() { register(37, 0, 3, (*Broker).handleCreatePartitions) }

func (b *Broker) handleCreatePartitions(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.CreatePartitionsRequest)
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, t := range r.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = t.Topic
		var assignment [][]int32
		for _, a := range t.Assignment {
			assignment = append(assignment, a.Replicas)
		}
		err := b.controller.CreatePartitions(t.Topic, t.Count, assignment, r.ValidateOnly)
		st.ErrorCode, st.ErrorMessage = errorCode(err), errorMessage(err)
		if err == nil && !r.ValidateOnly {
			b.logger.Info("partitions added", "topic", t.Topic, "partitions", t.Count)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return respond(resp)
}
