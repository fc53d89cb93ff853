package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeProducers: v0.
//
// Behavior: the active producers of each partition led here, with their
// epoch, last sequence and last timestamp, the coordinator epoch of their
// last marker and the first offset of their open transaction (-1 when
// none).
func init() {
	register(api{key: kmsg.DescribeProducers, min: 0, max: 0, handle: (*Broker).handleDescribeProducers,
		authorize: authorizeDescribeProducers, errors: describeProducersErrors, quota: requestTime})
}

func (b *Broker) handleDescribeProducers(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeProducersRequest)
	resp := r.ResponseKind().(*kmsg.DescribeProducersResponse)
	img := b.image.Load()
	for _, rt := range r.Topics {
		st := kmsg.NewDescribeProducersResponseTopic()
		st.Topic = rt.Topic
		for _, partition := range rt.Partitions {
			sp := kmsg.NewDescribeProducersResponseTopicPartition()
			sp.Partition = partition
			var producers []producer.ProducerInfo
			p, err := b.hostedPartition(img, rt.Topic, partition)
			if err == nil {
				producers, err = p.ActiveProducers()
			}
			if err != nil {
				sp.ErrorCode, sp.ErrorMessage = errorCode(err), errorMessage(err)
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			for _, info := range producers {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch = info.ProducerID, int32(info.ProducerEpoch)
				ap.LastSequence, ap.LastTimestamp = info.LastSequence, info.LastTimestamp
				ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = info.CoordinatorEpoch, info.CurrentTxnStartOffset
				sp.ActiveProducers = append(sp.ActiveProducers, ap)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return respond(resp)
}

// describeProducersErrors answers each partition req names with code.
func describeProducersErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.DescribeProducersRequest), resp.(*kmsg.DescribeProducersResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewDescribeProducersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDescribeProducersResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}
