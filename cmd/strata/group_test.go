package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// needsGroups skips a test when the node answers that it does not support
// the consumer-group APIs (they land separately from the broker).
func needsGroups(t *testing.T) {
	t.Helper()
	if missing := missingGroupAPIs(t); len(missing) > 0 {
		t.Skipf("needs consumer groups: the broker does not support %s", strings.Join(missing, ", "))
	}
}

// missingGroupAPIs lists the group APIs the node's ApiVersions lacks.
func missingGroupAPIs(t *testing.T) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("ApiVersions: %v", err)
	}
	have := map[int16]bool{}
	for _, k := range resp.ApiKeys {
		have[k.ApiKey] = true
	}
	var missing []string
	for _, k := range []kmsg.Key{kmsg.OffsetCommit, kmsg.OffsetFetch, kmsg.FindCoordinator, kmsg.JoinGroup, kmsg.Heartbeat,
		kmsg.LeaveGroup, kmsg.SyncGroup, kmsg.DescribeGroups, kmsg.ListGroups, kmsg.DeleteGroups} {
		if !have[int16(k)] {
			missing = append(missing, k.Name())
		}
	}
	return missing
}

func describeGroup(t *testing.T, group string) groupDescription {
	t.Helper()
	descs := okJSON[[]groupDescription](t, "", "group", "describe", group)
	if len(descs) != 1 || descs[0].Group != group {
		t.Fatalf("describe %s: %+v", group, descs)
	}
	return descs[0]
}

func committed(d groupDescription) map[string]int64 {
	out := map[string]int64{}
	for _, p := range d.Partitions {
		out[fmt.Sprintf("%s/%d", p.Topic, p.Partition)] = p.Committed
	}
	return out
}

// member joins group as a consumer of topic until stop is called, which
// leaves the group.
func member(t *testing.T, group, topic string) (stop func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ClientID("test-member"),
		// A short long-poll: the node's shutdown waits for fetches in flight.
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	return func() {
		cancel()
		<-done
		cl.Close() // leaves the group
	}
}

func TestGroupConsumeDescribeSeekDelete(t *testing.T) {
	needsGroups(t)
	topic := newTopic(t, 2)
	for p := range 2 {
		ok(t, fmt.Sprintf("p%d-a\np%d-b\np%d-c\n", p, p, p), "topic", "produce", topic, "--partition", fmt.Sprint(p))
	}
	group := "g-" + topic

	// Consuming with a group commits exactly what was printed.
	first := values(consumed(t, ok(t, "", "topic", "consume", topic, "--group", group, "--offset", "start", "--num", "4")))
	if len(first) != 4 {
		t.Fatalf("first read: %q", first)
	}
	d := describeGroup(t, group)
	var sum int64
	for _, p := range d.Partitions {
		if p.Committed > 0 {
			sum += p.Committed
		}
		if p.LogEnd != 3 || p.LogStart != 0 {
			t.Fatalf("partition %+v: want log start 0, log end 3", p)
		}
	}
	if sum != 4 || d.TotalLag != 2 || len(d.Members) != 0 || d.State != "Empty" {
		t.Fatalf("after reading 4 of 6: committed sum %d, lag %d, %+v", sum, d.TotalLag, d)
	}
	rest := values(consumed(t, ok(t, "", "topic", "consume", topic, "--group", group, "--num", "2")))
	all := append(slices.Clone(first), rest...)
	slices.Sort(all)
	if want := []string{"p0-a", "p0-b", "p0-c", "p1-a", "p1-b", "p1-c"}; !slices.Equal(all, want) {
		t.Fatalf("the group read %q then %q; want each record once", first, rest)
	}
	if d := describeGroup(t, group); d.TotalLag != 0 {
		t.Fatalf("lag %d after reading everything", d.TotalLag)
	}

	list := okJSON[[]groupListEntry](t, "", "group", "list")
	if i := slices.IndexFunc(list, func(e groupListEntry) bool { return e.Group == group }); i < 0 || list[i].State != "Empty" {
		t.Fatalf("group list %+v: want %s, Empty", list, group)
	}
	if text := ok(t, "", "group", "list"); !strings.Contains(text, group) {
		t.Fatalf("group list text:\n%s", text)
	}

	// While a member is active: describe shows it; seek and delete refuse.
	stop := member(t, group, topic)
	poll.Until(t, 20*time.Second, "the member to be assigned both partitions", func() bool {
		d := describeGroup(t, group)
		return d.State == "Stable" && len(d.Members) == 1 && slices.Equal(d.Members[0].Assignments[topic], []int32{0, 1})
	})
	d = describeGroup(t, group)
	if m := d.Members[0]; m.ClientID != "test-member" || m.MemberID == "" {
		t.Fatalf("member %+v", m)
	}
	for _, p := range d.Partitions {
		if p.MemberID != d.Members[0].MemberID {
			t.Fatalf("partition %+v not attributed to the member", p)
		}
	}
	text := ok(t, "", "group", "describe", group)
	for _, want := range []string{"STATE", "Stable", "MEMBER-ID", "test-member", "ASSIGNED", topic + "[0,1]", "COMMITTED", "LOG-END", "LAG"} {
		if !strings.Contains(text, want) {
			t.Fatalf("describe text lacks %q:\n%s", want, text)
		}
	}
	fails(t, fmt.Sprintf("group %q has 1 active members", group), "group", "seek", group, "--to", "start")
	fails(t, "the group has active members", "group", "delete", group)
	stop()
	poll.Until(t, 20*time.Second, "the group to empty", func() bool { return describeGroup(t, group).State == "Empty" })

	seek := okJSON[[]seekResult](t, "", "group", "seek", group, "--to", "start")
	if len(seek) != 2 || seek[0].From != 3 || seek[0].To != 0 || seek[1].To != 0 {
		t.Fatalf("seek --to start: %+v", seek)
	}
	if c := committed(describeGroup(t, group)); c[topic+"/0"] != 0 || c[topic+"/1"] != 0 {
		t.Fatalf("after seek --to start: %v", c)
	}
	dry := okJSON[[]seekResult](t, "", "group", "seek", group, "--to", "end", "--dry-run")
	if dry[0].To != 3 {
		t.Fatalf("dry run: %+v", dry)
	}
	if c := committed(describeGroup(t, group)); c[topic+"/0"] != 0 {
		t.Fatalf("dry run committed: %v", c)
	}
	ok(t, "", "group", "seek", group, "--to", "end")
	if c := committed(describeGroup(t, group)); c[topic+"/0"] != 3 || c[topic+"/1"] != 3 {
		t.Fatalf("after seek --to end: %v", c)
	}

	// A new group copies another's offsets.
	copyGroup := group + "-copy"
	ok(t, "", "group", "seek", copyGroup, "--to-group", group)
	if got, want := committed(describeGroup(t, copyGroup)), committed(describeGroup(t, group)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("--to-group copied %v, want %v", got, want)
	}

	fails(t, "malformed --to", "group", "seek", group, "--to", "yesterday")
	fails(t, "give exactly one of --to or --to-group", "group", "seek", group)
	fails(t, "give exactly one of --to or --to-group", "group", "seek", group, "--to", "start", "--to-group", copyGroup)
	fails(t, `unknown topic "no-such-topic"`, "group", "seek", group, "--to", "start", "--topics", "no-such-topic")

	if out := ok(t, "", "group", "delete", copyGroup); strings.TrimSpace(out) != "deleted "+copyGroup {
		t.Fatalf("delete: %q", out)
	}
	fails(t, fmt.Sprintf("unknown group %q", copyGroup), "group", "describe", copyGroup)
	fails(t, fmt.Sprintf("group %q: unknown group", copyGroup), "group", "delete", copyGroup)
}

