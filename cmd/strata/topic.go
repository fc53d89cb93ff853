package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func topicCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create, inspect, change and delete topics; produce and consume records",
	}
	o := addClientFlags(cmd)
	cmd.AddCommand(
		topicCreateCommand(o),
		topicListCommand(o),
		topicDescribeCommand(o),
		topicDeleteCommand(o),
		topicAlterConfigCommand(o),
		topicAddPartitionsCommand(o),
		topicMoveCommand(o),
		topicElectLeadersCommand(o),
		topicProduceCommand(o),
		topicConsumeCommand(o),
	)
	return cmd
}

// completeTopics completes topic names from the cluster, for shells.
func completeTopics(o *clientOptions) cobra.CompletionFunc {
	return o.completeFromCluster(func(ctx context.Context, adm *kadm.Client) ([]string, error) {
		topics, err := adm.ListTopics(ctx)
		return topics.Names(), err
	})
}

// parseKeyValues parses repeated key=value flags.
func parseKeyValues(flag string, kvs []string) (map[string]*string, error) {
	out := make(map[string]*string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want key=value", flag, kv)
		}
		out[k] = &v
	}
	return out, nil
}

// topicResult is one topic's outcome in create, delete and
// add-partitions output.
type topicResult struct {
	Topic string `json:"topic"`
	Error string `json:"error,omitempty"`
}

// printTopicResults prints per-topic outcomes and returns an error naming
// the first failure, so scripts see a non-zero exit.
func printTopicResults(o *clientOptions, w io.Writer, verb string, results []topicResult) error {
	var failed []string
	for _, r := range results {
		switch r.Error {
		case "":
		case "unknown topic":
			failed = append(failed, fmt.Sprintf("unknown topic %q", r.Topic))
		default:
			failed = append(failed, fmt.Sprintf("topic %q: %s", r.Topic, r.Error))
		}
	}
	if o.format == "json" {
		if err := writeJSON(w, results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			if r.Error == "" {
				fmt.Fprintf(w, "%s %s\n", verb, r.Topic)
			}
		}
	}
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return errors.New(failed[0])
	}
	return fmt.Errorf("%d topics failed: %s", len(failed), strings.Join(failed, "; "))
}

func topicCreateCommand(o *clientOptions) *cobra.Command {
	var partitions int32
	var replicas int16
	var configs []string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "create TOPIC...",
		Short: "Create topics",
		Example: `  strata topic create orders -p 6
  strata topic create audit -c retention.ms=-1 -c cleanup.policy=compact`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			cfg, err := parseKeyValues("-c", configs)
			if err != nil {
				return err
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			create := adm.CreateTopics
			if dryRun {
				create = adm.ValidateCreateTopics
			}
			resp, err := create(ctx, partitions, replicas, cfg, topics...)
			if err != nil {
				return o.requestError("creating topics", err)
			}
			var results []topicResult
			for _, t := range topics {
				r := topicResult{Topic: t}
				if cr, ok := resp[t]; !ok {
					r.Error = "no answer for this topic"
				} else if cr.Err != nil {
					r.Error = explainTopicError(cr.Err, cr.ErrMessage)
				}
				results = append(results, r)
			}
			verb := "created"
			if dryRun {
				verb = "would create"
			}
			return printTopicResults(o, cmd.OutOrStdout(), verb, results)
		},
	}
	f := cmd.Flags()
	f.Int32VarP(&partitions, "partitions", "p", -1, "number of partitions (-1: the broker's num.partitions)")
	f.Int16VarP(&replicas, "replicas", "r", -1, "replication factor (-1: the broker's default.replication.factor)")
	f.StringArrayVarP(&configs, "config", "c", nil, "a topic config key=value (repeatable)")
	f.BoolVar(&dryRun, "dry-run", false, "validate only; create nothing")
	return cmd
}

// explainTopicError joins a Kafka error with the broker's message.
func explainTopicError(err error, msg string) string {
	s := kafkaError(err)
	if msg != "" && !strings.Contains(s, msg) {
		s += ": " + msg
	}
	return s
}

type topicListEntry struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	Replicas   int    `json:"replicas"`
	Internal   bool   `json:"internal,omitempty"`
}

func topicListCommand(o *clientOptions) *cobra.Command {
	var internal bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List topics",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			list := adm.ListTopics
			if internal {
				list = adm.ListTopicsWithInternal
			}
			topics, err := list(ctx)
			if err != nil {
				return o.requestError("listing topics", err)
			}
			entries := []topicListEntry{}
			for _, td := range topics.Sorted() {
				e := topicListEntry{Topic: td.Topic, Partitions: len(td.Partitions), Internal: td.IsInternal}
				if len(td.Partitions) > 0 {
					e.Replicas = len(td.Partitions[0].Replicas)
				}
				entries = append(entries, e)
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, entries)
			}
			t := newTable(w, "NAME", "PARTITIONS", "REPLICAS")
			for _, e := range entries {
				t.row(e.Topic, e.Partitions, e.Replicas)
			}
			return t.flush()
		},
	}
	cmd.Flags().BoolVarP(&internal, "internal", "i", false, "include internal topics (__consumer_offsets...)")
	return cmd
}

