package replica

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
)

// node is one broker's replica of orders-0 over a real log.
type node struct {
	id  int32
	dir string
	log *storage.Log
	p   *Partition
}

func newNode(t *testing.T, id int32, minInsync int) *node {
	t.Helper()
	n := &node{id: id, dir: t.TempDir()}
	n.open(t, minInsync)
	return n
}

func (n *node) open(t *testing.T, minInsync int) {
	t.Helper()
	n.log = openLog(t, n.dir)
	t.Cleanup(func() { n.log.Close() })
	opts := testOptions()
	opts.NodeID = n.id
	p, err := New("orders", 0, n.log, Settings{MinInsyncReplicas: minInsync}, opts)
	if err != nil {
		t.Fatal(err)
	}
	n.p = p
}

func state(leader, epoch, partitionEpoch int32, replicas, isr []int32) State {
	return State{Leader: leader, LeaderEpoch: epoch, PartitionEpoch: partitionEpoch, Replicas: replicas, ISR: isr}
}

// fetchOnce is one round of a follower's fetcher against leader, through
// the replicas' own API: read as the leader serves a replica fetch, then
// truncate or append and take the high watermark, as the fetcher does.
func fetchOnce(t *testing.T, leader, follower *node) ReadResult {
	t.Helper()
	pos := follower.p.FetchPosition()
	if !pos.Following || pos.Leader != leader.id {
		t.Fatalf("node %d does not follow node %d: %+v", follower.id, leader.id, pos)
	}
	res, err := leader.p.Read(ReadRequest{Offset: pos.FetchOffset, CurrentLeaderEpoch: pos.LeaderEpoch, MaxBytes: 1 << 20, MinOneBatch: true,
		Follower: &FollowerRead{ReplicaID: follower.id, LastFetchedEpoch: pos.LastFetchedEpoch, LogStartOffset: pos.LogStartOffset}})
	if err != nil {
		t.Fatalf("node %d fetching at %d from node %d: %v", follower.id, pos.FetchOffset, leader.id, err)
	}
	if d := res.DivergingEpoch; d != nil {
		if _, err := follower.p.TruncateToDivergence(pos.LeaderEpoch, *d); err != nil {
			t.Fatal(err)
		}
		return res
	}
	data, err := res.Region.ReadAll(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 {
		if _, err := follower.p.AppendAsFollower(pos.LeaderEpoch, data); err != nil {
			t.Fatal(err)
		}
	}
	follower.p.SetLeaderHighWatermark(res.HighWatermark)
	return res
}

// logBytes returns every batch of a log, as stored.
func logBytes(t *testing.T, l *storage.Log) []byte {
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

// TestReplicationCommitsAcksAll replicates an idempotent producer's
// batches from a leader to a follower: acks=all waits for the follower,
// the logs are byte-identical, and the follower, once leader, answers a
// retry as a duplicate.
func TestReplicationCommitsAcksAll(t *testing.T) {
	leader, follower := newNode(t, 1, 2), newNode(t, 2, 2)
	if err := leader.p.BecomeLeader(state(1, 1, 0, []int32{1, 2}, []int32{1, 2})); err != nil {
		t.Fatal(err)
	}
	follower.p.BecomeFollower(state(1, 1, 0, []int32{1, 2}, []int32{1, 2}))

	var acked []chan error
	for i := range 3 {
		res, err := leader.p.AppendAsLeader(batch(5, 42, int32(5*i)), -1)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Pending {
			t.Fatalf("append %d: acks=all answered before the follower had it", i)
		}
		done := make(chan error, 1)
		go func() { done <- leader.p.AwaitAcks(context.Background(), res.LastOffset+1, -1) }()
		acked = append(acked, done)
	}
	if hw := leader.p.HighWatermark(); hw != 0 {
		t.Fatalf("high watermark %d before the follower fetched", hw)
	}
	// The first fetch brings the records; the next one, at the new log end,
	// tells the leader the follower has them.
	fetchOnce(t, leader, follower)
	if leader.p.HighWatermark() != 0 || follower.log.LogEndOffset() != 15 {
		t.Fatalf("after one fetch: leader high watermark %d, follower log end %d", leader.p.HighWatermark(), follower.log.LogEndOffset())
	}
	res := fetchOnce(t, leader, follower)
	if res.HighWatermark != 15 || leader.p.HighWatermark() != 15 || follower.p.HighWatermark() != 15 {
		t.Fatalf("after two fetches: response %d, leader %d, follower %d", res.HighWatermark, leader.p.HighWatermark(), follower.p.HighWatermark())
	}
	for i, done := range acked {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("append %d: acks=all not answered", i)
		}
	}
	if !bytes.Equal(logBytes(t, leader.log), logBytes(t, follower.log)) {
		t.Fatal("the follower's log differs from the leader's")
	}

	// Leadership moves: the old leader's produce is refused, the new
	// leader deduplicates a retry from the producer state it replicated.
	leader.p.BecomeFollower(state(2, 2, 1, []int32{1, 2}, []int32{1, 2}))
	if _, err := leader.p.AppendAsLeader(batch(1, -1, 0), 1); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("produce to the old leader: %v", err)
	}
	if err := follower.p.BecomeLeader(state(2, 2, 1, []int32{1, 2}, []int32{1, 2})); err != nil {
		t.Fatal(err)
	}
	dup, err := follower.p.AppendAsLeader(batch(5, 42, 10), -1)
	if err != nil || !dup.Duplicate || dup.FirstOffset != 10 {
		t.Fatalf("retry on the new leader: %+v, %v", dup, err)
	}
	if _, err := follower.p.AppendAsLeader(batch(1, 42, 20), -1); err == nil {
		t.Fatal("a sequence gap was accepted by the new leader")
	}
}