func TestGroupSeekPerTopicAndTimestamp(t *testing.T) {
	needsGroups(t)
	base := time.Now().Add(-time.Hour).UnixMilli()
	timed := newTopic(t, 1)
	produceWithTimestamps(t, timed, 5, base)
	other := newTopic(t, 1)
	ok(t, "a\nb\n", "topic", "produce", other)
	group := "g-" + timed

	// A group with no offsets yet needs its topics named.
	fails(t, "name the topics to seek with --topics", "group", "seek", group, "--to", "start")
	ok(t, "", "group", "seek", group, "--to", "end", "--topics", timed+","+other)
	if c := committed(describeGroup(t, group)); c[timed+"/0"] != 5 || c[other+"/0"] != 2 {
		t.Fatalf("after seek --to end: %v", c)
	}
	// Only the named topic moves.
	ok(t, "", "group", "seek", group, "--to", fmt.Sprint(base+1500), "--topics", timed)
	if c := committed(describeGroup(t, group)); c[timed+"/0"] != 2 || c[other+"/0"] != 2 {
		t.Fatalf("after seek --to %d --topics %s: %v", base+1500, timed, c)
	}
	ok(t, "", "group", "seek", group, "--to", time.UnixMilli(base+3000).UTC().Format(time.RFC3339Nano), "--topics", timed)
	if c := committed(describeGroup(t, group)); c[timed+"/0"] != 3 {
		t.Fatalf("after seek to an RFC 3339 time: %v", c)
	}
	// Past the last record: the end.
	ok(t, "", "group", "seek", group, "--to", fmt.Sprint(time.Now().Add(time.Hour).UnixMilli()), "--topics", timed)
	if c := committed(describeGroup(t, group)); c[timed+"/0"] != 5 {
		t.Fatalf("after seek past the last record: %v", c)
	}
	// The committed offsets are where a consumer of the group starts.
	ok(t, "", "group", "seek", group, "--to", "start", "--topics", timed)
	if got := values(consumed(t, ok(t, "", "topic", "consume", timed, "--group", group, "--num", "1"))); !slices.Equal(got, []string{"v0"}) {
		t.Fatalf("consumer after seek read %q", got)
	}
}

// TestGroupBadInput: group commands fail in one line, whether or not the
// node has consumer groups yet.
func TestGroupBadInput(t *testing.T) {
	topic := newTopic(t, 1)
	supported := len(missingGroupAPIs(t)) == 0
	noGroups := "the cluster does not support consumer groups"
	for _, tc := range []struct {
		args []string
		want string // with groups
	}{
		{[]string{"group", "describe", "no-such-group"}, `unknown group "no-such-group"`},
		{[]string{"group", "delete", "no-such-group"}, `group "no-such-group": unknown group`},
		{[]string{"group", "seek", "no-such-group", "--to", "start"}, "name the topics to seek with --topics"},
		{[]string{"group", "seek", "no-such-group", "--to-group", "other-missing-group", "--topics", topic}, `group "other-missing-group" has no committed offsets to copy`},
	} {
		want := tc.want
		if !supported {
			want = noGroups
		}
		fails(t, want, tc.args...)
	}
	if !supported {
		fails(t, noGroups, "group", "list")
		fails(t, noGroups, "topic", "consume", topic, "--group", "g", "--num", "1")
	}
}
