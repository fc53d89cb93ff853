package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

func TestProduceConsumeRoundTrip(t *testing.T) {
	topic := newTopic(t, 1)
	rep := okJSON[produceReport](t, "k1:v1\nk2:v:2\nno key\n\n", "topic", "produce", topic, "--key-separator", ":", "-H", "source=cli", "-H", "trace=abc", "-v")
	if rep.Topic != topic || rep.Count != 4 || len(rep.Records) != 4 {
		t.Fatalf("produce report %+v: want 4 records (the empty line is a record)", rep)
	}
	for i, r := range rep.Records {
		if r.Partition != 0 || r.Offset != int64(i) {
			t.Fatalf("record %d written at %d@%d, want 0@%d", i, r.Partition, r.Offset, i)
		}
	}
	if out := ok(t, "x\ny\n", "topic", "produce", topic); strings.TrimSpace(out) != "produced 2 records to "+topic {
		t.Fatalf("produce text report: %q", out)
	}
	if out := ok(t, "z\n", "topic", "produce", topic, "-v"); !strings.Contains(out, topic+"/0@6") {
		t.Fatalf("produce -v text report lacks the offset: %q", out)
	}

	before := time.Now().Add(-time.Minute).UnixMilli()
	recs := consumed(t, ok(t, "", "topic", "consume", topic, "--offset", "start", "--num", "7"))
	if got, want := values(recs), []string{"v1", "v:2", "no key", "", "x", "y", "z"}; !slices.Equal(got, want) {
		t.Fatalf("values %q, want %q", got, want)
	}
	r0, r2 := recs[0], recs[2]
	if r0.Key == nil || *r0.Key != "k1" || r2.Key != nil {
		t.Fatalf("keys %v, %v: want k1 and none", r0.Key, r2.Key)
	}
	if r0.Topic != topic || r0.Partition != 0 || r0.Offset != 0 || recs[6].Offset != 6 || r0.Timestamp < before {
		t.Fatalf("record 0 = %+v", r0)
	}
	if want := []consumedHeader{{"source", "cli"}, {"trace", "abc"}}; !slices.Equal(r0.Headers, want) {
		t.Fatalf("headers %+v, want %+v", r0.Headers, want)
	}
}

func TestProduceAcksAndCompression(t *testing.T) {
	topic := newTopic(t, 2)
	var want []string
	for _, acks := range []string{"0", "1", "all"} {
		lines := fmt.Sprintf("acks-%s-a\nacks-%s-b\n", acks, acks)
		rep := okJSON[produceReport](t, lines, "topic", "produce", topic, "--acks", acks, "-v")
		if rep.Count != 2 {
			t.Fatalf("--acks %s: %+v", acks, rep)
		}
		for _, r := range rep.Records {
			if (acks == "0") != (r.Offset == -1) {
				t.Fatalf("--acks %s reported offset %d", acks, r.Offset)
			}
		}
		want = append(want, "acks-"+acks+"-a", "acks-"+acks+"-b")
	}
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		// Repetitive values, so that compression has something to do.
		v := codec + strings.Repeat("-payload", 20)
		ok(t, v+"\n"+v+"\n", "topic", "produce", topic, "--compression", codec)
		want = append(want, v, v)
	}
	got := values(consumed(t, ok(t, "", "topic", "consume", topic, "--num", fmt.Sprint(len(want)))))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("read back %q, want %q", got, want)
	}

	failsWith(t, "x\n", `--acks "2": want 0, 1 or all`, "topic", "produce", topic, "--acks", "2")
	failsWith(t, "x\n", `--compression "brotli"`, "topic", "produce", topic, "--compression", "brotli")
	failsWith(t, "x\n", `-H "novalue": want key=value`, "topic", "produce", topic, "-H", "novalue")
}

func TestProducePartition(t *testing.T) {
	topic := newTopic(t, 3)
	rep := okJSON[produceReport](t, "a\nb\nc\n", "topic", "produce", topic, "--partition", "2", "-v")
	for _, r := range rep.Records {
		if r.Partition != 2 {
			t.Fatalf("record written to partition %d, want 2", r.Partition)
		}
	}
	failsWith(t, "a\n", fmt.Sprintf("topic %q has no partition 7 (it has 3)", topic), "topic", "produce", topic, "--partition", "7")
}

func TestProduceUnknownTopic(t *testing.T) {
	failsWith(t, "a\n", `unknown topic "no-such-topic"`, "topic", "produce", "no-such-topic")
}

