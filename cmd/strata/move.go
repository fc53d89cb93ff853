package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reassignmentPlan is the JSON kafka-reassign-partitions.sh takes
// (--reassignment-json-file): {"version":1,"partitions":[{"topic":"t",
// "partition":0,"replicas":[2,3,4]}]}. log_dirs is accepted when every
// entry is "any": Strata does not move replicas between a broker's
// directories.
type reassignmentPlan struct {
	Version    int `json:"version"`
	Partitions []struct {
		Topic     string   `json:"topic"`
		Partition int32    `json:"partition"`
		Replicas  []int32  `json:"replicas"`
		LogDirs   []string `json:"log_dirs,omitempty"`
	} `json:"partitions"`
}

// maxPlanBytes bounds the plan read, so a wrong file cannot exhaust memory.
const maxPlanBytes = 64 << 20

func readReassignmentPlan(path string, stdin io.Reader) (*reassignmentPlan, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxPlanBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPlanBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxPlanBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var plan reassignmentPlan
	if err := dec.Decode(&plan); err != nil {
		return nil, fmt.Errorf("%s: not a reassignment plan: %v", path, err)
	}
	if plan.Version != 1 {
		return nil, fmt.Errorf("%s: version %d; only version 1 is known", path, plan.Version)
	}
	if len(plan.Partitions) == 0 {
		return nil, fmt.Errorf("%s: no partitions", path)
	}
	seen := map[string]bool{}
	for _, p := range plan.Partitions {
		name := fmt.Sprintf("%s-%d", p.Topic, p.Partition)
		switch {
		case p.Topic == "":
			return nil, fmt.Errorf("%s: a partition without a topic", path)
		case seen[name]:
			return nil, fmt.Errorf("%s: partition %s is named twice", path, name)
		case len(p.LogDirs) > 0 && len(p.LogDirs) != len(p.Replicas):
			return nil, fmt.Errorf("%s: partition %s: %d log_dirs for %d replicas", path, name, len(p.LogDirs), len(p.Replicas))
		}
		for _, d := range p.LogDirs {
			if d != "any" {
				return nil, fmt.Errorf("%s: partition %s: log_dirs %q: only \"any\" is supported", path, name, d)
			}
		}
		seen[name] = true
	}
	return &plan, nil
}

// moveResult is one partition's line of topic move output.
type moveResult struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Replicas  []int32 `json:"replicas,omitempty"`
	// Status, with --status: "in progress" or "done".
	Status   string  `json:"status,omitempty"`
	Adding   []int32 `json:"adding,omitempty"`
	Removing []int32 `json:"removing,omitempty"`
	Error    string  `json:"error,omitempty"`
}

