package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/wire"
)

// OffsetForLeaderEpoch: v2-4.
//
// Behavior (KIP-101/279/320): for the requested epoch, the largest epoch at
// or below it that this log has and the offset where the next epoch starts
// (the log end offset for the latest epoch); -1/-1 when the log has no
// epoch at or below it. The current leader epoch is checked as for fetches
// (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH).
func init() {
	register(api{key: kmsg.OffsetForLeaderEpoch, min: 2, max: 4, handle: (*Broker).handleOffsetForLeaderEpoch,
		authorize: authorizeOffsetForLeaderEpoch, errors: offsetForLeaderEpochErrors,
		quota: &quotaRule{exempt: func(req kmsg.Request) exemption {
			if req.(*kmsg.OffsetForLeaderEpochRequest).ReplicaID >= 0 {
				return interBroker // a follower's
			}
			return counted
		}}})
}

func (b *Broker) handleOffsetForLeaderEpoch(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.OffsetForLeaderEpochRequest)
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	img := b.image.Load()
	for _, rt := range r.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LeaderEpoch, sp.EndOffset = -1, -1
			p, err := b.hostedPartition(img, rt.Topic, rp.Partition)
			if err == nil {
				sp.LeaderEpoch, sp.EndOffset, err = p.EndOffsetForEpoch(rp.CurrentLeaderEpoch, rp.LeaderEpoch)
			}
			sp.ErrorCode = errorCode(err)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return respond(resp)
}

// offsetForLeaderEpochErrors answers each partition req names with code.
func offsetForLeaderEpochErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.OffsetForLeaderEpochRequest), resp.(*kmsg.OffsetForLeaderEpochResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.LeaderEpoch, rp.EndOffset = p.Partition, code, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}
