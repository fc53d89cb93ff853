package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func clusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect the cluster: brokers, controller, metadata quorum, health",
	}
	o := addClientFlags(cmd)
	cmd.AddCommand(clusterDescribeCommand(o), clusterHealthCommand(o), clusterQuorumCommand(o))
	return cmd
}

type brokerInfo struct {
	NodeID     int32  `json:"node_id"`
	Host       string `json:"host"`
	Port       int32  `json:"port"`
	Rack       string `json:"rack,omitempty"`
	Controller bool   `json:"controller"`
	// Voter: the node is also a voter of the metadata quorum.
	Voter bool `json:"voter"`
}

// quorumSummary is the metadata quorum in a line: who leads it, in which
// epoch, how far it has committed, who votes and who observes.
type quorumSummary struct {
	LeaderID      int32   `json:"leader_id"`
	LeaderEpoch   int32   `json:"leader_epoch"`
	HighWatermark int64   `json:"high_watermark"`
	Voters        []int32 `json:"voters"`
	Observers     []int32 `json:"observers"`
}

type clusterInfo struct {
	ClusterID string `json:"cluster_id"`
	// Controller is the active controller: the metadata quorum's leader,
	// or, where the quorum cannot be described, the controller Metadata
	// names (-1: none).
	Controller int32        `json:"controller"`
	Brokers    []brokerInfo `json:"brokers"`
	// Quorum is nil when the cluster has no quorum to describe (Kafka in
	// ZooKeeper mode) or it could not be described (QuorumError says why).
	Quorum      *quorumSummary `json:"quorum,omitempty"`
	QuorumError string         `json:"quorum_error,omitempty"`
}

// clusterState is what describe and health read: the brokers from
// Metadata and the quorum from DescribeQuorum.
type clusterState struct {
	md kadm.Metadata
	// quorum is valid when quorumErr is nil; quorumErr is nil too when
	// the cluster has no quorum (unsupported), with hasQuorum false.
	quorum    quorumView
	hasQuorum bool
	quorumErr error
}

// readCluster fetches the metadata (all topics when topics is true) and
// the quorum.
func readCluster(ctx context.Context, o *clientOptions, cl *kgo.Client, topics bool) (clusterState, error) {
	var st clusterState
	var err error
	if topics {
		st.md, err = kadmFor(cl).Metadata(ctx)
	} else {
		st.md, err = kadmFor(cl).BrokerMetadata(ctx)
	}
	if err != nil {
		return st, o.requestError("fetching cluster metadata", err)
	}
	st.quorum, st.quorumErr = describeQuorum(ctx, cl)
	switch {
	case st.quorumErr == nil:
		st.hasQuorum = true
	case errors.Is(st.quorumErr, kerr.UnsupportedVersion):
		st.quorumErr = nil
	default:
		st.hasQuorum = true
		st.quorumErr = o.requestError("describing the metadata quorum", st.quorumErr)
	}
	return st, nil
}

// controller is the active controller: the quorum's leader when known,
// Metadata's controller otherwise.
func (st clusterState) controller() int32 {
	if st.hasQuorum {
		if st.quorumErr != nil {
			return -1
		}
		return st.quorum.LeaderID
	}
	return st.md.Controller
}

func (st clusterState) info() clusterInfo {
	info := clusterInfo{ClusterID: st.md.Cluster, Controller: st.controller(), Brokers: []brokerInfo{}}
	var voters []int32
	if st.hasQuorum && st.quorumErr == nil {
		voters = st.quorum.voterIDs()
		q := &quorumSummary{LeaderID: st.quorum.LeaderID, LeaderEpoch: st.quorum.LeaderEpoch,
			HighWatermark: st.quorum.HighWatermark, Voters: voters, Observers: []int32{}}
		for _, r := range sortedRows(st.quorum.Replicas) {
			if r.Status == "Observer" {
				q.Observers = append(q.Observers, r.NodeID)
			}
		}
		info.Quorum = q
	} else if st.quorumErr != nil {
		info.QuorumError = st.quorumErr.Error()
	}
	for _, b := range st.md.Brokers {
		bi := brokerInfo{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Controller: b.NodeID == info.Controller,
			Voter: slices.Contains(voters, b.NodeID)}
		if b.Rack != nil {
			bi.Rack = *b.Rack
		}
		info.Brokers = append(info.Brokers, bi)
	}
	sort.Slice(info.Brokers, func(i, j int) bool { return info.Brokers[i].NodeID < info.Brokers[j].NodeID })
	return info
}