func topicMoveCommand(o *clientOptions) *cobra.Command {
	var status, cancel bool
	var throttle int64
	cmd := &cobra.Command{
		Use:   "move PLAN.json",
		Short: "Move partitions to other brokers (AlterPartitionReassignments), show or cancel moves in progress",
		Long: `Move partitions to other brokers, with the plan kafka-reassign-partitions.sh
takes (--reassignment-json-file; "-" reads it from standard input):

  {"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3,4]}]}

The new replicas copy the partition from its leader while it keeps serving;
once they are in sync the old ones are dropped and delete their copy. The
command returns when the controller accepted the moves; --status shows their
progress (every move in the cluster without a plan), --cancel reverts the
moves of the plan's partitions that are still in progress.

--throttle BYTES bounds the copying to that many bytes a second, as
kafka-reassign-partitions.sh --throttle does: it sets leader. and
follower.replication.throttled.rate on the brokers involved, and the
topics' leader.replication.throttled.replicas (the current replicas) and
follower.replication.throttled.replicas (the new ones). --status with the
plan removes those throttles once every move of the plan is done, and
--cancel removes them at once, as kafka-reassign-partitions.sh --verify
and --cancel do.`,
		Example: `  strata topic move plan.json
  strata topic move plan.json --throttle 10000000
  strata topic move plan.json --status
  strata topic move --status
  strata topic move plan.json --cancel`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if status && cancel {
				return errors.New("--status and --cancel exclude each other")
			}
			if cmd.Flags().Changed("throttle") && (status || cancel || throttle <= 0) {
				return errors.New("--throttle takes a rate above 0, and only when starting moves")
			}
			var plan *reassignmentPlan
			if len(args) == 1 {
				var err error
				if plan, err = readReassignmentPlan(args[0], cmd.InOrStdin()); err != nil {
					return err
				}
			} else if !status {
				return errors.New("a plan is needed (a JSON file, or - for standard input); only --status goes without")
			}
			cl, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			adm.SetTimeoutMillis(int32(o.timeout / time.Millisecond))
			ctx, done := o.requestContext(cmd.Context())
			defer done()
			var results []moveResult
			switch {
			case status:
				results, err = moveStatus(ctx, cl, adm, plan)
			default:
				if throttle > 0 {
					if err := setMoveThrottles(ctx, adm, plan, throttle); err != nil {
						return o.requestError("setting the replication throttles", err)
					}
					if o.format != "json" {
						fmt.Fprintf(cmd.OutOrStdout(), "throttled to %d bytes a second\n", throttle)
					}
				}
				results, err = moveExecute(ctx, adm, plan, cancel)
			}
			if err != nil {
				return o.requestError("reassigning partitions", err)
			}
			if err := printMoveResults(o, cmd.OutOrStdout(), results, cancel); err != nil {
				return err
			}
			if plan != nil && (cancel || status && allDone(results)) {
				if err := clearMoveThrottles(ctx, adm, plan); err != nil {
					return o.requestError("removing the replication throttles", err)
				}
				if o.format != "json" && status {
					fmt.Fprintln(cmd.OutOrStdout(), "replication throttles removed")
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&status, "status", false, "show the moves in progress (of the plan's partitions, or all) instead of starting any")
	f.BoolVar(&cancel, "cancel", false, "cancel the plan's moves in progress, reverting to the replicas before them")
	f.Int64Var(&throttle, "throttle", 0, "bound the copying to this many bytes a second (replication throttles)")
	return cmd
}

// moveExecute sends the plan (or, with cancel, its cancellation) as one
// AlterPartitionReassignments request.
func moveExecute(ctx context.Context, adm *kadm.Client, plan *reassignmentPlan, cancel bool) ([]moveResult, error) {
	var req kadm.AlterPartitionAssignmentsReq
	for _, p := range plan.Partitions {
		if cancel {
			req.CancelAssign(p.Topic, p.Partition)
		} else {
			if len(p.Replicas) == 0 {
				return nil, fmt.Errorf("partition %s-%d: no replicas", p.Topic, p.Partition)
			}
			req.Assign(p.Topic, p.Partition, p.Replicas)
		}
	}
	resp, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []moveResult
	for _, p := range plan.Partitions {
		r := moveResult{Topic: p.Topic, Partition: p.Partition}
		if !cancel {
			r.Replicas = p.Replicas
		}
		pr, ok := resp[p.Topic][p.Partition]
		switch {
		case !ok:
			r.Error = "no answer for this partition"
		case pr.Err != nil:
			r.Error = explainMoveError(pr.Err, pr.ErrMessage)
		}
		out = append(out, r)
	}
	return out, nil
}

// moveStatus lists the moves in progress: of the plan's partitions (a
// partition not moving is reported done, with its replicas), or of the
// whole cluster without a plan.
func moveStatus(ctx context.Context, cl *kgo.Client, adm *kadm.Client, plan *reassignmentPlan) ([]moveResult, error) {
	// A request of its own, not kadm's: kadm cannot send null topics
	// (every move in the cluster).
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	req.TimeoutMillis = 30_000
	if plan != nil {
		byTopic := map[string][]int32{}
		for _, p := range plan.Partitions {
			byTopic[p.Topic] = append(byTopic[p.Topic], p.Partition)
		}
		for _, t := range sortedKeys(byTopic) {
			rt := kmsg.NewListPartitionReassignmentsRequestTopic()
			rt.Topic, rt.Partitions = t, byTopic[t]
			req.Topics = append(req.Topics, rt)
		}
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		msg := ""
		if resp.ErrorMessage != nil {
			msg = *resp.ErrorMessage
		}
		return nil, fmt.Errorf("%s %s", kafkaError(err), msg)
	}
	ongoing := map[string]moveResult{}
	var out []moveResult
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			r := moveResult{Topic: t.Topic, Partition: p.Partition, Replicas: p.Replicas, Status: "in progress",
				Adding: p.AddingReplicas, Removing: p.RemovingReplicas}
			ongoing[fmt.Sprintf("%s-%d", t.Topic, p.Partition)] = r
			out = append(out, r)
		}
	}
	if plan == nil {
		slices.SortFunc(out, func(a, b moveResult) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return int(a.Partition - b.Partition)
		})
		return out, nil
	}
	// The plan's partitions in its order; those not moving are done, or
	// do not exist.
	var topics []string
	for _, p := range plan.Partitions {
		topics = append(topics, p.Topic)
	}
	md, err := adm.Metadata(ctx, slices.Compact(slices.Sorted(slices.Values(topics)))...)
	if err != nil {
		return nil, err
	}
	out = out[:0]
	for _, p := range plan.Partitions {
		if r, ok := ongoing[fmt.Sprintf("%s-%d", p.Topic, p.Partition)]; ok {
			out = append(out, r)
			continue
		}
		r := moveResult{Topic: p.Topic, Partition: p.Partition}
		pd, ok := md.Topics[p.Topic].Partitions[p.Partition]
		switch {
		case !ok || md.Topics[p.Topic].Err != nil:
			r.Error = "unknown topic or partition"
		default:
			r.Replicas, r.Status = pd.Replicas, "done"
			if !sameMembers(pd.Replicas, p.Replicas) {
				r.Status = "not moving"
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func sameMembers(a, b []int32) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// explainMoveError is a partition's error with the controller's message.
func explainMoveError(err error, msg string) string {
	s := kafkaError(err)
	if msg != "" {
		s += " (" + strings.Join(strings.Fields(msg), " ") + ")"
	}
	return s
}

// printMoveResults prints one line per partition, and returns an error
// naming the failures so that scripts see a non-zero exit.
func printMoveResults(o *clientOptions, w io.Writer, results []moveResult, cancel bool) error {
	var failed []string
	for _, r := range results {
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("%s-%d: %s", r.Topic, r.Partition, r.Error))
		}
	}
	if o.format == "json" {
		if results == nil {
			results = []moveResult{}
		}
		if err := writeJSON(w, results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			name := fmt.Sprintf("%s-%d", r.Topic, r.Partition)
			switch {
			case r.Error != "":
			case r.Status == "in progress":
				fmt.Fprintf(w, "%s in progress: replicas %s, adding %s, removing %s\n", name, ints(r.Replicas), ints(r.Adding), ints(r.Removing))
			case r.Status != "":
				fmt.Fprintf(w, "%s %s: replicas %s\n", name, r.Status, ints(r.Replicas))
			case cancel:
				fmt.Fprintf(w, "cancelled the move of %s\n", name)
			default:
				fmt.Fprintf(w, "moving %s to %s\n", name, ints(r.Replicas))
			}
		}
		if len(results) == 0 {
			fmt.Fprintln(w, "no moves in progress")
		}
	}
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return errors.New(failed[0])
	}
	return fmt.Errorf("%d partitions failed: %s", len(failed), strings.Join(failed, "; "))
}

