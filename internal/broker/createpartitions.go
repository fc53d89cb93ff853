package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/wire"
)

// CreatePartitions: v0-3.
//
// Behavior: a topic can only grow (INVALID_PARTITIONS otherwise); new
// partitions get the given assignment or an automatic one with the topic's
// replication factor; validate_only creates nothing.
func init() {
	register(api{key: kmsg.CreatePartitions, min: 0, max: 3, handle: (*Broker).handleCreatePartitions, forwarded: true,
		authorize: authorizeCreatePartitions, errors: createPartitionsErrors, quota: requestTime})
}

func (b *Broker) handleCreatePartitions(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.CreatePartitionsRequest)
	specs := make([]controller.PartitionsSpec, len(r.Topics))
	for i, t := range r.Topics {
		specs[i] = controller.PartitionsSpec{Topic: t.Topic, Count: t.Count}
		for _, a := range t.Assignment {
			specs[i].Assignment = append(specs[i].Assignment, a.Replicas)
		}
	}
	return b.deferController(ctx, r.TimeoutMillis, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
		for i, err := range b.controller.CreatePartitions(ctx, specs, r.ValidateOnly) {
			st := kmsg.NewCreatePartitionsResponseTopic()
			st.Topic = specs[i].Topic
			st.ErrorCode, st.ErrorMessage = errorCode(err), errorMessage(err)
			if err == nil && !r.ValidateOnly {
				b.logger.Info("partitions added", "topic", st.Topic, "partitions", specs[i].Count)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	})
}

// createPartitionsErrors answers each topic req names with code.
func createPartitionsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.CreatePartitionsResponse)
	for _, t := range req.(*kmsg.CreatePartitionsRequest).Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic, st.ErrorCode = t.Topic, code
		out.Topics = append(out.Topics, st)
	}
}
