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
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func groupCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "List, describe, seek and delete consumer groups",
	}
	o := addClientFlags(cmd)
	cmd.AddCommand(
		groupListCommand(o),
		groupDescribeCommand(o),
		groupSeekCommand(o),
		groupDeleteCommand(o),
	)
	return cmd
}

// completeGroups completes group names from the cluster, for shells.
func completeGroups(o *clientOptions) cobra.CompletionFunc {
	return o.completeFromCluster(func(ctx context.Context, adm *kadm.Client) ([]string, error) {
		groups, err := adm.ListGroups(ctx)
		return groups.Groups(), err
	})
}

type groupListEntry struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	Coordinator  int32  `json:"coordinator"`
}

func groupListCommand(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List consumer groups",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			groups, err := adm.ListGroups(ctx)
			if err != nil {
				return o.requestError("listing groups", groupsError(err))
			}
			entries := []groupListEntry{}
			for _, g := range groups.Sorted() {
				entries = append(entries, groupListEntry{Group: g.Group, State: g.State, ProtocolType: g.ProtocolType, Coordinator: g.Coordinator})
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, entries)
			}
			t := newTable(w, "GROUP", "STATE", "PROTOCOL-TYPE", "COORDINATOR")
			for _, e := range entries {
				t.row(e.Group, e.State, e.ProtocolType, e.Coordinator)
			}
			return t.flush()
		},
	}
}

var errNoGroups = errors.New("the cluster does not support consumer groups")

// isBrokerTooOld reports franz-go's (unexported) error for a request the
// broker's ApiVersions says it does not handle.
func isBrokerTooOld(err error) bool {
	return err != nil && strings.Contains(err.Error(), "broker is too old")
}

// groupsError makes the error of a cluster without consumer groups say so.
func groupsError(err error) error {
	var se *kadm.ShardErrors
	if errors.As(err, &se) && len(se.Errs) > 0 {
		err = se.Errs[0].Err
	}
	if errors.Is(err, kerr.UnsupportedVersion) || isBrokerTooOld(err) {
		return errNoGroups
	}
	return err
}

type groupMemberInfo struct {
	MemberID    string             `json:"member_id"`
	InstanceID  string             `json:"instance_id,omitempty"`
	ClientID    string             `json:"client_id"`
	Host        string             `json:"host"`
	Assignments map[string][]int32 `json:"assignments"`
}

type groupPartitionInfo struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is -1 when the group has not committed this partition.
	Committed int64  `json:"committed"`
	LogStart  int64  `json:"log_start"`
	LogEnd    int64  `json:"log_end"`
	Lag       int64  `json:"lag"`
	MemberID  string `json:"member_id,omitempty"`
	ClientID  string `json:"client_id,omitempty"`
	Host      string `json:"host,omitempty"`
	Error     string `json:"error,omitempty"`
}

type groupDescription struct {
	Group        string               `json:"group"`
	Coordinator  int32                `json:"coordinator"`
	State        string               `json:"state"`
	ProtocolType string               `json:"protocol_type"`
	Protocol     string               `json:"protocol"`
	Members      []groupMemberInfo    `json:"members"`
	Partitions   []groupPartitionInfo `json:"partitions"`
	TotalLag     int64                `json:"total_lag"`
}

