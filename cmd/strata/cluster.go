package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func clusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect the cluster: brokers, controller, health",
	}
	o := addClientFlags(cmd)
	cmd.AddCommand(clusterInfoCommand(o), clusterHealthCommand(o))
	return cmd
}

type brokerInfo struct {
	NodeID     int32  `json:"node_id"`
	Host       string `json:"host"`
	Port       int32  `json:"port"`
	Rack       string `json:"rack,omitempty"`
	Controller bool   `json:"controller"`
}

type clusterInfo struct {
	ClusterID  string       `json:"cluster_id"`
	Controller int32        `json:"controller"`
	Brokers    []brokerInfo `json:"brokers"`
}

func clusterInfoCommand(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show the cluster id, the controller and the brokers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			md, err := adm.BrokerMetadata(ctx)
			if err != nil {
				return o.requestError("fetching cluster metadata", err)
			}
			info := clusterInfo{ClusterID: md.Cluster, Controller: md.Controller, Brokers: []brokerInfo{}}
			for _, b := range md.Brokers {
				bi := brokerInfo{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Controller: b.NodeID == md.Controller}
				if b.Rack != nil {
					bi.Rack = *b.Rack
				}
				info.Brokers = append(info.Brokers, bi)
			}
			sort.Slice(info.Brokers, func(i, j int) bool { return info.Brokers[i].NodeID < info.Brokers[j].NodeID })
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, info)
			}
			t := newTable(w)
			t.row("CLUSTER", info.ClusterID)
			t.row("CONTROLLER", info.Controller)
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintln(w)
			t = newTable(w, "ID", "HOST", "PORT", "RACK")
			for _, b := range info.Brokers {
				id := fmt.Sprint(b.NodeID)
				if b.Controller {
					id += "*"
				}
				t.row(id, b.Host, b.Port, b.Rack)
			}
			return t.flush()
		},
	}
}

type healthReport struct {
	Healthy    bool  `json:"healthy"`
	Brokers    int   `json:"brokers"`
	Controller int32 `json:"controller"`
	Topics     int   `json:"topics"`
	Partitions int   `json:"partitions"`
	// Problems lists, one per line, why the cluster is unhealthy.
	Problems []string `json:"problems"`
}

func clusterHealthCommand(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "Exit 0 when healthy; otherwise non-zero with a one-line reason (for scripts)",
		Long: `Check the cluster: a broker answers, there is a controller, and every
partition (internal topics included) has a leader and a full ISR. Exits 0
when healthy; otherwise prints why on one line and exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("unhealthy: %w", err)}
			}
			defer done()
			md, err := adm.Metadata(ctx)
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("unhealthy: %w", o.requestError("fetching cluster metadata", err))}
			}
			rep := healthReport{Brokers: len(md.Brokers), Controller: md.Controller, Topics: len(md.Topics)}
			rep.Partitions, rep.Problems = healthProblems(md)
			rep.Healthy = len(rep.Problems) == 0
			w := cmd.OutOrStdout()
			if o.format == "json" {
				if err := writeJSON(w, rep); err != nil {
					return err
				}
			} else if rep.Healthy {
				fmt.Fprintf(w, "healthy: %d brokers, controller %d, %d topics, %d partitions\n", rep.Brokers, rep.Controller, rep.Topics, rep.Partitions)
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
}

// healthProblems counts the partitions and lists, one line each, why the
// cluster in md is unhealthy: no controller, a topic or partition error, a
// partition offline (without a leader) or under-replicated (with an ISR
// smaller than its replicas).
func healthProblems(md kadm.Metadata) (partitions int, problems []string) {
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
			case len(p.ISR) < len(p.Replicas):
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