// TestTruncationAtDivergence gives a leader an unreplicated tail, elects
// the follower, writes there, and brings the old leader back as a
// follower: it truncates to where its epoch ended on the new leader, not
// to its high watermark, and converges.
func TestTruncationAtDivergence(t *testing.T) {
	a, b := newNode(t, 1, 1), newNode(t, 2, 1)
	both := []int32{1, 2}
	if err := a.p.BecomeLeader(state(1, 1, 0, both, both)); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, both, both))
	for range 4 {
		if _, err := a.p.AppendAsLeader(batch(2, -1, 0), 1); err != nil {
			t.Fatal(err)
		}
		fetchOnce(t, a, b)
	}
	fetchOnce(t, a, b) // b reports offset 8: a's high watermark is 8
	// The tail only a has: three batches b never fetches.
	for range 3 {
		if _, err := a.p.AppendAsLeader(batch(3, -1, 0), 1); err != nil {
			t.Fatal(err)
		}
	}
	if a.log.LogEndOffset() != 17 || b.log.LogEndOffset() != 8 || b.p.HighWatermark() != 8 {
		t.Fatalf("before the election: a ends at %d, b at %d with high watermark %d", a.log.LogEndOffset(), b.log.LogEndOffset(), b.p.HighWatermark())
	}
	// b is elected (a is gone) and takes writes at epoch 2.
	if err := b.p.BecomeLeader(state(2, 2, 1, both, []int32{2})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.AppendAsLeader(batch(1, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	// a returns as a follower of b.
	a.p.BecomeFollower(state(2, 2, 1, both, []int32{2}))
	res := fetchOnce(t, b, a)
	if res.DivergingEpoch == nil || *res.DivergingEpoch != (EpochEndOffset{Epoch: 1, EndOffset: 8}) {
		t.Fatalf("diverging epoch %+v, want epoch 1 ending at 8", res.DivergingEpoch)
	}
	if end := a.log.LogEndOffset(); end != 8 {
		t.Fatalf("a truncated to %d, want 8", end)
	}
	fetchOnce(t, b, a)
	fetchOnce(t, b, a)
	if !bytes.Equal(logBytes(t, a.log), logBytes(t, b.log)) || a.log.LogEndOffset() != 9 {
		t.Fatalf("a did not converge: ends at %d", a.log.LogEndOffset())
	}
	if epochs := a.log.Epochs(); len(epochs) != 2 || epochs[1] != (storage.EpochEntry{Epoch: 2, StartOffset: 8}) {
		t.Fatalf("a's epochs: %v", epochs)
	}
}

// TestTruncationWithoutTheLeadersEpoch truncates a follower whose last
// epoch the leader never had: first to the end of the follower's epoch
// below the leader's answer, then, at the next fetch, as far as needed.
func TestTruncationWithoutTheLeadersEpoch(t *testing.T) {
	a, b := newNode(t, 1, 1), newNode(t, 2, 1)
	both := []int32{1, 2}
	if err := a.p.BecomeLeader(state(1, 1, 0, both, both)); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, both, both))
	if _, err := a.p.AppendAsLeader(batch(4, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	fetchOnce(t, a, b)
	// a leads again at epoch 2 and writes what b never gets.
	if err := a.p.BecomeLeader(state(1, 2, 1, both, []int32{1})); err != nil {
		t.Fatal(err)
	}
	if _, err := a.p.AppendAsLeader(batch(2, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	// b leads at epoch 3 (a is away), writes, and a follows it.
	if err := b.p.BecomeLeader(state(2, 3, 2, both, []int32{2})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.AppendAsLeader(batch(3, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	a.p.BecomeFollower(state(2, 3, 2, both, []int32{2}))
	res := fetchOnce(t, b, a) // a's last epoch, 2, is unknown to b: b answers epoch 1 ending at 4
	if res.DivergingEpoch == nil || *res.DivergingEpoch != (EpochEndOffset{Epoch: 1, EndOffset: 4}) || a.log.LogEndOffset() != 4 {
		t.Fatalf("diverging %+v, a ends at %d", res.DivergingEpoch, a.log.LogEndOffset())
	}
	fetchOnce(t, b, a)
	if !bytes.Equal(logBytes(t, a.log), logBytes(t, b.log)) {
		t.Fatal("a did not converge")
	}
}

// TestFollowerReadsRefused checks what a leader refuses: a broker that is
// not a replica, a consumer reading from a follower.
func TestFollowerReadsRefused(t *testing.T) {
	a, b := newNode(t, 1, 1), newNode(t, 2, 1)
	if err := a.p.BecomeLeader(state(1, 1, 0, []int32{1, 2}, []int32{1, 2})); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, []int32{1, 2}, []int32{1, 2}))
	if _, err := a.p.Read(ReadRequest{CurrentLeaderEpoch: 1, MaxBytes: 1, Follower: &FollowerRead{ReplicaID: 3, LastFetchedEpoch: -1}}); !errors.Is(err, kerr.UnknownLeaderEpoch) {
		t.Fatalf("fetch from broker 3: %v", err)
	}
	if _, err := b.p.Read(ReadRequest{CurrentLeaderEpoch: 1, MaxBytes: 1}); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("consumer fetch from a follower: %v", err)
	}
	if _, err := b.p.AppendAsFollower(0, batch(1, -1, 0)); !errors.Is(err, ErrNotFollower) {
		t.Fatalf("append at a stale leader epoch: %v", err)
	}
}

// TestFollowerBehindLeaderLogStart resets a follower that fell behind the
// leader's log start (DeleteRecords, retention): it starts again, empty,
// there.
func TestFollowerBehindLeaderLogStart(t *testing.T) {
	a, b := newNode(t, 1, 1), newNode(t, 2, 1)
	both := []int32{1, 2}
	if err := a.p.BecomeLeader(state(1, 1, 0, both, []int32{1})); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := a.p.AppendAsLeader(batch(4, -1, 0), 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.p.DeleteRecordsBefore(6); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, both, []int32{1}))
	pos := b.p.FetchPosition()
	_, err := a.p.Read(ReadRequest{Offset: pos.FetchOffset, CurrentLeaderEpoch: 1, MaxBytes: 1 << 20,
		Follower: &FollowerRead{ReplicaID: 2, LastFetchedEpoch: pos.LastFetchedEpoch}})
	if !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("fetch below the log start: %v", err)
	}
	if end, err := b.p.ResetToLeader(1, 6, a.log.LogEndOffset()); err != nil || end != 6 {
		t.Fatalf("reset: %d, %v", end, err)
	}
	// The batch holding offset 6 starts at 4: the empty log starts there.
	fetchOnce(t, a, b)
	if b.log.LogStartOffset() != 4 || b.log.LogEndOffset() != 12 {
		t.Fatalf("b holds [%d, %d), want [4, 12)", b.log.LogStartOffset(), b.log.LogEndOffset())
	}
}

// TestFollowerWithAnEmptyEpoch brings back, as a follower, a replica that
// led an epoch in which it wrote nothing before it died: its epoch cache
// ends with that empty epoch, which the new leader never had. It fetches
// with the epoch of its last batch, so it catches up instead of being told
// forever that its log diverged at its own end.
func TestFollowerWithAnEmptyEpoch(t *testing.T) {
	a, b := newNode(t, 1, 1), newNode(t, 2, 1)
	both := []int32{1, 2}
	if err := a.p.BecomeLeader(state(1, 1, 0, both, both)); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, both, both))
	if _, err := a.p.AppendAsLeader(batch(4, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	fetchOnce(t, a, b)
	fetchOnce(t, a, b)
	// a leads epoch 2 and writes nothing; b is elected at epoch 3.
	if err := a.p.BecomeLeader(state(1, 2, 1, both, both)); err != nil {
		t.Fatal(err)
	}
	if err := b.p.BecomeLeader(state(2, 3, 2, both, []int32{2})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.AppendAsLeader(batch(3, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	a.p.BecomeFollower(state(2, 3, 2, both, []int32{2}))
	if pos := a.p.FetchPosition(); pos.LastFetchedEpoch != 1 {
		t.Fatalf("fetching with last epoch %d, want 1, the epoch of the last batch", pos.LastFetchedEpoch)
	}
	for range 3 {
		fetchOnce(t, b, a)
	}
	if a.log.LogEndOffset() != 7 || !bytes.Equal(logBytes(t, a.log), logBytes(t, b.log)) {
		t.Fatalf("a did not catch up: ends at %d", a.log.LogEndOffset())
	}
}

// TestConsumerReadsFromFollower reads from a follower as KIP-392 lets a
// consumer that sent its client metadata: up to the high watermark the
// follower knows, nothing from there to its log end, OFFSET_OUT_OF_RANGE
// past that, and the leader epoch still fenced. The leader lists the
// follower as a read replica once it holds the offset.
func TestConsumerReadsFromFollower(t *testing.T) {
	leader, follower := newNode(t, 1, 1), newNode(t, 2, 1)
	if err := leader.p.BecomeLeader(state(1, 1, 0, []int32{1, 2}, []int32{1, 2})); err != nil {
		t.Fatal(err)
	}
	follower.p.BecomeFollower(state(1, 1, 0, []int32{1, 2}, []int32{1, 2}))
	if _, err := leader.p.AppendAsLeader(batch(5, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	// The follower has the records but knows a high watermark of 0.
	fetchOnce(t, leader, follower)
	read := func(offset int64) (ReadResult, error) {
		return follower.p.Read(ReadRequest{Offset: offset, CurrentLeaderEpoch: 1, MaxBytes: 1 << 20, MinOneBatch: true, AnyReplica: true})
	}
	if res, err := read(0); err != nil || res.Region.Len != 0 || res.HighWatermark != 0 || res.Limit != 0 {
		t.Fatalf("read past the follower's high watermark: %+v, %v", res, err)
	}
	if _, _, ok := leader.p.ReadReplicas(0); !ok {
		t.Fatal("the leader lists no read replicas")
	}
	fetchOnce(t, leader, follower)
	if res, err := read(0); err != nil || res.Region.Len == 0 || res.HighWatermark != 5 || follower.p.Limit(false, true, false) != 5 {
		t.Fatalf("read below the follower's high watermark: %+v, %v", res, err)
	}
	if res, err := read(5); err != nil || res.Region.Len != 0 {
		t.Fatalf("read at the log end: %+v, %v", res, err)
	}
	if _, err := read(6); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("read past the follower's log end: %v", err)
	}
	if _, err := follower.p.Read(ReadRequest{Offset: 0, CurrentLeaderEpoch: 0, MaxBytes: 1, AnyReplica: true}); !errors.Is(err, kerr.FencedLeaderEpoch) {
		t.Fatalf("read at an old leader epoch: %v", err)
	}
	if follower.p.Limit(false, false, false) != -1 {
		t.Fatal("a consumer that may not read from a follower has no limit there")
	}
	l, fs, _ := leader.p.ReadReplicas(3)
	if l.ID != 1 || l.LogEndOffset != 5 || len(fs) != 1 || fs[0].ID != 2 || fs[0].LogEndOffset != 5 {
		t.Fatalf("read replicas at offset 3: leader %+v, followers %+v", l, fs)
	}
	if _, fs, _ := leader.p.ReadReplicas(6); len(fs) != 0 {
		t.Fatalf("read replicas past the follower's log end: %+v", fs)
	}
	if _, _, ok := follower.p.ReadReplicas(0); ok {
		t.Fatal("a follower lists read replicas")
	}
}