func groupDescribeCommand(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:               "describe GROUP...",
		Short:             "Show members, assignments, and per partition the committed offset, log end and lag",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeGroups(o),
		RunE: func(cmd *cobra.Command, groups []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			lags, err := adm.Lag(ctx, groups...)
			if err != nil {
				return o.requestError("describing groups", groupsError(err))
			}
			var descs []groupDescription
			for _, g := range groups {
				l, ok := lags[g]
				if !ok {
					return fmt.Errorf("group %q: no answer from the coordinator", g)
				}
				// Kafka describes a group it does not know as Dead; some
				// brokers answer GROUP_ID_NOT_FOUND.
				if errors.Is(l.Error(), kerr.GroupIDNotFound) || l.State == "Dead" && len(l.Members) == 0 && len(l.Lag) == 0 {
					return fmt.Errorf("unknown group %q", g)
				}
				if err := l.Error(); err != nil {
					return fmt.Errorf("group %q: %s", g, kafkaError(groupsError(err)))
				}
				descs = append(descs, newGroupDescription(l))
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, descs)
			}
			for i, d := range descs {
				if i > 0 {
					fmt.Fprintln(w)
				}
				if err := printGroupDescription(w, d); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func newGroupDescription(l kadm.DescribedGroupLag) groupDescription {
	d := groupDescription{
		Group: l.Group, Coordinator: l.Coordinator.NodeID, State: l.State,
		ProtocolType: l.ProtocolType, Protocol: l.Protocol,
		Members: []groupMemberInfo{}, Partitions: []groupPartitionInfo{},
	}
	for _, m := range l.Members {
		mi := groupMemberInfo{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assignments: map[string][]int32{}}
		if m.InstanceID != nil {
			mi.InstanceID = *m.InstanceID
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				ps := append([]int32(nil), t.Partitions...)
				sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
				mi.Assignments[t.Topic] = append(mi.Assignments[t.Topic], ps...)
			}
		}
		d.Members = append(d.Members, mi)
	}
	for _, pl := range l.Lag.Sorted() {
		pi := groupPartitionInfo{
			Topic: pl.Topic, Partition: pl.Partition, Committed: pl.Commit.At,
			LogStart: pl.Start.Offset, LogEnd: pl.End.Offset, Lag: pl.Lag,
		}
		if pl.Err != nil {
			pi.Error = kafkaError(pl.Err)
		}
		if pl.Member != nil {
			pi.MemberID, pi.ClientID, pi.Host = pl.Member.MemberID, pl.Member.ClientID, pl.Member.ClientHost
		}
		if pi.Lag > 0 {
			d.TotalLag += pi.Lag
		}
		d.Partitions = append(d.Partitions, pi)
	}
	return d
}

func printGroupDescription(w io.Writer, d groupDescription) error {
	t := newTable(w)
	t.row("GROUP", d.Group)
	t.row("COORDINATOR", d.Coordinator)
	t.row("STATE", d.State)
	protocol := d.ProtocolType
	if d.Protocol != "" {
		protocol += "/" + d.Protocol
	}
	t.row("PROTOCOL", protocol)
	t.row("MEMBERS", len(d.Members))
	t.row("TOTAL-LAG", d.TotalLag)
	if err := t.flush(); err != nil {
		return err
	}
	if len(d.Members) > 0 {
		fmt.Fprintln(w)
		t = newTable(w, "MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNED")
		for _, m := range d.Members {
			t.row(m.MemberID, m.ClientID, m.Host, assignmentString(m.Assignments))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(d.Partitions) > 0 {
		fmt.Fprintln(w)
		withErrors := slices.ContainsFunc(d.Partitions, func(p groupPartitionInfo) bool { return p.Error != "" })
		header := []string{"TOPIC", "PARTITION", "COMMITTED", "LOG-START", "LOG-END", "LAG", "MEMBER-ID"}
		if withErrors {
			header = append(header, "ERROR")
		}
		t = newTable(w, header...)
		for _, p := range d.Partitions {
			row := []any{p.Topic, p.Partition, offsetString(p.Committed), offsetString(p.LogStart), offsetString(p.LogEnd), p.Lag, p.MemberID}
			if withErrors {
				row = append(row, p.Error)
			}
			t.row(row...)
		}
		return t.flush()
	}
	return nil
}

func offsetString(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}

// assignmentString formats {orders:[0 1]} as "orders[0,1]".
func assignmentString(a map[string][]int32) string {
	topics := make([]string, 0, len(a))
	for t := range a {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	parts := make([]string, len(topics))
	for i, t := range topics {
		parts[i] = t + ints(a[t])
	}
	return strings.Join(parts, " ")
}

// seekTarget is a parsed --to.
type seekTarget struct {
	kind   byte // 's' start, 'e' end, 't' timestamp
	millis int64
}

func parseSeekTarget(s string) (seekTarget, error) {
	switch s {
	case "start", "earliest", "beginning":
		return seekTarget{kind: 's'}, nil
	case "end", "latest":
		return seekTarget{kind: 'e'}, nil
	}
	if ms, err := strconv.ParseInt(strings.TrimPrefix(s, "@"), 10, 64); err == nil && ms >= 0 {
		return seekTarget{kind: 't', millis: ms}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return seekTarget{kind: 't', millis: t.UnixMilli()}, nil
	}
	return seekTarget{}, fmt.Errorf("malformed --to %q: want start, end, a unix-ms timestamp or an RFC 3339 time", s)
}

type seekResult struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// From is -1 when the group had no committed offset.
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

func groupSeekCommand(o *clientOptions) *cobra.Command {
	var to, toGroup string
	var topics []string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "seek GROUP (--to start|end|TIMESTAMP | --to-group OTHER) [--topics T,...]",
		Short: "Move a group's committed offsets; refused while the group has members",
		Long: `Move a group's committed offsets to the log start, the log end, the first
record at or after a timestamp (unix ms or RFC 3339), or another group's
committed offsets. By default every topic the group has committed offsets
for is moved; --topics limits (or, for a new group, chooses) the topics.

As in Kafka, a group with active members is refused: stop its consumers
first, since they would overwrite the offsets with their own commits.`,
		Example: `  strata group seek billing --to start
  strata group seek billing --to 1735689600000 --topics orders
  strata group seek billing-v2 --to-group billing`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeGroups(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (to == "") == (toGroup == "") {
				return errors.New("give exactly one of --to or --to-group")
			}
			var target seekTarget
			if to != "" {
				var err error
				if target, err = parseSeekTarget(to); err != nil {
					return err
				}
			}
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			results, err := seekGroup(ctx, adm, args[0], target, toGroup, topics, dryRun)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, results)
			}
			t := newTable(w, "TOPIC", "PARTITION", "FROM", "TO")
			for _, r := range results {
				t.row(r.Topic, r.Partition, offsetString(r.From), r.To)
			}
			return t.flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "start, end, a unix-ms timestamp or an RFC 3339 time")
	f.StringVar(&toGroup, "to-group", "", "copy this group's committed offsets")
	f.StringSliceVar(&topics, "topics", nil, "only these topics (comma-separated)")
	f.BoolVar(&dryRun, "dry-run", false, "show the new offsets; commit nothing")
	return cmd
}

func seekGroup(ctx context.Context, adm *kadm.Client, group string, target seekTarget, toGroup string, topics []string, dryRun bool) ([]seekResult, error) {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("describing group %q: %s", group, kafkaError(groupsError(err)))
	}
	d, ok := described[group]
	if !ok {
		return nil, fmt.Errorf("group %q: no answer from the coordinator", group)
	}
	switch {
	case errors.Is(d.Err, kerr.GroupIDNotFound):
		// A new group: seeking gives it its first offsets.
	case d.Err != nil:
		return nil, fmt.Errorf("group %q: %s", group, kafkaError(d.Err))
	case len(d.Members) > 0 || (d.State != "Empty" && d.State != "Dead"):
		return nil, fmt.Errorf("group %q has %d active members (state %s); stop them before seeking", group, len(d.Members), d.State)
	}
	current, err := fetchOffsets(ctx, adm, group)
	if err != nil {
		return nil, fmt.Errorf("fetching offsets of group %q: %s", group, kafkaError(groupsError(err)))
	}
	if len(topics) == 0 {
		for t := range current {
			topics = append(topics, t)
		}
		if len(topics) == 0 && toGroup == "" {
			return nil, fmt.Errorf("group %q has no committed offsets; name the topics to seek with --topics", group)
		}
	}
	var next kadm.Offsets
	if toGroup != "" {
		next, err = otherGroupOffsets(ctx, adm, toGroup, topics)
	} else {
		next, err = targetOffsets(ctx, adm, target, topics)
	}
	if err != nil {
		return nil, err
	}
	var results []seekResult
	next.Each(func(off kadm.Offset) {
		r := seekResult{Topic: off.Topic, Partition: off.Partition, From: -1, To: off.At}
		if c, ok := current.Lookup(off.Topic, off.Partition); ok && c.Err == nil {
			r.From = c.At
		}
		results = append(results, r)
	})
	sort.Slice(results, func(i, j int) bool {
		if results[i].Topic != results[j].Topic {
			return results[i].Topic < results[j].Topic
		}
		return results[i].Partition < results[j].Partition
	})
	if dryRun || len(results) == 0 {
		return results, nil
	}
	if err := adm.CommitAllOffsets(ctx, group, next); err != nil {
		if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.IllegalGeneration) {
			return nil, fmt.Errorf("group %q became active while seeking; stop its members and retry", group)
		}
		return nil, fmt.Errorf("committing offsets for group %q: %s", group, kafkaError(err))
	}
	return results, nil
}