// Replication throttle keys, Kafka's.
const (
	leaderThrottleRate        = "leader.replication.throttled.rate"
	followerThrottleRate      = "follower.replication.throttled.rate"
	leaderThrottledReplicas   = "leader.replication.throttled.replicas"
	followerThrottledReplicas = "follower.replication.throttled.replicas"
)

// setMoveThrottles throttles the plan's moves as kafka-reassign-partitions.sh
// --throttle does: the rate on every broker that holds or will hold a
// moving replica, the current replicas as the topics' leader throttled
// replicas and the new ones as their follower throttled replicas.
func setMoveThrottles(ctx context.Context, adm *kadm.Client, plan *reassignmentPlan, rate int64) error {
	var topics []string
	for _, p := range plan.Partitions {
		topics = append(topics, p.Topic)
	}
	topics = slices.Compact(slices.Sorted(slices.Values(topics)))
	md, err := adm.Metadata(ctx, topics...)
	if err != nil {
		return err
	}
	leaders, followers := map[string][]string{}, map[string][]string{}
	brokers := map[int32]bool{}
	for _, p := range plan.Partitions {
		pd, ok := md.Topics[p.Topic].Partitions[p.Partition]
		if !ok {
			continue // refused by the move itself, with its error
		}
		for _, r := range pd.Replicas {
			leaders[p.Topic] = append(leaders[p.Topic], fmt.Sprintf("%d:%d", p.Partition, r))
			brokers[r] = true
		}
		for _, r := range p.Replicas {
			if !slices.Contains(pd.Replicas, r) {
				followers[p.Topic] = append(followers[p.Topic], fmt.Sprintf("%d:%d", p.Partition, r))
			}
			brokers[r] = true
		}
	}
	for _, t := range topics {
		if _, ok := leaders[t]; !ok {
			continue
		}
		l, f := strings.Join(leaders[t], ","), strings.Join(followers[t], ",")
		alters := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: leaderThrottledReplicas, Value: &l}}
		if f != "" {
			alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: followerThrottledReplicas, Value: &f})
		}
		if err := alterConfigsErr(adm.AlterTopicConfigs(ctx, alters, t)); err != nil {
			return err
		}
	}
	v := fmt.Sprint(rate)
	alters := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: leaderThrottleRate, Value: &v}, {Op: kadm.SetConfig, Name: followerThrottleRate, Value: &v}}
	for _, id := range slices.Sorted(maps.Keys(brokers)) {
		if err := alterConfigsErr(adm.AlterBrokerConfigs(ctx, alters, id)); err != nil {
			return err
		}
	}
	return nil
}

