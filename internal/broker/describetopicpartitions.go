package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeTopicPartitions: v0 (KIP-966).
//
// Behavior: Metadata's partitions with the eligible leader replicas and
// the last known ELR, topics in name order (every topic when the request
// names none), at most ResponsePartitionLimit partitions (2000 when it is
// not positive, as Kafka's default max.request.partition.size.limit),
// from the request's cursor on; when more remain, NextCursor names the
// first. A named topic that does not exist answers
// UNKNOWN_TOPIC_OR_PARTITION. Authorized operations are not computed.
func init() {
	register(api{key: kmsg.DescribeTopicPartitions, min: 0, max: 0, handle: (*Broker).handleDescribeTopicPartitions,
		authorize: authorizeDescribeTopicPartitions, errors: describeTopicPartitionsErrors, quota: requestTime})
}

const describeTopicPartitionsLimit = 2000

func (b *Broker) handleDescribeTopicPartitions(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeTopicPartitionsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeTopicPartitionsResponse)
	img := b.image.Load()
	limit := int(r.ResponsePartitionLimit)
	if limit <= 0 || limit > describeTopicPartitionsLimit {
		limit = describeTopicPartitionsLimit
	}
	names := img.TopicNames()
	if len(r.Topics) > 0 {
		names = names[:0:0]
		for _, rt := range r.Topics {
			names = append(names, rt.Topic)
		}
		slices.Sort(names)
		names = slices.Compact(names)
	}
	for _, name := range names {
		if r.Cursor != nil && name < r.Cursor.Topic {
			continue
		}
		t, ok := img.Topics[name]
		if !ok {
			st := kmsg.NewDescribeTopicPartitionsResponseTopic()
			st.Topic, st.ErrorCode = kmsg.StringPtr(name), kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, st)
			continue
		}
		first := 0
		if r.Cursor != nil && name == r.Cursor.Topic {
			first = int(max(r.Cursor.Partition, 0))
		}
		st := describeTopicPartitions(t)
		for i := first; i < len(t.Partitions); i++ {
			if limit == 0 {
				resp.NextCursor = &kmsg.DescribeTopicPartitionsResponseNextCursor{Topic: name, Partition: int32(i)}
				break
			}
			st.Partitions = append(st.Partitions, describePartition(img, int32(i), &t.Partitions[i]))
			limit--
		}
		if len(st.Partitions) > 0 || len(t.Partitions) == 0 {
			resp.Topics = append(resp.Topics, st)
		}
		if resp.NextCursor != nil {
			break
		}
	}
	return respond(resp)
}

func describeTopicPartitions(t *metadata.Topic) kmsg.DescribeTopicPartitionsResponseTopic {
	st := kmsg.NewDescribeTopicPartitionsResponseTopic()
	st.Topic, st.TopicID, st.IsInternal = kmsg.StringPtr(t.Name), t.ID, isInternalTopic(t.Name)
	return st
}

func describePartition(img *metadata.Image, index int32, p *metadata.Partition) kmsg.DescribeTopicPartitionsResponseTopicPartition {
	sp := kmsg.NewDescribeTopicPartitionsResponseTopicPartition()
	sp.Partition, sp.LeaderID, sp.LeaderEpoch = index, p.Leader, p.LeaderEpoch
	sp.Replicas, sp.ISR = orNone(p.Replicas), orNone(p.ISR)
	sp.EligibleLeaderReplicas, sp.LastKnownELR = orNone(p.ELR), orNone(p.LastKnownELR)
	sp.OfflineReplicas = []int32{}
	for _, r := range p.Replicas {
		if br, ok := img.Brokers[r]; !ok || br.Fenced {
			sp.OfflineReplicas = append(sp.OfflineReplicas, r)
		}
	}
	if p.Leader < 0 {
		sp.ErrorCode = kerr.LeaderNotAvailable.Code
	}
	return sp
}

// orNone returns ids, or an empty list for nil.
func orNone(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

// describeTopicPartitionsErrors answers each topic req names with code.
func describeTopicPartitionsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.DescribeTopicPartitionsResponse)
	for _, rt := range req.(*kmsg.DescribeTopicPartitionsRequest).Topics {
		t := kmsg.NewDescribeTopicPartitionsResponseTopic()
		t.Topic, t.ErrorCode = kmsg.StringPtr(rt.Topic), code
		out.Topics = append(out.Topics, t)
	}
}