// fetchOffsets is a group's committed offsets; a group the coordinator
// does not know has none (Kafka answers with none, others with
// GROUP_ID_NOT_FOUND).
func fetchOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	resp, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return kadm.OffsetResponses{}, nil
	}
	return resp, err
}

// targetOffsets lists the offsets of every partition of topics at target.
func targetOffsets(ctx context.Context, adm *kadm.Client, target seekTarget, topics []string) (kadm.Offsets, error) {
	md, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("describing topics: %s", kafkaError(err))
	}
	for _, t := range topics {
		if err := topicExists(md, t); err != nil {
			return nil, err
		}
	}
	var listed kadm.ListedOffsets
	switch target.kind {
	case 's':
		listed, err = adm.ListStartOffsets(ctx, topics...)
	case 'e':
		listed, err = adm.ListEndOffsets(ctx, topics...)
	case 't':
		listed, err = adm.ListOffsetsAfterMilli(ctx, target.millis, topics...)
	}
	if err != nil {
		return nil, fmt.Errorf("listing offsets: %s", kafkaError(err))
	}
	var ends kadm.ListedOffsets
	if target.kind == 't' {
		// No record at or after the time: the end, as Kafka's tool does.
		if ends, err = adm.ListEndOffsets(ctx, topics...); err != nil {
			return nil, fmt.Errorf("listing offsets: %s", kafkaError(err))
		}
	}
	out := make(kadm.Offsets)
	for _, t := range topics {
		for _, p := range md[t].Partitions.Numbers() {
			lo, ok := listed.Lookup(t, p)
			if !ok || lo.Err != nil {
				return nil, fmt.Errorf("no offset for %s/%d", t, p)
			}
			at := lo.Offset
			if at < 0 {
				end, _ := ends.Lookup(t, p)
				at = end.Offset
			}
			out.Add(kadm.Offset{Topic: t, Partition: p, At: at, LeaderEpoch: -1})
		}
	}
	return out, nil
}

