package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/testutil/tcpproxy"
)

// startReplicationProxied starts three combined nodes whose followers
// reach each leader through a proxy of that leader's own (its
// REPLICATION listener, advertised at the proxy, forwards to its client
// listener), so that a leader can be cut off from its followers while
// clients still reach it.
func startReplicationProxied(t *testing.T, sets ...string) (*cluster, map[int32]*tcpproxy.Proxy) {
	t.Helper()
	proxies := map[int32]*tcpproxy.Proxy{}
	hook := func(id int32, clientAddr string) ([]string, []string) {
		p, err := tcpproxy.Listen(clientAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies[id] = p
		return []string{"REPLICATION://127.0.0.1:" + freePort(t)}, []string{
			"advertised.listeners=PLAINTEXT://" + clientAddr + ",REPLICATION://" + p.Addr(),
			"inter.broker.listener.name=REPLICATION",
			"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
		}
	}
	c := startClusterWith(t, []string{"broker,controller", "broker,controller", "broker,controller"}, hook, sets...)
	c.waitBrokers(1, 2, 3)
	return c, proxies
}

// plainProducer is a producer of uncompressed records (their values can be
// found in the log files), not idempotent, with no linger.
func plainProducer(t *testing.T, addr, topic string, acks kgo.Acks, opts ...kgo.Opt) *kgo.Client {
	return client(t, addr, append([]kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(acks),
		kgo.DisableIdempotentWrite(), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(0)}, opts...)...)
}

// partitionEpoch is a partition's leader and leader epoch, and its
// topic's id, as node via reports them.
func (c *cluster) partitionEpoch(via int32, topic string, partition int32) (leader, epoch int32, topicID [16]byte) {
	c.t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, client(c.t, c.nodes[via].addr))
	if err != nil || len(resp.Topics) != 1 {
		c.t.Fatalf("metadata of %s through node %d: %v", topic, via, err)
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.Partition == partition {
			return p.Leader, p.LeaderEpoch, resp.Topics[0].TopicID
		}
	}
	c.t.Fatalf("no partition %s/%d", topic, partition)
	return -1, -1, topicID
}

// TestTruncationToTheDivergencePoint: a leader cut off from its followers
// takes acks=1 writes that no follower has, and is killed; a follower
// becomes leader at a new epoch and takes other writes at the same
// offsets. The old leader returns, learns from the new leader's Fetch
// answer (DivergingEpoch) where its log diverged, truncates there — not
// to its high watermark — and converges: its unreplicated tail is gone
// from its log and from every consumer, and the three logs are
// byte-identical. The new leader answers KIP-320's FENCED_LEADER_EPOCH and
// UNKNOWN_LEADER_EPOCH to Fetch, ListOffsets and OffsetForLeaderEpoch,
// and OffsetForLeaderEpoch tells a client of the old epoch where it ended.
func TestTruncationToTheDivergencePoint(t *testing.T) {
	c, proxies := startReplicationProxied(t, replicatedSets...)
	c.createReplicated(1, "diverge", 1)
	c.waitInSync(1, "diverge", 1)
	ctx := ctxTimeout(t, 120*time.Second)
	const committed, tail, after = 100, 20, 30
	plain := func(addr string, acks kgo.Acks, opts ...kgo.Opt) *kgo.Client {
		return plainProducer(t, addr, "diverge", acks, opts...)
	}
	old, oldEpoch, topicID := c.partitionEpoch(1, "diverge", 0)
	strict := plain(c.nodes[old].addr, kgo.AllISRAcks())
	for i := range committed {
		if err := strict.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "committed-%03d", i)}).FirstErr(); err != nil {
			t.Fatalf("committed record %d: %v", i, err)
		}
	}
	// Every follower has the committed records (the logs are as long as
	// the leader's), and none can fetch from the leader from now on.
	poll.UntilStatus(t, 30*time.Second, "the followers to have the committed records", func() (bool, string) {
		sizes := map[int]bool{}
		for id := int32(1); id <= 3; id++ {
			sizes[len(logBytes(t, c.nodes[id].dir, "diverge", 0))] = true
		}
		return len(sizes) == 1, fmt.Sprint(sizes)
	})
	proxies[old].Cut()
	loose := plain(c.nodes[old].addr, kgo.LeaderAck())
	for i := range tail {
		if err := loose.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "tail-%03d", i)}).FirstErr(); err != nil {
			t.Fatalf("acks=1 tail record %d: %v", i, err)
		}
	}
	loose.Close()
	strict.Close()
	if !bytes.Contains(logBytes(t, c.nodes[old].dir, "diverge", 0), []byte("tail-000")) {
		t.Fatalf("node %d's log lacks the tail it acknowledged", old)
	}
	c.nodes[old].kill()

	survivor := c.alive(old)
	var leader, epoch int32
	poll.UntilStatus(t, 60*time.Second, "a new leader", func() (bool, string) {
		l, _, err := c.partitionState(survivor, "diverge", 0)
		return err == nil && l >= 0 && l != old, fmt.Sprint(l, err)
	})
	leader, epoch, _ = c.partitionEpoch(survivor, "diverge", 0)
	if epoch <= oldEpoch {
		t.Fatalf("the new leader %d is at epoch %d, the old one was at %d", leader, epoch, oldEpoch)
	}
	if bytes.Contains(logBytes(t, c.nodes[leader].dir, "diverge", 0), []byte("tail-")) {
		t.Fatalf("the new leader %d has the old leader's tail: no divergence to test", leader)
	}
	var seeds []string
	for id := int32(1); id <= 3; id++ {
		if id != old {
			seeds = append(seeds, c.nodes[id].addr)
		}
	}
	// Two replicas are in sync: acks=all succeeds at the new epoch, at
	// the offsets the tail had.
	next := plain(c.nodes[leader].addr, kgo.AllISRAcks(), kgo.SeedBrokers(seeds...))
	for i := range after {
		r := &kgo.Record{Value: fmt.Appendf(nil, "after-%03d", i)}
		if err := next.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("record %d at the new leader: %v", i, err)
		}
		if want := int64(committed + i); r.Offset != want {
			t.Fatalf("record %d at offset %d, want %d", i, r.Offset, want)
		}
	}
	checkLeaderEpochAnswers(t, ctx, c.nodes[leader].addr, topicID, oldEpoch, epoch, committed)

	proxies[old].Heal()
	c.nodes[old].restart()
	c.waitInSync(leader, "diverge", 1)
	logs := c.nodes[old].logs.String()
	if !strings.Contains(logs, "truncating to the divergence point") || !strings.Contains(logs, fmt.Sprintf("offset=%d", committed)) {
		t.Fatalf("node %d did not truncate to offset %d:\n%s", old, committed, logs)
	}

	// Every consumer, whichever replica leads, reads the committed
	// records and the new leader's, never the tail.
	got := readAll(t, ctx, c.nodes[old].addr, "diverge")[0]
	if len(got) != committed+after {
		t.Fatalf("read %d records, want %d", len(got), committed+after)
	}
	for i, r := range got {
		want, wantEpoch := fmt.Sprintf("committed-%03d", i), oldEpoch
		if i >= committed {
			want, wantEpoch = fmt.Sprintf("after-%03d", i-committed), epoch
		}
		if string(r.Value) != want || r.Offset != int64(i) || r.LeaderEpoch != wantEpoch {
			t.Fatalf("offset %d holds %s at epoch %d, want %s at offset %d, epoch %d", r.Offset, r.Value, r.LeaderEpoch, want, i, wantEpoch)
		}
	}
	c.checkIdenticalLogs("diverge", 1)
	if bytes.Contains(logBytes(t, c.nodes[old].dir, "diverge", 0), []byte("tail-")) {
		t.Fatalf("node %d's log still holds the tail", old)
	}
}

