package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/wire"
)

// ListOffsets: v1-8.
//
// Behavior:
// * -1 (latest) is the high watermark, or with isolation level
// read_committed (v2+) the last stable offset, -2 (earliest) the log start offset, -3
// (v7+) the offset and timestamp of the record with the largest timestamp,
// -4 (v8+, earliest local) the log start offset, as there is no tiered
// storage. Any other timestamp finds the first record at or after it
// through the time index, below the same bound; when there is none, offset
// and timestamp are -1.
// * The leader epoch returned is the current leader epoch.
// * A follower asking (replica id >= 0) gets the log end offset for -1.
func init() {
	register(api{key: kmsg.ListOffsets, min: 1, max: 8, handle: (*Broker).handleListOffsets,
		authorize: authorizeListOffsets, errors: listOffsetsErrors, quota: requestTime})
}

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
			if err := b.listOffset(img, rt.Topic, &rp, &sp, r.Version, r.ReplicaID, r.IsolationLevel == 1); err != nil {
				sp.ErrorCode = errorCode(err)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return respond(resp)
}

func (b *Broker) listOffset(img *metadata.Image, topic string, rp *kmsg.ListOffsetsRequestTopicPartition, sp *kmsg.ListOffsetsResponseTopicPartition, version int16, replicaID int32, readCommitted bool) error {
	p, err := b.hostedPartition(img, topic, rp.Partition)
	if err != nil {
		return err
	}
	if (rp.Timestamp == replica.MaxTimestamp && version < 7) || (rp.Timestamp == replica.EarliestLocalTimestamp && version < 8) {
		return kerr.UnsupportedVersion
	}
	res, err := p.OffsetForTime(rp.CurrentLeaderEpoch, rp.Timestamp, replicaID, readCommitted)
	if err != nil {
		return err
	}
	sp.Offset, sp.Timestamp, sp.LeaderEpoch = res.Offset, res.Timestamp, res.LeaderEpoch
	return nil
}

// listOffsetsErrors answers each partition req names with code.
func listOffsetsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.ListOffsetsRequest), resp.(*kmsg.ListOffsetsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}
