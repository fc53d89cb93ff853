package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The metadata quorum as DescribeQuorum (API 55) reports it, printed the
// way Kafka's kafka-metadata-quorum.sh describe --status and --replication
// print it, so that what operators know from Kafka reads the same here.

// metadataTopic is the metadata log's topic; its partition 0 is the quorum.
const metadataTopic = "__cluster_metadata"

// quorumReplica is one row of describe --replication: a voter's or an
// observer's progress as the quorum's leader tracks it. Timestamps are the
// leader's wall clock in milliseconds, -1 when unknown.
type quorumReplica struct {
	NodeID                int32    `json:"node_id"`
	LogEndOffset          int64    `json:"log_end_offset"`
	Lag                   int64    `json:"lag"`
	LastFetchTimestamp    int64    `json:"last_fetch_timestamp"`
	LastCaughtUpTimestamp int64    `json:"last_caught_up_timestamp"`
	Status                string   `json:"status"` // Leader, Follower or Observer
	Endpoints             []string `json:"endpoints,omitempty"`
}

// quorumNode is a voter or observer in describe --status: its id and the
// controller endpoints the leader knows for it.
type quorumNode struct {
	ID        int32    `json:"id"`
	Endpoints []string `json:"endpoints,omitempty"`
}

// quorumStatus is describe --status.
type quorumStatus struct {
	ClusterID            string       `json:"cluster_id"`
	LeaderID             int32        `json:"leader_id"`
	LeaderEpoch          int32        `json:"leader_epoch"`
	HighWatermark        int64        `json:"high_watermark"`
	MaxFollowerLag       int64        `json:"max_follower_lag"`
	MaxFollowerLagTimeMs int64        `json:"max_follower_lag_time_ms"`
	CurrentVoters        []quorumNode `json:"current_voters"`
	CurrentObservers     []quorumNode `json:"current_observers"`
}

// quorumView is one DescribeQuorum answer, rows in Kafka's order: the
// leader, the other voters, the observers.
type quorumView struct {
	LeaderID      int32
	LeaderEpoch   int32
	HighWatermark int64
	Replicas      []quorumReplica
}

// errNoQuorumLeader is returned when the quorum answers without a leader
// among its voters (an election under way, or no majority).
var errNoQuorumLeader = errors.New("the metadata quorum has no leader")

// describeQuorum asks the cluster for the metadata quorum. kgo sends the
// request to the controller Metadata names and retries NOT_CONTROLLER;
// Strata forwards it to the quorum's leader.
func describeQuorum(ctx context.Context, cl *kgo.Client) (quorumView, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = metadataTopic
	rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return quorumView{}, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return quorumView{}, withMessage(err, resp.ErrorMessage)
	}
	var p *kmsg.DescribeQuorumResponseTopicPartition
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if resp.Topics[i].Topic == metadataTopic && resp.Topics[i].Partitions[j].Partition == 0 {
				p = &resp.Topics[i].Partitions[j]
			}
		}
	}
	if p == nil {
		return quorumView{}, fmt.Errorf("the answer has no %s-0", metadataTopic)
	}
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return quorumView{}, withMessage(err, p.ErrorMessage)
	}
	endpoints := map[int32][]string{}
	for _, n := range resp.Nodes {
		for _, l := range n.Listeners {
			endpoints[n.NodeID] = append(endpoints[n.NodeID], fmt.Sprintf("%s://%s:%d", l.Name, l.Host, l.Port))
		}
	}
	return newQuorumView(p, endpoints)
}

// withMessage adds a response's error message to its error code.
func withMessage(err error, msg *string) error {
	if msg == nil || *msg == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, *msg)
}