// checkLeaderEpochAnswers asks a leader at epoch, of a partition whose
// previous leader led at oldEpoch until oldEnd, with a stale and a future
// current leader epoch: Fetch, ListOffsets and OffsetForLeaderEpoch answer
// FENCED_LEADER_EPOCH and UNKNOWN_LEADER_EPOCH (KIP-320); with the current
// one, OffsetForLeaderEpoch(oldEpoch) is oldEnd, where a consumer that
// read at oldEpoch finds out it must truncate.
func checkLeaderEpochAnswers(t *testing.T, ctx context.Context, addr string, topicID [16]byte, oldEpoch, epoch int32, oldEnd int64) {
	t.Helper()
	cl := client(t, addr)
	for _, tc := range []struct {
		current int32
		want    error
	}{{oldEpoch, kerr.FencedLeaderEpoch}, {epoch + 1, kerr.UnknownLeaderEpoch}} {
		fetch := kmsg.NewPtrFetchRequest()
		fetch.ReplicaID, fetch.MaxWaitMillis, fetch.MaxBytes = -1, 10, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = "diverge", topicID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.CurrentLeaderEpoch, fp.PartitionMaxBytes = tc.current, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
		fetch.Topics = append(fetch.Topics, ft)
		fr, err := fetch.RequestWith(ctx, cl)
		if err != nil || len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch at current epoch %d: %v", tc.current, err)
		}
		if err := kerr.ErrorForCode(fr.Topics[0].Partitions[0].ErrorCode); !errors.Is(err, tc.want) {
			t.Errorf("Fetch with current leader epoch %d (leader at %d): %v, want %v", tc.current, epoch, err, tc.want)
		}

		list := kmsg.NewPtrListOffsetsRequest()
		list.ReplicaID = -1
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "diverge"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.CurrentLeaderEpoch, lp.Timestamp = tc.current, -1
		lt.Partitions = append(lt.Partitions, lp)
		list.Topics = append(list.Topics, lt)
		lr, err := list.RequestWith(ctx, cl)
		if err != nil || len(lr.Topics) != 1 || len(lr.Topics[0].Partitions) != 1 {
			t.Fatalf("list offsets at current epoch %d: %v", tc.current, err)
		}
		if err := kerr.ErrorForCode(lr.Topics[0].Partitions[0].ErrorCode); !errors.Is(err, tc.want) {
			t.Errorf("ListOffsets with current leader epoch %d (leader at %d): %v, want %v", tc.current, epoch, err, tc.want)
		}

		if p := offsetForLeaderEpoch(t, ctx, cl, tc.current, oldEpoch); !errors.Is(kerr.ErrorForCode(p.ErrorCode), tc.want) {
			t.Errorf("OffsetForLeaderEpoch with current leader epoch %d (leader at %d): error %d, want %v", tc.current, epoch, p.ErrorCode, tc.want)
		}
	}
	p := offsetForLeaderEpoch(t, ctx, cl, epoch, oldEpoch)
	if p.ErrorCode != 0 || p.LeaderEpoch != oldEpoch || p.EndOffset != oldEnd {
		t.Errorf("OffsetForLeaderEpoch(%d) at epoch %d: error %d, epoch %d, end offset %d; want epoch %d ending at %d",
			oldEpoch, epoch, p.ErrorCode, p.LeaderEpoch, p.EndOffset, oldEpoch, oldEnd)
	}
}

func offsetForLeaderEpoch(t *testing.T, ctx context.Context, cl *kgo.Client, current, leaderEpoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = "diverge"
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.CurrentLeaderEpoch, rp.LeaderEpoch = current, leaderEpoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("OffsetForLeaderEpoch: %v", err)
	}
	return resp.Topics[0].Partitions[0]
}
