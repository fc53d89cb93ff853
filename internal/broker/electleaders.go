package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/wire"
)

// ElectLeaders: v0-2, answered by the active controller.
//
// Behavior (Kafka's ReplicationControlManager.electLeaders): ElectionType
// 0 (PREFERRED, the only one before v1) elects a partition's first
// replica if it is alive and in sync, PREFERRED_LEADER_NOT_AVAILABLE
// otherwise; 1 (UNCLEAN) elects a leader for a partition without one, from
// the ISR (or the ELR) if it can and any live replica otherwise,
// ELIGIBLE_LEADERS_NOT_AVAILABLE when none is alive. A partition that
// needs no election answers ELECTION_NOT_NEEDED; null topics elect every
// partition and leave those out. Another election type is
// INVALID_REQUEST.
func init() {
	register(api{key: kmsg.ElectLeaders, min: 0, max: 2, handle: (*Broker).handleElectLeaders, forwarded: true,
		authorize: clusterRule(auth.OpAlter), errors: electLeadersErrors, quota: requestTime})
}

func (b *Broker) handleElectLeaders(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.ElectLeadersRequest)
	resp := r.ResponseKind().(*kmsg.ElectLeadersResponse)
	if r.ElectionType != 0 && r.ElectionType != 1 {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return respond(resp)
	}
	var targets []controller.ElectTarget
	if r.Topics != nil {
		targets = []controller.ElectTarget{}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				targets = append(targets, controller.ElectTarget{Topic: t.Topic, Partition: p})
			}
		}
	}
	return b.deferController(ctx, r.TimeoutMillis, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.ElectLeadersResponse)
		results, err := b.controller.ElectLeaders(ctx, r.ElectionType == 1, targets)
		if err != nil {
			resp.ErrorCode = errorCode(err)
			return resp
		}
		index := map[string]int{}
		for _, res := range results {
			i, ok := index[res.Topic]
			if !ok {
				i = len(resp.Topics)
				index[res.Topic] = i
				st := kmsg.NewElectLeadersResponseTopic()
				st.Topic = res.Topic
				resp.Topics = append(resp.Topics, st)
			}
			sp := kmsg.NewElectLeadersResponseTopicPartition()
			sp.Partition = res.Partition
			sp.ErrorCode, sp.ErrorMessage = errorCode(res.Err), errorMessage(res.Err)
			resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, sp)
			if res.Err == nil {
				b.logger.Info("leader elected", "topic", res.Topic, "partition", res.Partition, "unclean", r.ElectionType == 1)
			}
		}
		return resp
	})
}

// electLeadersErrors answers the request (v1+) and each partition it
// names with code: v0 has no top-level error.
func electLeadersErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.ElectLeadersResponse)
	out.ErrorCode = code
	for _, t := range req.(*kmsg.ElectLeadersRequest).Topics {
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewElectLeadersResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}
