package broker

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/vfs"
)

// follower is a second replica of a partition, on node 2, over a real log,
// replicating from a real broker with a replica fetcher over a real
// socket. Until several brokers form a cluster (issue 11), the leader
// learns of its follower through the partition's own BecomeLeader: the
// image still names only the leader.
type follower struct {
	log     *storage.Log
	p       *replica.Partition
	fetcher *replica.Fetcher
}

func startFollower(t *testing.T, b *testBroker, topic string, state replica.State) *follower {
	t.Helper()
	l, p := newFollowerReplica(t, topic, state)
	client, err := dialLeader(b.Addr(), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	cfg := b.fetcherConfig()
	cfg.ReplicaID = 2
	cfg.Backoff = 50 * time.Millisecond
	f := replica.StartFetcher(b.NodeID(), client, cfg)
	t.Cleanup(f.Stop)
	f.Add(p, b.image.Load().Topics[topic].ID)
	return &follower{log: l, p: p, fetcher: f}
}

// newFollowerReplica opens node 2's replica of topic-0 over a real log, a
// follower in state.
func newFollowerReplica(t *testing.T, topic string, state replica.State) (*storage.Log, *replica.Partition) {
	t.Helper()
	l, err := storage.OpenLog(vfs.Default, filepath.Join(t.TempDir(), topic+"-0"), storage.DefaultConfig(), storage.LogOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p, err := replica.New(topic, 0, l, replica.Settings{MinInsyncReplicas: 1}, replica.Options{NodeID: 2, LagTimeMax: 30 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	p.BecomeFollower(state)
	return l, p
}

func batchesOf(t *testing.T, l *storage.Log) []byte {
	t.Helper()
	var out []byte
	if err := l.ReadBatches(l.LogStartOffset(), 0, func(_ record.Header, b []byte) bool {
		out = append(out, b...)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReplicaFetcher replicates a partition from a real broker to a
// follower: an idempotent acks=all producer with min.insync.replicas=2 is
// answered only once the follower has the records, the follower's log is
// byte-identical to the leader's, and consumers never see what only the
// leader has.
func TestReplicaFetcher(t *testing.T) {
	b := startBroker(t, map[string]string{"replica.fetch.wait.max.ms": "100"})
	adm := newAdmin(t, b.Addr())
	two := "2"
	createTopic(t, adm, "replicated", 1, map[string]*string{"min.insync.replicas": &two})
	leader, ok := b.partition("replicated", 0)
	if !ok {
		t.Fatal("no local replica")
	}
	_, p, _ := b.image.Load().Partition("replicated", 0)
	state := replica.State{Leader: b.NodeID(), LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch + 1,
		Replicas: []int32{b.NodeID(), 2}, ISR: []int32{b.NodeID(), 2}}
	if err := leader.BecomeLeader(state); err != nil {
		t.Fatal(err)
	}
	f := startFollower(t, b, "replicated", state)

	producer := newClient(t, b.Addr(), kgo.DefaultProduceTopic("replicated"), kgo.RequiredAcks(kgo.AllISRAcks()))
	ctx := testContext(t)
	const n = 500
	for i := range n {
		producer.Produce(ctx, &kgo.Record{Value: []byte{byte(i)}}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("record %d: %v", i, err)
			}
		})
	}
	if err := producer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Every acknowledgement waited for the follower: it has them all.
	if end := f.log.LogEndOffset(); end < n {
		t.Fatalf("acks=all answered with the follower at %d of %d", end, n)
	}
	poll.Until(t, 30*time.Second, "the follower's high watermark", func() bool { return f.p.HighWatermark() == n })
	leaderLog, _ := b.logs.Log("replicated", 0)
	if !bytes.Equal(batchesOf(t, leaderLog), batchesOf(t, f.log)) {
		t.Fatal("the follower's log differs from the leader's")
	}
	if got := len(consumeN(t, b.Addr(), n, "replicated")); got != n {
		t.Fatalf("consumed %d", got)
	}

	// Without the follower, acks=1 records are in the leader's log but
	// below no high watermark: consumers do not see them until it returns.
	f.fetcher.Remove(f.p)
	acks1 := newClient(t, b.Addr(), kgo.DefaultProduceTopic("replicated"), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	if err := acks1.ProduceSync(ctx, &kgo.Record{Value: []byte("only on the leader")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if leader.HighWatermark() != n || leaderLog.LogEndOffset() != n+1 {
		t.Fatalf("high watermark %d, log end %d", leader.HighWatermark(), leaderLog.LogEndOffset())
	}
	offsets, err := adm.ListEndOffsets(ctx, "replicated")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offsets.Lookup("replicated", 0); o.Offset != n {
		t.Fatalf("ListOffsets latest %d, want the high watermark %d", o.Offset, n)
	}
	f.fetcher.Add(f.p, b.image.Load().Topics["replicated"].ID)
	poll.Until(t, 30*time.Second, "the high watermark to pass the acks=1 record", func() bool { return leader.HighWatermark() == n+1 })
	if got := consumeN(t, b.Addr(), n+1, "replicated"); string(got[n].Value) != "only on the leader" {
		t.Fatalf("last record %q", got[n].Value)
	}
}

// TestNotLeaderNamesTheLeader makes the local replica a follower and checks
// that Produce (v10+) and a replica's Fetch (v12+, endpoints v16+) answer
// NOT_LEADER_OR_FOLLOWER with the leader the image names (KIP-951). A
// consumer's Fetch v11+ is served by the follower instead (KIP-392).
func TestNotLeaderNamesTheLeader(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, newAdmin(t, b.Addr()), "moved", 1, nil)
	p, _ := b.partition("moved", 0)
	_, mp, _ := b.image.Load().Partition("moved", 0)
	p.BecomeFollower(replica.State{Leader: 2, LeaderEpoch: mp.LeaderEpoch + 1, PartitionEpoch: mp.PartitionEpoch + 1, Replicas: []int32{1, 2}})

	produce := kmsg.NewPtrProduceRequest()
	produce.Version, produce.Acks, produce.TimeoutMillis = 10, 1, 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "moved"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = record.Build(nil, []record.Rec{{Value: []byte("x"), Timestamp: time.Now().UnixMilli()}})
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)
	presp := rawRequest(t, b.Addr(), produce).(*kmsg.ProduceResponse)
	sp := presp.Topics[0].Partitions[0]
	if sp.ErrorCode != kerr.NotLeaderForPartition.Code || sp.CurrentLeader.LeaderID != mp.Leader || sp.CurrentLeader.LeaderEpoch != mp.LeaderEpoch ||
		len(presp.Brokers) != 1 || presp.Brokers[0].NodeID != mp.Leader {
		t.Fatalf("produce: %+v, brokers %+v", sp, presp.Brokers)
	}

	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version, fetch.MaxBytes = 16, 1<<20
	fetch.ReplicaState.ID = 3
	ft := kmsg.NewFetchRequestTopic()
	ft.TopicID = b.image.Load().Topics["moved"].ID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	fresp := rawRequest(t, b.Addr(), fetch).(*kmsg.FetchResponse)
	fpr := fresp.Topics[0].Partitions[0]
	if fpr.ErrorCode != kerr.NotLeaderForPartition.Code || fpr.CurrentLeader.LeaderID != mp.Leader || len(fresp.Brokers) != 1 {
		t.Fatalf("replica fetch: %+v, brokers %+v", fpr, fresp.Brokers)
	}
	fetch.ReplicaState.ID = -1
	fresp = rawRequest(t, b.Addr(), fetch).(*kmsg.FetchResponse)
	if fpr := fresp.Topics[0].Partitions[0]; fpr.ErrorCode != 0 {
		t.Fatalf("consumer fetch v16 from the follower: %+v", fpr)
	}
}