// partitionInfo is one partition in topic describe.
type partitionInfo struct {
	Partition   int32   `json:"partition"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	// ELR are the eligible leader replicas and LastKnownELR the last
	// known leader (KIP-966, DescribeTopicPartitions); nil when the
	// cluster does not tell.
	ELR          []int32 `json:"elr"`
	LastKnownELR []int32 `json:"last_known_elr"`
	// OfflineReplicas are the replicas on brokers that are fenced or
	// gone (Metadata's OfflineReplicas).
	OfflineReplicas []int32 `json:"offline_replicas"`
	// AddingReplicas and RemovingReplicas are a move in progress
	// (ListPartitionReassignments), omitted when there is none.
	AddingReplicas   []int32 `json:"adding_replicas,omitempty"`
	RemovingReplicas []int32 `json:"removing_replicas,omitempty"`
	LogStart         int64   `json:"log_start_offset"`
	HighWatermark    int64   `json:"high_watermark"`
	Error            string  `json:"error,omitempty"`
}

// configInfo is one config that is not at its default.
type configInfo struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

type topicDescription struct {
	Topic      string          `json:"topic"`
	ID         string          `json:"id,omitempty"`
	Internal   bool            `json:"internal"`
	Partitions []partitionInfo `json:"partitions"`
	Configs    []configInfo    `json:"configs"`
}

func topicDescribeCommand(o *clientOptions) *cobra.Command {
	var allConfigs bool
	cmd := &cobra.Command{
		Use:               "describe TOPIC...",
		Short:             "Show partitions (leader, replicas, ISR, ELR, offsets) and the configs that are not default",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeTopics(o),
		RunE: func(cmd *cobra.Command, topics []string) error {
			adm, cl, ctx, done, err := o.adminRequestWith(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			descs, err := describeTopics(ctx, o, adm, cl, topics, allConfigs)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, descs)
			}
			for i, d := range descs {
				if i > 0 {
					fmt.Fprintln(w)
				}
				if err := printTopicDescription(w, d); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&allConfigs, "all-configs", "a", false, "show every config, defaults included")
	return cmd
}

// describeTopics gathers metadata, log start and end offsets, and configs.
func describeTopics(ctx context.Context, o *clientOptions, adm *kadm.Client, cl *kgo.Client, topics []string, allConfigs bool) ([]topicDescription, error) {
	md, err := adm.ListTopicsWithInternal(ctx, topics...)
	if err != nil {
		return nil, o.requestError("describing topics", err)
	}
	for _, t := range topics {
		if err := topicExists(md, t); err != nil {
			return nil, err
		}
	}
	// A partition without a leader (its only replica's broker is down)
	// has no offsets to list: kadm answers the others and a shard error
	// for it, and the partition is shown with -1 and its leader -1.
	var shardErrs *kadm.ShardErrors
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil && !errors.As(err, &shardErrs) {
		return nil, o.requestError("listing log start offsets", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil && !errors.As(err, &shardErrs) {
		return nil, o.requestError("listing high watermarks", err)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, o.requestError("describing topic configs", err)
	}
	elrs := eligibleLeaders(ctx, cl, topics)
	moves := listMoves(ctx, cl, md)
	var out []topicDescription
	for _, t := range topics {
		td := md[t]
		d := topicDescription{Topic: t, Internal: td.IsInternal, Partitions: []partitionInfo{}, Configs: []configInfo{}}
		if td.ID != (kadm.TopicID{}) {
			d.ID = td.ID.String()
		}
		for _, p := range td.Partitions.Sorted() {
			pi := partitionInfo{
				Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
				Replicas: orEmpty(p.Replicas), ISR: orEmpty(p.ISR), OfflineReplicas: orEmpty(p.OfflineReplicas), LogStart: -1, HighWatermark: -1,
			}
			if p.Err != nil {
				pi.Error = kafkaError(p.Err)
			}
			if m, ok := moves[t][p.Partition]; ok {
				pi.AddingReplicas, pi.RemovingReplicas = orEmpty(m.AddingReplicas), orEmpty(m.RemovingReplicas)
			}
			if e, ok := elrs[topicPartition{t, p.Partition}]; ok {
				pi.ELR, pi.LastKnownELR = orEmpty(e.EligibleLeaderReplicas), orEmpty(e.LastKnownELR)
			}
			if lo, ok := starts.Lookup(t, p.Partition); ok && lo.Err == nil {
				pi.LogStart = lo.Offset
			}
			if lo, ok := ends.Lookup(t, p.Partition); ok && lo.Err == nil {
				pi.HighWatermark = lo.Offset
			} else if ok && pi.Error == "" {
				pi.Error = kafkaError(lo.Err)
			}
			d.Partitions = append(d.Partitions, pi)
		}
		if rc, err := configs.On(t, nil); err == nil && rc.Err == nil {
			for _, c := range rc.Configs {
				if !allConfigs && (c.Source == kmsg.ConfigSourceDefaultConfig || c.Source == kmsg.ConfigSourceUnknown) {
					continue
				}
				v := c.MaybeValue()
				if c.Sensitive {
					v = "(sensitive)"
				}
				d.Configs = append(d.Configs, configInfo{Name: c.Key, Value: v, Source: configSourceName(c.Source)})
			}
			sort.Slice(d.Configs, func(i, j int) bool { return d.Configs[i].Name < d.Configs[j].Name })
		}
		out = append(out, d)
	}
	return out, nil
}

// topicExists returns a one-line error when metadata says t does not
// exist or cannot be described.
func topicExists(md kadm.TopicDetails, t string) error {
	td, ok := md[t]
	switch {
	case !ok, errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("unknown topic %q", t)
	case td.Err != nil:
		return fmt.Errorf("topic %q: %s", t, kafkaError(td.Err))
	}
	return nil
}

// leaderString shows a partition without a leader as "none".
func leaderString(leader int32) string {
	if leader < 0 {
		return "none"
	}
	return strconv.Itoa(int(leader))
}

func orEmpty(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

func configSourceName(s kmsg.ConfigSource) string {
	switch s {
	case kmsg.ConfigSourceDynamicTopicConfig:
		return "topic"
	case kmsg.ConfigSourceDynamicBrokerConfig:
		return "dynamic-broker"
	case kmsg.ConfigSourceDynamicDefaultBrokerConfig:
		return "dynamic-default-broker"
	case kmsg.ConfigSourceStaticBrokerConfig:
		return "static-broker"
	case kmsg.ConfigSourceDefaultConfig:
		return "default"
	}
	return strings.ToLower(s.String())
}

func printTopicDescription(w io.Writer, d topicDescription) error {
	t := newTable(w)
	t.row("NAME", d.Topic)
	if d.ID != "" {
		t.row("ID", d.ID)
	}
	if d.Internal {
		t.row("INTERNAL", "true")
	}
	t.row("PARTITIONS", len(d.Partitions))
	if len(d.Partitions) > 0 {
		t.row("REPLICAS", len(d.Partitions[0].Replicas))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	withErrors := slices.ContainsFunc(d.Partitions, func(p partitionInfo) bool { return p.Error != "" })
	moving := slices.ContainsFunc(d.Partitions, func(p partitionInfo) bool { return p.AddingReplicas != nil || p.RemovingReplicas != nil })
	header := []string{"PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "ELR", "LAST-KNOWN-ELR", "OFFLINE", "LOG-START", "HIGH-WATERMARK"}
	if moving {
		header = append(header, "ADDING", "REMOVING")
	}
	if withErrors {
		header = append(header, "ERROR")
	}
	t = newTable(w, header...)
	for _, p := range d.Partitions {
		row := []any{p.Partition, leaderString(p.Leader), p.LeaderEpoch, ints(p.Replicas), ints(p.ISR), ints(p.ELR), ints(p.LastKnownELR), ints(p.OfflineReplicas),
			offsetString(p.LogStart), offsetString(p.HighWatermark)}
		if moving {
			row = append(row, ints(orEmpty(p.AddingReplicas)), ints(orEmpty(p.RemovingReplicas)))
		}
		if withErrors {
			row = append(row, p.Error)
		}
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(d.Configs) == 0 {
		fmt.Fprintln(w, "CONFIGS  (all default)")
		return nil
	}
	t = newTable(w, "CONFIG", "VALUE", "SOURCE")
	for _, c := range d.Configs {
		t.row(c.Name, c.Value, c.Source)
	}
	return t.flush()
}

// ints formats node ids as [1,2,3].
func ints(s []int32) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(int(v))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func topicDeleteCommand(o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "delete TOPIC...",
		Short:             "Delete topics and all their records",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeTopics(o),
		RunE: func(cmd *cobra.Command, topics []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := adm.DeleteTopics(ctx, topics...)
			if err != nil {
				return o.requestError("deleting topics", err)
			}
			var results []topicResult
			for _, t := range topics {
				r := topicResult{Topic: t}
				dr, ok := resp[t]
				switch {
				case !ok:
					r.Error = "no answer for this topic"
				case errors.Is(dr.Err, kerr.UnknownTopicOrPartition):
					r.Error = "unknown topic"
				case dr.Err != nil:
					r.Error = explainTopicError(dr.Err, dr.ErrMessage)
				}
				results = append(results, r)
			}
			return printTopicResults(o, cmd.OutOrStdout(), "deleted", results)
		},
	}
	return cmd
}

func topicAlterConfigCommand(o *clientOptions) *cobra.Command {
	var sets, deletes []string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "alter-config TOPIC...",
		Short: "Set or delete topic configs (IncrementalAlterConfigs)",
		Example: `  strata topic alter-config orders --set retention.ms=86400000
  strata topic alter-config orders --delete retention.ms`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeTopics(o),
		RunE: func(cmd *cobra.Command, topics []string) error {
			if len(sets) == 0 && len(deletes) == 0 {
				return errors.New("nothing to change: give --set key=value or --delete key")
			}
			kvs, err := parseKeyValues("--set", sets)
			if err != nil {
				return err
			}
			var alters []kadm.AlterConfig
			for _, s := range sets {
				k, _, _ := strings.Cut(s, "=")
				alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kvs[k]})
			}
			for _, k := range deletes {
				alters = append(alters, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			alter := adm.AlterTopicConfigs
			if dryRun {
				alter = adm.ValidateAlterTopicConfigs
			}
			resp, err := alter(ctx, alters, topics...)
			if err != nil {
				return o.requestError("altering topic configs", err)
			}
			var results []topicResult
			for _, t := range topics {
				r := topicResult{Topic: t}
				ar, err := resp.On(t, nil)
				switch {
				case err != nil:
					r.Error = "no answer for this topic"
				case errors.Is(ar.Err, kerr.UnknownTopicOrPartition):
					r.Error = "unknown topic"
				case ar.Err != nil:
					r.Error = explainTopicError(ar.Err, ar.ErrMessage)
				}
				results = append(results, r)
			}
			verb := "altered configs of"
			if dryRun {
				verb = "would alter configs of"
			}
			return printTopicResults(o, cmd.OutOrStdout(), verb, results)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&sets, "set", nil, "set a config key=value (repeatable)")
	f.StringArrayVar(&deletes, "delete", nil, "delete a config key, returning it to its default (repeatable)")
	f.BoolVar(&dryRun, "dry-run", false, "validate only; change nothing")
	return cmd
}

func topicAddPartitionsCommand(o *clientOptions) *cobra.Command {
	var add int
	cmd := &cobra.Command{
		Use:               "add-partitions TOPIC... --num N",
		Short:             "Add partitions to topics (records keep their partition; keys may map elsewhere afterwards)",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeTopics(o),
		RunE: func(cmd *cobra.Command, topics []string) error {
			if add <= 0 {
				return fmt.Errorf("--num must be at least 1, not %d", add)
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			md, err := adm.ListTopics(ctx, topics...)
			if err != nil {
				return o.requestError("describing topics", err)
			}
			for _, t := range topics {
				if err := topicExists(md, t); err != nil {
					return err
				}
			}
			resp, err := adm.CreatePartitions(ctx, add, topics...)
			if err != nil {
				return o.requestError("adding partitions", err)
			}
			var results []topicResult
			for _, t := range topics {
				r := topicResult{Topic: t}
				if cr, ok := resp[t]; !ok {
					r.Error = "no answer for this topic"
				} else if cr.Err != nil {
					r.Error = explainTopicError(cr.Err, cr.ErrMessage)
				}
				results = append(results, r)
			}
			return printTopicResults(o, cmd.OutOrStdout(), fmt.Sprintf("added %d partitions to", add), results)
		},
	}
	cmd.Flags().IntVarP(&add, "num", "n", 0, "how many partitions to add")
	_ = cmd.MarkFlagRequired("num")
	return cmd
}

// topicPartition names a partition.
type topicPartition struct {
	topic     string
	partition int32
}

// eligibleLeaders asks for the topics' partitions with
// DescribeTopicPartitions (KIP-966), following its cursor, for their
// eligible leader replicas. A cluster that does not answer it leaves them
// unknown.
func eligibleLeaders(ctx context.Context, cl *kgo.Client, topics []string) map[topicPartition]kmsg.DescribeTopicPartitionsResponseTopicPartition {
	out := map[topicPartition]kmsg.DescribeTopicPartitionsResponseTopicPartition{}
	req := kmsg.NewPtrDescribeTopicPartitionsRequest()
	for _, t := range topics {
		rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
		rt.Topic = t
		req.Topics = append(req.Topics, rt)
	}
	for range 1000 {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return out
		}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				if rt.Topic != nil {
					out[topicPartition{*rt.Topic, p.Partition}] = p
				}
			}
		}
		if resp.NextCursor == nil {
			break
		}
		req.Cursor = &kmsg.DescribeTopicPartitionsRequestCursor{Topic: resp.NextCursor.Topic, Partition: resp.NextCursor.Partition}
	}
	return out
}
