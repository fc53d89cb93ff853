package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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

// TestTenPartitionsTwelveConsumers is the seed's quiz: 10 partitions and 12
// consumers in one group — 10 consumers own one partition each, 2 none.
func TestTenPartitionsTwelveConsumers(t *testing.T) {
	for _, balancer := range []struct {
		name string
		opt  kgo.Opt
	}{
		{"range", kgo.Balancers(kgo.RangeBalancer())},
		{"cooperative-sticky", kgo.Balancers(kgo.CooperativeStickyBalancer())},
	} {
		t.Run(balancer.name, func(t *testing.T) {
			b := startBroker(t, map[string]string{"group.initial.rebalance.delay.ms": "0"})
			adm := newAdmin(t, b.Addr())
			createTopic(t, adm, "quiz", 10, nil)
			ctx := testContext(t)
			var mu sync.Mutex
			owned := map[int][]int32{}
			var clients []*kgo.Client
			for i := 0; i < 12; i++ {
				i := i
				cl := newClient(t, b.Addr(), kgo.ConsumerGroup("quiz-"+balancer.name), kgo.ConsumeTopics("quiz"), balancer.opt,
					kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
						mu.Lock()
						owned[i] = append(owned[i], m["quiz"]...)
						mu.Unlock()
					}),
					kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
						mu.Lock()
						owned[i] = removeAll(owned[i], m["quiz"])
						mu.Unlock()
					}),
					kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
						mu.Lock()
						owned[i] = removeAll(owned[i], m["quiz"])
						mu.Unlock()
					}))
				clients = append(clients, cl)
				go func() {
					for ctx.Err() == nil {
						cl.PollFetches(ctx)
					}
				}()
			}
			// Poll the group until it is stable with 12 members and all 10
			// partitions assigned.
			for {
				if ctx.Err() != nil {
					t.Fatal("the group never settled")
				}
				groups, err := adm.DescribeGroups(ctx, "quiz-"+balancer.name)
				if err == nil {
					g := groups["quiz-"+balancer.name]
					assigned := 0
					for _, m := range g.Members {
						if c, ok := m.Assigned.AsConsumer(); ok {
							for _, tp := range c.Topics {
								assigned += len(tp.Partitions)
							}
						}
					}
					if g.State == "Stable" && len(g.Members) == 12 && assigned == 10 {
						break
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			groups, _ := adm.DescribeGroups(ctx, "quiz-"+balancer.name)
			withOne, withNone := 0, 0
			for _, m := range groups["quiz-"+balancer.name].Members {
				c, _ := m.Assigned.AsConsumer()
				n := 0
				for _, tp := range c.Topics {
					n += len(tp.Partitions)
				}
				switch n {
				case 0:
					withNone++
				case 1:
					withOne++
				default:
					t.Errorf("member %s owns %d partitions", m.MemberID, n)
				}
			}
			if withOne != 10 || withNone != 2 {
				t.Fatalf("%d members own one partition and %d none; want 10 and 2", withOne, withNone)
			}
			_ = clients
		})
	}
}

func removeAll(have, remove []int32) []int32 {
	out := have[:0]
	for _, p := range have {
		keep := true
		for _, r := range remove {
			if p == r {
				keep = false
			}
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}