// produceWithTimestamps writes values v0..vn-1 with timestamps base+i*1000.
func produceWithTimestamps(t *testing.T, topic string, n int, base int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range n {
		r := &kgo.Record{Value: fmt.Appendf(nil, "v%d", i), Timestamp: time.UnixMilli(base + int64(i)*1000)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConsumeOffsets(t *testing.T) {
	topic := newTopic(t, 1)
	base := time.Now().Add(-time.Hour).UnixMilli()
	produceWithTimestamps(t, topic, 5, base)

	for _, tc := range []struct {
		offset string
		num    int
		want   []string
	}{
		{"start", 5, []string{"v0", "v1", "v2", "v3", "v4"}},
		{"3", 2, []string{"v3", "v4"}},
		{"-2", 2, []string{"v3", "v4"}},
		{"-100", 5, []string{"v0", "v1", "v2", "v3", "v4"}}, // clamped to the log start
		{fmt.Sprintf("@%d", base+2000), 1, []string{"v2"}},
		{fmt.Sprintf("@%d", base+2500), 2, []string{"v3", "v4"}},
	} {
		out := ok(t, "", "topic", "consume", topic, "--offset", tc.offset, "--num", fmt.Sprint(tc.num))
		if got := values(consumed(t, out)); !slices.Equal(got, tc.want) {
			t.Errorf("--offset %s: got %q, want %q", tc.offset, got, tc.want)
		}
	}

	for _, bad := range []string{"abc", "-x", "@yesterday", "1.5", "--5"} {
		fails(t, fmt.Sprintf("malformed --offset %q", bad), "topic", "consume", topic, "--offset="+bad, "--num", "1")
	}
	fails(t, "--num must not be negative", "topic", "consume", topic, "--num", "-1")
}

// TestConsumeFromEnd starts a consumer at the end and writes until it has
// printed a record; what it prints must be new.
func TestConsumeFromEnd(t *testing.T) {
	topic := newTopic(t, 1)
	ok(t, "old\n", "topic", "produce", topic)
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- execute(ctx, "", "topic", "consume", topic, "--offset", "end", "--num", "1", "--brokers", brokerAddr)
	}()
	var r result
	poll.Until(t, 20*time.Second, "the consumer to print a new record", func() bool {
		select {
		case r = <-done:
			return true
		default:
			ok(t, "new\n", "topic", "produce", topic)
			return false
		}
	})
	if r.code != 0 {
		t.Fatalf("consume --offset end: exit %d: %s", r.code, r.stderr)
	}
	if got := values(consumed(t, r.stdout)); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("consume --offset end printed %q, want one new record", got)
	}
}

func TestConsumeFormats(t *testing.T) {
	topic := newTopic(t, 1)
	ok(t, "k:v\n", "topic", "produce", topic, "--key-separator", ":", "-H", "h1=x", "-H", "h2=y")
	rec := consumed(t, ok(t, "", "topic", "consume", topic, "--num", "1"))[0]
	for _, tc := range []struct{ format, want string }{
		{"text", "v\n"},
		{"%t %p %o %k=%v %h", fmt.Sprintf("%s 0 0 k=v h1=x,h2=y\n", topic)},
		{`%d\t100%%\n`, fmt.Sprintf("%d\t100%%\n", rec.Timestamp)},
		{"{{.Partition}}:{{.Offset}} {{.Key}}={{.Value}}{{range .Headers}} {{.Key}}:{{.Value}}{{end}}", "0:0 k=v h1:x h2:y\n"},
	} {
		if got := ok(t, "", "topic", "consume", topic, "--num", "1", "--format", tc.format); got != tc.want {
			t.Errorf("--format %q: got %q, want %q", tc.format, got, tc.want)
		}
	}
	fails(t, "unknown verb %z", "topic", "consume", topic, "--format", "%z")
	fails(t, "malformed --format template", "topic", "consume", topic, "--format", "{{.Value")
	fails(t, "--format template", "topic", "consume", topic, "--num", "1", "--format", "{{.NoSuchField}}")
}

func TestConsumePartitions(t *testing.T) {
	topic := newTopic(t, 3)
	for p := range 3 {
		ok(t, fmt.Sprintf("in-%d\n", p), "topic", "produce", topic, "--partition", fmt.Sprint(p))
	}
	recs := consumed(t, ok(t, "", "topic", "consume", topic, "--partitions", "1", "--num", "1"))
	if len(recs) != 1 || recs[0].Partition != 1 || recs[0].Value != "in-1" {
		t.Fatalf("--partitions 1: %+v", recs)
	}
	recs = consumed(t, ok(t, "", "topic", "consume", topic, "--partitions", "0,2", "--num", "2"))
	if got := values(recs); !slices.Contains(got, "in-0") || !slices.Contains(got, "in-2") {
		t.Fatalf("--partitions 0,2: %q", got)
	}
	fails(t, fmt.Sprintf("topic %q has no partition 9 (it has 3)", topic), "topic", "consume", topic, "--partitions", "9")
	fails(t, "--partitions and --group do not mix", "topic", "consume", topic, "--partitions", "1", "--group", "g")
}

func TestConsumeUnknownTopic(t *testing.T) {
	fails(t, `unknown topic "no-such-topic"`, "topic", "consume", "no-such-topic", "--num", "1")
}
