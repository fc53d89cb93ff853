package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestReplicaFetchers follows two partitions of a real broker from node 2
// through one fetcher per source broker: both replicate over one
// fetcher, a source that moves to another endpoint takes all its
// partitions along, and the fetcher stops when the last one leaves.
func TestReplicaFetchers(t *testing.T) {
	b := startBroker(t, map[string]string{"replica.fetch.wait.max.ms": "50"})
	adm := newAdmin(t, b.Addr())
	logs := map[string]*storage.Log{}
	parts := map[string]*replica.Partition{}
	cfg := b.fetcherConfig()
	cfg.ReplicaID, cfg.Backoff = 2, 50*time.Millisecond
	f := newReplicaFetchers(cfg, testLogger(t))
	t.Cleanup(f.close)
	for _, topic := range []string{"left", "right"} {
		createTopic(t, adm, topic, 1, nil)
		leader, _ := b.partition(topic, 0)
		_, p, _ := b.image.Load().Partition(topic, 0)
		state := replica.State{Leader: b.NodeID(), LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch + 1,
			Replicas: []int32{b.NodeID(), 2}, ISR: []int32{b.NodeID(), 2}}
		if err := leader.BecomeLeader(state); err != nil {
			t.Fatal(err)
		}
		logs[topic], parts[topic] = newFollowerReplica(t, topic, state)
		if err := f.follow(parts[topic], b.image.Load().Topics[topic].ID, b.NodeID(), b.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.running(); n != 1 {
		t.Fatalf("%d fetchers for one source broker", n)
	}
	producer := newClient(t, b.Addr(), kgo.RequiredAcks(kgo.AllISRAcks()))
	ctx := testContext(t)
	produced := int64(0)
	produce := func() {
		t.Helper()
		for _, topic := range []string{"left", "right"} {
			if err := producer.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		produced++
		poll.Until(t, 30*time.Second, "both followers to replicate", func() bool {
			return logs["left"].LogEndOffset() == produced && logs["right"].LogEndOffset() == produced
		})
	}
	produce()

	// The source re-registers under another name: "left" follows it there,
	// and "right" moves along with it.
	moved := strings.Replace(b.Addr(), "127.0.0.1", "localhost", 1)
	if err := f.follow(parts["left"], b.image.Load().Topics["left"].ID, b.NodeID(), moved); err != nil {
		t.Fatal(err)
	}
	if n := f.running(); n != 1 {
		t.Fatalf("%d fetchers after the source moved", n)
	}
	produce()

	f.unfollow(parts["left"])
	if src, ok := f.source(parts["right"]); !ok || src != b.NodeID() || f.running() != 1 {
		t.Fatalf("after unfollowing left: right follows %d (%v), %d fetchers", src, ok, f.running())
	}
	f.unfollow(parts["right"])
	if n := f.running(); n != 0 {
		t.Fatalf("%d fetchers left with nothing to follow", n)
	}
	if _, ok := f.source(parts["left"]); ok {
		t.Fatal("left is still followed")
	}
}
