package broker

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestGroupConsumeCommitResume consumes in a group with a real client,
// commits, restarts the broker, and checks the group resumes at the
// committed offsets.
func TestGroupConsumeCommitResume(t *testing.T) {
	b := startBroker(t, map[string]string{"group.initial.rebalance.delay.ms": "0"})
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "orders", 4, nil)
	ctx := testContext(t)
	producer := newClient(t, b.Addr())
	for i := 0; i < 200; i++ {
		producer.Produce(ctx, &kgo.Record{Topic: "orders", Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}, nil)
	}
	if err := producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	consume := func(n int) map[string]bool {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumerGroup("payment"), kgo.ConsumeTopics("orders"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		seen := map[string]bool{}
		for len(seen) < n {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d", len(seen), n)
			}
			for _, r := range fs.Records() {
				if seen[string(r.Value)] {
					t.Fatalf("record %s read twice", r.Value)
				}
				seen[string(r.Value)] = true
			}
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
		return seen
	}
	first := consume(200)

	lags, err := adm.Lag(ctx, "payment")
	if err != nil {
		t.Fatal(err)
	}
	if l := lags["payment"].Lag.Total(); l != 0 {
		t.Fatalf("lag after committing everything: %d", l)
	}

	b.restart(t)
	adm = newAdmin(t, b.Addr())
	offsets, err := adm.FetchOffsets(ctx, "payment")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	offsets.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != 200 {
		t.Fatalf("committed offsets after restart sum to %d, want 200", total)
	}
	producer = newClient(t, b.Addr())
	for i := 200; i < 250; i++ {
		producer.Produce(ctx, &kgo.Record{Topic: "orders", Value: []byte(fmt.Sprint(i))}, nil)
	}
	if err := producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	second := consume(50)
	for v := range second {
		if first[v] {
			t.Fatalf("record %s read again after the restart", v)
		}
	}
}

// TestKIP848RegexMatchesInternalTopics subscribes a KIP-848 member by
// regular expression and checks the broker resolves it over every topic,
// internal ones included, as Kafka does: franz-go's
// Test848RegexBrokerResolves expects __consumer_offsets assigned.
func TestKIP848RegexMatchesInternalTopics(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	for _, topic := range []string{"re-orders", "re-orders-v2", "re-other"} {
		createTopic(t, adm, topic, 1, nil)
	}
	var (
		mu       sync.Mutex
		assigned = map[string]bool{}
	)
	newClient(t, b.Addr(), kgo.ConsumerGroup("regex"), kgo.ServerSideBalancer(), kgo.ConsumeRegex(),
		kgo.ConsumeTopics("re-orders.*", regexp.QuoteMeta(OffsetsTopic)),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for topic := range ps {
				assigned[topic] = true
			}
		}))
	poll.UntilStatus(t, 30*time.Second, "the regex subscription assigned", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return assigned["re-orders"] && assigned["re-orders-v2"] && assigned[OffsetsTopic], fmt.Sprint(assigned)
	})
	mu.Lock()
	defer mu.Unlock()
	if assigned["re-other"] {
		t.Fatalf("re-other assigned though no regex matches it: %v", assigned)
	}
}

