package broker

import (
	"context"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// DeleteRecords: v0-2.
//
// Behavior: advances the log start offset to the given offset (-1 means the
// high watermark); segments wholly below it are deleted. An offset above
// the high watermark is OFFSET_OUT_OF_RANGE. The low watermark returned is
// the new log start offset.
func init() {
	register(api{key: kmsg.DeleteRecords, min: 0, max: 2, handle: (*Broker).handleDeleteRecords,
		authorize: authorizeDeleteRecords, errors: deleteRecordsErrors, quota: requestTime})
}

func (b *Broker) handleDeleteRecords(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DeleteRecordsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	img := b.image.Load()
	for _, rt := range r.Topics {
		st := kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewDeleteRecordsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LowWatermark = -1
			low, err := b.deleteRecords(img, rt.Topic, rp.Partition, rp.Offset)
			if err != nil {
				sp.ErrorCode = errorCode(err)
			} else {
				sp.LowWatermark = low
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return respond(resp)
}

func (b *Broker) deleteRecords(img *metadata.Image, topic string, partition int32, offset int64) (int64, error) {
	p, err := b.hostedPartition(img, topic, partition)
	if err != nil {
		return 0, err
	}
	low, err := p.DeleteRecordsBefore(offset)
	if err != nil {
		return 0, storageError(err)
	}
	b.logger.Info("records deleted", "topic", topic, "partition", partition, "log.start.offset", low)
	return low, nil
}

// deleteRecordsErrors answers each partition req names with code.
func deleteRecordsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.DeleteRecordsRequest), resp.(*kmsg.DeleteRecordsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.LowWatermark = p.Partition, code, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}