// newQuorumView orders one partition's replicas as Kafka's tool does and
// computes each one's lag behind the leader's log end.
func newQuorumView(p *kmsg.DescribeQuorumResponseTopicPartition, endpoints map[int32][]string) (quorumView, error) {
	v := quorumView{LeaderID: p.LeaderID, LeaderEpoch: p.LeaderEpoch, HighWatermark: p.HighWatermark}
	i := slices.IndexFunc(p.CurrentVoters, func(r kmsg.DescribeQuorumResponseTopicPartitionReplicaState) bool {
		return r.ReplicaID == p.LeaderID
	})
	if p.LeaderID < 0 || i < 0 {
		return v, errNoQuorumLeader
	}
	leader := p.CurrentVoters[i]
	row := func(r kmsg.DescribeQuorumResponseTopicPartitionReplicaState, status string) quorumReplica {
		return quorumReplica{
			NodeID: r.ReplicaID, LogEndOffset: r.LogEndOffset, Lag: leader.LogEndOffset - r.LogEndOffset,
			LastFetchTimestamp: r.LastFetchTimestamp, LastCaughtUpTimestamp: r.LastCaughtUpTimestamp,
			Status: status, Endpoints: endpoints[r.ReplicaID],
		}
	}
	v.Replicas = append(v.Replicas, row(leader, "Leader"))
	for _, r := range sortedReplicas(p.CurrentVoters) {
		if r.ReplicaID != p.LeaderID {
			v.Replicas = append(v.Replicas, row(r, "Follower"))
		}
	}
	for _, r := range sortedReplicas(p.Observers) {
		v.Replicas = append(v.Replicas, row(r, "Observer"))
	}
	return v, nil
}

func sortedReplicas(rs []kmsg.DescribeQuorumResponseTopicPartitionReplicaState) []kmsg.DescribeQuorumResponseTopicPartitionReplicaState {
	return slices.SortedFunc(slices.Values(rs), func(a, b kmsg.DescribeQuorumResponseTopicPartitionReplicaState) int {
		return int(a.ReplicaID - b.ReplicaID)
	})
}

// voters returns the voters' rows, the leader's first.
func (v quorumView) voters() []quorumReplica {
	var out []quorumReplica
	for _, r := range v.Replicas {
		if r.Status != "Observer" {
			out = append(out, r)
		}
	}
	return out
}

// voterIDs returns the voters' ids in order.
func (v quorumView) voterIDs() []int32 {
	var ids []int32
	for _, r := range v.voters() {
		ids = append(ids, r.NodeID)
	}
	slices.Sort(ids)
	return ids
}

// status computes describe --status as Kafka's tool does: the follower
// furthest behind is the voter with the smallest log end offset; its lag
// in time is how much earlier it last caught up than the leader did (0
// when it is the leader, -1 when either time is unknown).
func (v quorumView) status(clusterID string) quorumStatus {
	s := quorumStatus{ClusterID: clusterID, LeaderID: v.LeaderID, LeaderEpoch: v.LeaderEpoch, HighWatermark: v.HighWatermark,
		CurrentVoters: []quorumNode{}, CurrentObservers: []quorumNode{}}
	voters := v.voters()
	leader, furthest := voters[0], voters[0]
	for _, r := range voters[1:] {
		if r.LogEndOffset < furthest.LogEndOffset {
			furthest = r
		}
	}
	s.MaxFollowerLag = leader.LogEndOffset - furthest.LogEndOffset
	switch {
	case furthest.NodeID == leader.NodeID:
		s.MaxFollowerLagTimeMs = 0
	case leader.LastCaughtUpTimestamp >= 0 && furthest.LastCaughtUpTimestamp >= 0:
		s.MaxFollowerLagTimeMs = leader.LastCaughtUpTimestamp - furthest.LastCaughtUpTimestamp
	default:
		s.MaxFollowerLagTimeMs = -1
	}
	for _, r := range sortedRows(v.Replicas) {
		n := quorumNode{ID: r.NodeID, Endpoints: r.Endpoints}
		if r.Status == "Observer" {
			s.CurrentObservers = append(s.CurrentObservers, n)
		} else {
			s.CurrentVoters = append(s.CurrentVoters, n)
		}
	}
	return s
}

func sortedRows(rs []quorumReplica) []quorumReplica {
	return slices.SortedFunc(slices.Values(rs), func(a, b quorumReplica) int { return int(a.NodeID - b.NodeID) })
}