// TestKafkaGoReadersShareAGroup runs two kafka-go readers (classic
// protocol, range assignor; JoinGroup v2, SyncGroup v0, Heartbeat v0) in
// one group over three partitions, as kafka-go's TestReaderConsumerGroup
// "consumer group rebalance" scenario does.
//
// Readers that join within group.initial.rebalance.delay.ms (Kafka's
// default, 3s) share the first generation, and the range assignor gives
// one of them two partitions and the other one: that scenario, which wants
// twelve of the 24 records from each reader, cannot pass then, on Kafka as
// here. kafka-go's suite runs against Kafka started with the
// server.properties Kafka ships (group.initial.rebalance.delay.ms=0),
// where the first reader gets a generation of its own; a second reader
// then rebalances the group and reads, from the start, the partitions it
// is given.
func TestKafkaGoReadersShareAGroup(t *testing.T) {
	records := func(t *testing.T, addr, topic string) {
		w := &kafkago.Writer{Addr: kafkago.TCP(addr), Topic: topic, Balancer: &kafkago.RoundRobin{}, BatchSize: 1,
			Transport:    &kafkago.Transport{}, // not the default one, which caches metadata by address
			RequiredAcks: kafkago.RequireAll}
		defer w.Close()
		var msgs []kafkago.Message
		for i := range 24 {
			msgs = append(msgs, kafkago.Message{Value: []byte(fmt.Sprint(i))})
		}
		if err := w.WriteMessages(testContext(t), msgs...); err != nil {
			t.Fatal(err)
		}
	}
	reader := func(t *testing.T, addr, topic, group, name string) *kafkago.Reader {
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{addr}, Topic: topic, GroupID: group,
			Dialer: &kafkago.Dialer{ClientID: name}, HeartbeatInterval: 2 * time.Second, RebalanceTimeout: 2 * time.Second,
			MinBytes: 1, MaxBytes: 1e6, MaxWait: 500 * time.Millisecond})
		t.Cleanup(func() { r.Close() })
		return r
	}
	// stable waits for a stable generation of n members and returns each
	// member's partitions, by client id.
	stable := func(t *testing.T, adm *kadm.Client, group string, n int) map[string][]int32 {
		var owned map[string][]int32
		poll.UntilStatus(t, 60*time.Second, fmt.Sprintf("a stable generation of %d members", n), func() (bool, string) {
			described, err := adm.DescribeGroups(testContext(t), group)
			if err != nil {
				return false, err.Error()
			}
			g := described[group]
			owned = map[string][]int32{}
			assigned := 0
			for _, m := range g.Members {
				if c, ok := m.Assigned.AsConsumer(); ok {
					for _, topic := range c.Topics {
						owned[m.ClientID] = append(owned[m.ClientID], topic.Partitions...)
						assigned += len(topic.Partitions)
					}
				}
			}
			return g.State == "Stable" && len(g.Members) == n && len(owned) == n && assigned == 3, fmt.Sprintf("%s %v", g.State, owned)
		})
		return owned
	}

	t.Run("joined together", func(t *testing.T) {
		b := startBroker(t, nil)
		adm := newAdmin(t, b.Addr())
		createTopic(t, adm, "together", 3, nil)
		// The coordinator's topic first, so that neither reader backs
		// off while it is created.
		if err := adm.FindGroupCoordinators(testContext(t), "kafkago").Error(); err != nil {
			t.Fatal(err)
		}
		reader(t, b.Addr(), "together", "kafkago", "reader-1")
		reader(t, b.Addr(), "together", "kafkago", "reader-2")
		owned := stable(t, adm, "kafkago", 2)
		if n1, n2 := len(owned["reader-1"]), len(owned["reader-2"]); n1+n2 != 3 || min(n1, n2) != 1 {
			t.Fatalf("first generation's assignment %v, want 2 and 1 partitions", owned)
		}
		described, err := adm.DescribeGroups(testContext(t), "kafkago")
		if err != nil {
			t.Fatal(err)
		}
		if p := described["kafkago"].Protocol; p != "range" {
			t.Fatalf("protocol %q", p)
		}
	})

	t.Run("joined one after the other", func(t *testing.T) {
		b := startBroker(t, map[string]string{"group.initial.rebalance.delay.ms": "0"})
		adm := newAdmin(t, b.Addr())
		createTopic(t, adm, "after", 3, nil)
		ctx := testContext(t)
		r1 := reader(t, b.Addr(), "after", "kafkago", "reader-1")
		if owned := stable(t, adm, "kafkago", 1); len(owned["reader-1"]) != 3 {
			t.Fatalf("the first reader's generation: %v", owned)
		}
		records(t, b.Addr(), "after")
		for range 24 { // without committing
			if _, err := r1.FetchMessage(ctx); err != nil {
				t.Fatal(err)
			}
		}
		r2 := reader(t, b.Addr(), "after", "kafkago", "reader-2")
		owned := stable(t, adm, "kafkago", 2)
		if len(owned["reader-2"]) == 0 {
			t.Fatalf("the second reader has no partition: %v", owned)
		}
		// Nothing was committed: the second reader reads its partitions
		// from the start (and perhaps others it held for a while).
		want := map[int]bool{}
		for _, p := range owned["reader-2"] {
			want[int(p)] = true
		}
		seen := map[[2]int64]bool{}
		for done := 0; done < 8*len(want); {
			m, err := r2.FetchMessage(ctx)
			if err != nil {
				t.Fatalf("the second reader read %d of its %d records: %v", done, 8*len(want), err)
			}
			if key := [2]int64{int64(m.Partition), m.Offset}; want[m.Partition] && !seen[key] {
				seen[key] = true
				done++
			}
		}
	})
}
