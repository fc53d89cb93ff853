package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeQuorum: v0-2.
//
// Behavior: the metadata quorum as its leader sees it, in the shape of
// kafka-metadata-quorum.sh: the leader, its epoch (the Raft term), the high
// watermark (the commit index), and each voter's log end offset (the index
// after the last entry the leader knows it has) with when the leader last
// heard from it. Offsets are Raft indexes: one per metadata entry, not per
// record as in KRaft. Any broker takes the request and forwards it to the
// active controller. Brokers follow the quorum through their own voters, so
// there are no observers.
func init() {
	register(api{key: kmsg.DescribeQuorum, min: 0, max: 2, handle: (*Broker).handleDescribeQuorum, forwarded: true,
		authorize: clusterRule(auth.OpDescribe), quota: requestTime,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.DescribeQuorumResponse).ErrorCode = code
		},
		// A voter that does not lead answers its partition
		// NOT_LEADER_OR_FOLLOWER, as KRaft's do.
		staleCode: kerr.NotLeaderForPartition.Code,
		// Kafka lets DESCRIBE on the cluster describe the quorum there too.
		controllerAuthorize: controllerRule(auth.OpClusterAction, auth.OpDescribe)})
}

func (b *Broker) handleDescribeQuorum(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeQuorumRequest)
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.DescribeQuorumResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewDescribeQuorumResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewDescribeQuorumResponseTopicPartition()
				sp.Partition = rp.Partition
				if err := b.describeQuorum(ctx, rt.Topic, rp.Partition, &sp, resp); err != nil {
					sp.ErrorCode = errorCode(err)
					if r.Version >= 2 {
						sp.ErrorMessage = errorMessage(err)
					}
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	})
}

func (b *Broker) describeQuorum(ctx context.Context, topic string, partition int32, sp *kmsg.DescribeQuorumResponseTopicPartition, resp *kmsg.DescribeQuorumResponse) error {
	if topic != controller.MetadataTopic || partition != 0 {
		return fmt.Errorf("%w: the metadata quorum is %s-0", kerr.UnknownTopicOrPartition, controller.MetadataTopic)
	}
	st, err := b.quorum.Status(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", kerr.UnknownServerError, err)
	}
	if st.Leader != st.NodeID {
		return fmt.Errorf("%w: node %d leads the metadata quorum", kerr.NotLeaderForPartition, st.Leader)
	}
	sp.LeaderID, sp.LeaderEpoch, sp.HighWatermark = st.Leader, int32(st.Term), int64(st.Commit)
	for _, v := range st.Voters {
		rs := kmsg.NewDescribeQuorumResponseTopicPartitionReplicaState()
		rs.ReplicaID = v.NodeID
		rs.LogEndOffset = int64(v.Match) + 1
		rs.LastFetchTimestamp, rs.LastCaughtUpTimestamp = -1, -1
		if !v.LastContact.IsZero() {
			rs.LastFetchTimestamp = v.LastContact.UnixMilli()
			if v.Match >= st.Commit {
				rs.LastCaughtUpTimestamp = rs.LastFetchTimestamp
			}
		}
		sp.CurrentVoters = append(sp.CurrentVoters, rs)
		if resp.Version >= 2 {
			n := kmsg.NewDescribeQuorumResponseNode()
			n.NodeID = v.NodeID
			for _, voter := range b.cluster.Voters {
				if voter.ID == v.NodeID && !b.cluster.Alone {
					l := kmsg.NewDescribeQuorumResponseNodeListener()
					l.Name, l.Host, l.Port = b.cfg.List("controller.listener.names")[0], voter.Host, uint16(voter.Port)
					n.Listeners = append(n.Listeners, l)
				}
			}
			resp.Nodes = append(resp.Nodes, n)
		}
	}
	return nil
}
