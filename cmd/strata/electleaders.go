package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// electionResult is one partition's outcome in topic elect-leaders.
type electionResult struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Result is "elected", "not needed" (its leader is already the one
	// the election would pick), or the error.
	Result string `json:"result"`
}

// topicElectLeadersCommand is kafka-leader-election.sh: ElectLeaders
// (API 43) for the partitions named, or every partition.
func topicElectLeadersCommand(o *clientOptions) *cobra.Command {
	var electionType string
	cmd := &cobra.Command{
		Use:   "elect-leaders [TOPIC[:PARTITION]...]",
		Short: "Elect preferred leaders, or unclean ones for partitions without a leader (ElectLeaders)",
		Long: `Elect leaders as kafka-leader-election.sh does. --type preferred (the default)
gives each partition its preferred replica (the first) as leader, if it is alive
and in sync. --type unclean elects a leader for each partition that has none,
from the in-sync or eligible replicas if one is alive, and otherwise from any
live replica: records that replica lacks are lost. With no TOPIC, every
partition of the cluster.`,
		Example: `  strata topic elect-leaders
  strata topic elect-leaders orders orders-dlq:3
  strata topic elect-leaders --type unclean orders:0`,
		ValidArgsFunction: completeTopics(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			var how kadm.ElectLeadersHow
			switch electionType {
			case "preferred", "PREFERRED":
				how = kadm.ElectPreferredReplica
			case "unclean", "UNCLEAN":
				how = kadm.ElectLiveReplica
			default:
				return fmt.Errorf("--type %q: want preferred or unclean", electionType)
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var set kadm.TopicsSet
			if len(args) > 0 {
				set = kadm.TopicsSet{}
				var whole []string
				for _, arg := range args {
					topic, partition, ok := strings.Cut(arg, ":")
					if !ok {
						whole = append(whole, topic)
						continue
					}
					p, err := strconv.ParseInt(partition, 10, 32)
					if err != nil || p < 0 {
						return fmt.Errorf("%q: want TOPIC or TOPIC:PARTITION", arg)
					}
					set.Add(topic, int32(p))
				}
				if len(whole) > 0 {
					md, err := adm.ListTopicsWithInternal(ctx, whole...)
					if err != nil {
						return o.requestError("listing the topics' partitions", err)
					}
					for _, t := range whole {
						if err := topicExists(md, t); err != nil {
							return err
						}
						set.Add(t, md[t].Partitions.Numbers()...)
					}
				}
			}
			resp, err := adm.ElectLeaders(ctx, how, set)
			if err != nil {
				return o.requestError("electing leaders", err)
			}
			var results []electionResult
			var failed []string
			for _, r := range resp {
				for _, p := range r {
					res := electionResult{Topic: p.Topic, Partition: p.Partition, Result: "elected"}
					switch {
					case errors.Is(p.Err, kerr.ElectionNotNeeded):
						res.Result = "not needed"
					case p.Err != nil:
						res.Result = kafkaError(p.Err)
						if p.ErrMessage != "" {
							res.Result += " (" + p.ErrMessage + ")"
						}
						failed = append(failed, fmt.Sprintf("%s:%d", p.Topic, p.Partition))
					}
					results = append(results, res)
				}
			}
			slices.SortFunc(results, func(a, b electionResult) int {
				if c := strings.Compare(a.Topic, b.Topic); c != 0 {
					return c
				}
				return int(a.Partition - b.Partition)
			})
			w := cmd.OutOrStdout()
			if o.format == "json" {
				if err := writeJSON(w, results); err != nil {
					return err
				}
			} else {
				t := newTable(w, "TOPIC", "PARTITION", "RESULT")
				for _, r := range results {
					t.row(r.Topic, r.Partition, r.Result)
				}
				if err := t.flush(); err != nil {
					return err
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("no leader elected for %s", strings.Join(failed, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&electionType, "type", "preferred", "the election: preferred or unclean")
	return cmd
}