// clearMoveThrottles removes what setMoveThrottles set: the throttle rates
// on every broker and the throttled replicas of the plan's topics, as
// kafka-reassign-partitions.sh --verify does once the moves are done.
func clearMoveThrottles(ctx context.Context, adm *kadm.Client, plan *reassignmentPlan) error {
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	rates := []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: leaderThrottleRate}, {Op: kadm.DeleteConfig, Name: followerThrottleRate}}
	for _, id := range md.Brokers.NodeIDs() {
		if err := alterConfigsErr(adm.AlterBrokerConfigs(ctx, rates, id)); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	replicas := []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: leaderThrottledReplicas}, {Op: kadm.DeleteConfig, Name: followerThrottledReplicas}}
	for _, p := range plan.Partitions {
		if seen[p.Topic] {
			continue
		}
		seen[p.Topic] = true
		if err := alterConfigsErr(adm.AlterTopicConfigs(ctx, replicas, p.Topic)); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return err
		}
	}
	return nil
}

// alterConfigsErr is the first error of an AlterConfigs answer.
func alterConfigsErr(resp kadm.AlterConfigsResponses, err error) error {
	if err != nil {
		return err
	}
	for _, r := range resp {
		if r.Err != nil {
			return fmt.Errorf("%s: %w %s", r.Name, r.Err, r.ErrMessage)
		}
	}
	return nil
}

// allDone reports whether every partition of a --status answer is done.
func allDone(results []moveResult) bool {
	for _, r := range results {
		if r.Status != "done" {
			return false
		}
	}
	return len(results) > 0
}