func clusterDescribeCommand(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "describe",
		Aliases: []string{"info"},
		Short:   "Show the cluster id, the active controller, the metadata quorum and the brokers",
		Long: `Show the cluster id, the active controller (the metadata quorum's leader),
the quorum (its epoch, high watermark, voters and observers; strata cluster
quorum shows each one's lag) and every live broker. In the broker table the
active controller is marked with *, and VOTER says which brokers are also
controllers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := o.requestContext(cmd.Context())
			defer cancel()
			st, err := readCluster(ctx, o, cl, false)
			if err != nil {
				return err
			}
			info := st.info()
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, info)
			}
			t := newTable(w)
			t.row("CLUSTER", info.ClusterID)
			t.row("CONTROLLER", info.Controller)
			switch q := info.Quorum; {
			case q != nil:
				line := fmt.Sprintf("leader %d, epoch %d, high watermark %d, voters %s", q.LeaderID, q.LeaderEpoch, q.HighWatermark, ints(q.Voters))
				if len(q.Observers) > 0 {
					line += ", observers " + ints(q.Observers)
				}
				t.row("QUORUM", line)
			case info.QuorumError != "":
				t.row("QUORUM", info.QuorumError)
			}
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintln(w)
			t = newTable(w, "ID", "HOST", "PORT", "RACK", "VOTER")
			for _, b := range info.Brokers {
				id := fmt.Sprint(b.NodeID)
				if b.Controller {
					id += "*"
				}
				voter := "no"
				if b.Voter {
					voter = "yes"
				}
				t.row(id, b.Host, b.Port, b.Rack, voter)
			}
			return t.flush()
		},
	}
}

type healthReport struct {
	Healthy bool `json:"healthy"`
	Brokers int  `json:"brokers"`
	// BrokerIDs are the live brokers Metadata lists.
	BrokerIDs []int32 `json:"broker_ids"`
	// Controller is the active controller (see clusterInfo).
	Controller int32 `json:"controller"`
	// Voters are the metadata quorum's voters (empty: no quorum).
	Voters     []int32 `json:"voters"`
	Topics     int     `json:"topics"`
	Partitions int     `json:"partitions"`
	// Problems lists, one per line, why the cluster is unhealthy.
	Problems []string `json:"problems"`
}

func clusterHealthCommand(o *clientOptions) *cobra.Command {
	var quorumTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 when healthy; otherwise non-zero with a one-line reason (for scripts)",
		Long: `Check the cluster: a broker answers, there is an active controller, every
voter of the metadata quorum is in touch with its leader and caught up, and
every partition (internal topics included) has a leader and a full ISR.
Exits 0 when healthy; otherwise prints why on one line and exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			unhealthy := func(err error) error { return &exitError{code: 1, err: fmt.Errorf("unhealthy: %w", err)} }
			cl, err := o.client(cmd.Context())
			if err != nil {
				return unhealthy(err)
			}
			defer cl.Close()
			ctx, cancel := o.requestContext(cmd.Context())
			defer cancel()
			st, err := readCluster(ctx, o, cl, true)
			if err != nil {
				return unhealthy(err)
			}
			md := st.md
			rep := healthReport{Brokers: len(md.Brokers), BrokerIDs: md.Brokers.NodeIDs(), Controller: st.controller(),
				Voters: []int32{}, Topics: len(md.Topics)}
			slices.Sort(rep.BrokerIDs)
			if rep.BrokerIDs == nil {
				rep.BrokerIDs = []int32{}
			}
			rep.Partitions, rep.Problems = healthProblems(md, listMoves(ctx, cl, md.Topics))
			if st.hasQuorum {
				if st.quorumErr == nil {
					rep.Voters = st.quorum.voterIDs()
				}
				rep.Problems = append(quorumProblems(st.quorum, st.quorumErr, quorumTimeout, time.Now()), rep.Problems...)
			}
			rep.Healthy = len(rep.Problems) == 0
			w := cmd.OutOrStdout()
			if o.format == "json" {
				if err := writeJSON(w, rep); err != nil {
					return err
				}
			} else if rep.Healthy {
				quorum := ""
				if len(rep.Voters) > 0 {
					quorum = fmt.Sprintf(", voters %s", ints(rep.Voters))
				}
				fmt.Fprintf(w, "healthy: %d brokers %s, controller %d%s, %d topics, %d partitions\n",
					rep.Brokers, ints(rep.BrokerIDs), rep.Controller, quorum, rep.Topics, rep.Partitions)
			}
			if rep.Healthy {
				return nil
			}
			reason := rep.Problems[0]
			if n := len(rep.Problems) - 1; n > 0 {
				reason += fmt.Sprintf(" (and %d more problems)", n)
			}
			return &exitError{code: 1, err: errors.New("unhealthy: " + strings.TrimSpace(reason))}
		},
	}
	cmd.Flags().DurationVar(&quorumTimeout, "quorum-timeout", 5*time.Second,
		"a controller the quorum's leader has not heard from, or that has not caught up, for this long is a problem")
	return cmd
}