func otherGroupOffsets(ctx context.Context, adm *kadm.Client, other string, topics []string) (kadm.Offsets, error) {
	resp, err := fetchOffsets(ctx, adm, other)
	if err != nil {
		return nil, fmt.Errorf("fetching offsets of group %q: %s", other, kafkaError(groupsError(err)))
	}
	want := map[string]bool{}
	for _, t := range topics {
		want[t] = true
	}
	out := make(kadm.Offsets)
	resp.Each(func(r kadm.OffsetResponse) {
		if r.Err == nil && (len(want) == 0 || want[r.Topic]) {
			out.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.At, LeaderEpoch: -1})
		}
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("group %q has no committed offsets to copy", other)
	}
	return out, nil
}

func groupDeleteCommand(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:               "delete GROUP...",
		Short:             "Delete groups and their committed offsets (refused while a group has members)",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeGroups(o),
		RunE: func(cmd *cobra.Command, groups []string) error {
			adm, ctx, done, err := o.adminRequest(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := adm.DeleteGroups(ctx, groups...)
			if err != nil {
				return o.requestError("deleting groups", groupsError(err))
			}
			type result struct {
				Group string `json:"group"`
				Error string `json:"error,omitempty"`
			}
			var results []result
			var failed []string
			for _, g := range groups {
				r := result{Group: g}
				dr, ok := resp[g]
				switch {
				case !ok:
					r.Error = "no answer from the coordinator"
				case errors.Is(dr.Err, kerr.GroupIDNotFound):
					r.Error = "unknown group"
				case errors.Is(dr.Err, kerr.NonEmptyGroup):
					r.Error = "the group has active members; stop them first"
				case dr.Err != nil:
					r.Error = explainTopicError(dr.Err, dr.ErrMessage)
				}
				if r.Error != "" {
					failed = append(failed, fmt.Sprintf("group %q: %s", g, r.Error))
				}
				results = append(results, r)
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				if err := writeJSON(w, results); err != nil {
					return err
				}
			} else {
				for _, r := range results {
					if r.Error == "" {
						fmt.Fprintf(w, "deleted %s\n", r.Group)
					}
				}
			}
			if len(failed) > 0 {
				return errors.New(strings.Join(failed, "; "))
			}
			return nil
		},
	}
}
