package broker

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

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
