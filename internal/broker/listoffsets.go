package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// ListOffsets: v1-8.
//
// Behavior:
// * -1 (latest) is the high watermark (there are no transactions, so it is
// also the last stable offset), -2 (earliest) the log start offset, -3
// (v7+) the offset and timestamp of the record with the largest timestamp,
// -4 (v8+, earliest local) the log start offset, as there is no tiered
// storage. Any other timestamp finds the first record at or after it
// through the time index; when there is none, offset and timestamp are -1.
// * The leader epoch returned is the current leader epoch.
func init() { register(2, 1, 8, (*Broker).handleListOffsets) }

const (
	listLatest        = -1
	listEarliest      = -2
	listMaxTimestamp  = -3
	listEarliestLocal = -4
)

func (b *Broker) handleListOffsets(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.ListOffsetsRequest)
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	img := b.image.Load()
	for _, rt := range r.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset = -1, -1
			if err := b.listOffset(img, rt.Topic, &rp, &sp, r.Version); err != nil {
				sp.ErrorCode = errorCode(err)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return respond(resp)
}

func (b *Broker) listOffset(img *metadata.Image, topic string, rp *kmsg.ListOffsetsRequestTopicPartition, sp *kmsg.ListOffsetsResponseTopicPartition, version int16) error {
	frp := kmsg.FetchRequestTopicPartition{Partition: rp.Partition, CurrentLeaderEpoch: rp.CurrentLeaderEpoch}
	p, err := b.fetchPartition(img, topic, &frp)
	if err != nil {
		return err
	}
	_, epoch := p.Leader()
	sp.LeaderEpoch = epoch
	log := p.Log()
	switch ts := rp.Timestamp; {
	case ts == listLatest:
		sp.Offset = p.HighWatermark()
	case ts == listEarliest || (ts == listEarliestLocal && version >= 8):
		sp.Offset = log.LogStartOffset()
	case ts == listMaxTimestamp && version >= 7:
		sp.Timestamp, sp.Offset = log.MaxTimestamp()
		if sp.Offset >= p.HighWatermark() {
			sp.Timestamp, sp.Offset = -1, -1
		}
	case ts < 0:
		return kerr.UnsupportedVersion
	default:
		if off, t, ok := log.OffsetForTimestamp(ts); ok && off < p.HighWatermark() {
			sp.Offset, sp.Timestamp = off, t
		}
	}
	return nil
}