// writeQuorumStatus prints describe --status as kafka-metadata-quorum.sh
// does (its 3.9 form: nodes with their endpoints).
func writeQuorumStatus(w io.Writer, s quorumStatus) error {
	nodes := func(ns []quorumNode) string {
		parts := make([]string, len(ns))
		for i, n := range ns {
			parts[i] = fmt.Sprintf(`{"id": %d`, n.ID)
			if len(n.Endpoints) > 0 {
				parts[i] += `, "endpoints": ["` + strings.Join(n.Endpoints, `", "`) + `"]`
			}
			parts[i] += "}"
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	_, err := fmt.Fprintf(w, "ClusterId:              %s\nLeaderId:               %d\nLeaderEpoch:            %d\n"+
		"HighWatermark:          %d\nMaxFollowerLag:         %d\nMaxFollowerLagTimeMs:   %d\n"+
		"CurrentVoters:          %s\nCurrentObservers:       %s\n",
		s.ClusterID, s.LeaderID, s.LeaderEpoch, s.HighWatermark, s.MaxFollowerLag, s.MaxFollowerLagTimeMs,
		nodes(s.CurrentVoters), nodes(s.CurrentObservers))
	return err
}

// writeQuorumReplication prints describe --replication's table; with
// humanReadable the timestamps read "N ms ago" relative to now.
func writeQuorumReplication(w io.Writer, rows []quorumReplica, humanReadable bool, now time.Time) error {
	ts := func(ms int64) string {
		if ms < 0 {
			return "-1"
		}
		if humanReadable {
			return fmt.Sprintf("%d ms ago", max(0, now.UnixMilli()-ms))
		}
		return fmt.Sprint(ms)
	}
	t := newTable(w, "NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status")
	for _, r := range rows {
		t.row(r.NodeID, r.LogEndOffset, r.Lag, ts(r.LastFetchTimestamp), ts(r.LastCaughtUpTimestamp), r.Status)
	}
	return t.flush()
}

func clusterQuorumCommand(o *clientOptions) *cobra.Command {
	var status, replication, humanReadable bool
	cmd := &cobra.Command{
		Use:   "quorum",
		Short: "Show the metadata quorum: its leader, epoch, high watermark and each controller's lag",
		Long: `Show the metadata quorum (the controllers' Raft log, __cluster_metadata-0)
as Kafka's kafka-metadata-quorum.sh describe --status prints it: the cluster
id, the leader (the active controller), its epoch, the high watermark (the
last committed offset), how far the slowest voter lags behind the leader in
offsets and in time, and the voters and observers.

With --replication, one row per voter and observer, as describe
--replication prints them: its log end offset, its lag behind the leader,
when the leader last heard from it and when it was last caught up (the
leader's wall clock, in ms since the epoch; --human-readable for "N ms ago").

Offsets are those of Strata's metadata log: one per Raft entry.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if status && replication {
				return errors.New("give one of --status and --replication")
			}
			if humanReadable && !replication {
				return errors.New("--human-readable goes with --replication")
			}
			cl, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := o.requestContext(cmd.Context())
			defer cancel()
			view, err := describeQuorum(ctx, cl)
			if err != nil {
				return o.requestError("describing the metadata quorum", quorumError(err))
			}
			w := cmd.OutOrStdout()
			if replication {
				if o.format == "json" {
					return writeJSON(w, view.Replicas)
				}
				return writeQuorumReplication(w, view.Replicas, humanReadable, time.Now())
			}
			md, err := kadmFor(cl).BrokerMetadata(ctx)
			if err != nil {
				return o.requestError("fetching the cluster id", err)
			}
			s := view.status(md.Cluster)
			if o.format == "json" {
				return writeJSON(w, s)
			}
			return writeQuorumStatus(w, s)
		},
	}
	cmd.Flags().BoolVar(&status, "status", false, "a summary of the quorum (the default)")
	cmd.Flags().BoolVar(&replication, "replication", false, "one row per voter and observer: log end offset, lag, last fetch, last caught up")
	cmd.Flags().BoolVar(&humanReadable, "human-readable", false, `with --replication: timestamps as "N ms ago"`)
	return cmd
}

// quorumError explains the answer of a broker that has no quorum to
// describe (a ZooKeeper-mode Kafka broker).
func quorumError(err error) error {
	if errors.Is(err, kerr.UnsupportedVersion) || errors.Is(err, kerr.InvalidRequest) {
		return fmt.Errorf("%w: the cluster has no metadata quorum (a broker older than Kafka 3.3, or not in KRaft mode)", err)
	}
	return err
}