// quorumProblems lists what is wrong with the metadata quorum: it could
// not be described or has no leader (err), or a voter has not been heard
// from, or was last caught up with the leader, longer than timeout ago by
// the leader's clock (now's when the leader gives none).
func quorumProblems(q quorumView, err error, timeout time.Duration, now time.Time) []string {
	if err != nil {
		if errors.Is(err, errNoQuorumLeader) {
			return []string{"the metadata quorum has no leader (no active controller)"}
		}
		return []string{err.Error()}
	}
	voters := q.voters()
	ref := voters[0].LastFetchTimestamp
	if ref < 0 {
		ref = now.UnixMilli()
	}
	var problems []string
	for _, r := range voters[1:] {
		switch {
		case r.LastFetchTimestamp < 0:
			problems = append(problems, fmt.Sprintf("controller %d: the quorum's leader %d has not heard from it", r.NodeID, q.LeaderID))
		case time.Duration(ref-r.LastFetchTimestamp)*time.Millisecond > timeout:
			problems = append(problems, fmt.Sprintf("controller %d: the quorum's leader %d has not heard from it for %s",
				r.NodeID, q.LeaderID, (time.Duration(ref-r.LastFetchTimestamp)*time.Millisecond).Round(time.Millisecond)))
		case r.Lag > 0 && r.LastCaughtUpTimestamp >= 0 && time.Duration(ref-r.LastCaughtUpTimestamp)*time.Millisecond > timeout:
			// (Strata gives no last caught-up time while a follower is
			// behind, only while it is caught up; Kafka gives both.)
			problems = append(problems, fmt.Sprintf("controller %d is %d offsets behind the quorum's leader %d", r.NodeID, r.Lag, q.LeaderID))
		}
	}
	return problems
}

// listMoves returns the partitions of topics being moved
// (ListPartitionReassignments), none when the brokers cannot tell.
func listMoves(ctx context.Context, cl *kgo.Client, topics kadm.TopicDetails) kadm.ListPartitionReassignmentsResponses {
	set := kadm.TopicsSet{}
	for _, td := range topics {
		for p := range td.Partitions {
			set.Add(td.Topic, p)
		}
	}
	moves, err := kadm.NewClient(cl).ListPartitionReassignments(ctx, set)
	if err != nil {
		return nil
	}
	return moves
}

// healthProblems counts the partitions and lists, one line each, why the
// cluster in md is unhealthy: no controller, a topic or partition error, a
// partition offline (without a leader) or under-replicated (with an ISR
// smaller than its replicas; while moving, than its replicas less those
// being removed, as Kafka's UnderReplicatedPartitions counts).
func healthProblems(md kadm.Metadata, moves kadm.ListPartitionReassignmentsResponses) (partitions int, problems []string) {
	problems = []string{}
	if md.Controller < 0 {
		problems = append(problems, "no active controller")
	}
	for _, td := range md.Topics.Sorted() {
		if td.Err != nil {
			problems = append(problems, fmt.Sprintf("topic %s: %s", td.Topic, kafkaError(td.Err)))
			continue
		}
		for _, p := range td.Partitions.Sorted() {
			partitions++
			switch {
			case p.Leader < 0:
				problems = append(problems, fmt.Sprintf("partition %s/%d is offline: no leader (replicas %s, offline %s)",
					td.Topic, p.Partition, ints(p.Replicas), ints(orEmpty(p.OfflineReplicas))))
			case len(p.ISR) < len(p.Replicas)-len(moves[td.Topic][p.Partition].RemovingReplicas):
				problems = append(problems, fmt.Sprintf("partition %s/%d is under-replicated (ISR %s of replicas %s%s)",
					td.Topic, p.Partition, ints(p.ISR), ints(p.Replicas), offlineNote(p.OfflineReplicas)))
			case p.Err != nil:
				problems = append(problems, fmt.Sprintf("partition %s/%d: %s", td.Topic, p.Partition, kafkaError(p.Err)))
			}
		}
	}
	return partitions, problems
}

// offlineNote names a partition's offline replicas, if any.
func offlineNote(offline []int32) string {
	if len(offline) == 0 {
		return ""
	}
	return ", offline " + ints(offline)
}
