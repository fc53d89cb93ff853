package replica

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestReplicationStatus follows a partition from under-replicated to fully
// replicated through an expansion the controller commits, as the metrics
// see it: the leader's under-replicated and under-min-ISR verdicts, the
// expansions counted, and the follower's lag behind the high watermark its
// leader sent (Kafka's FetcherLagMetrics).
func TestReplicationStatus(t *testing.T) {
	a, b := newNode(t, 1, 2), newNode(t, 2, 2)
	var expands, shrinks atomic.Int32
	a.p.opts.ISRChanged = func(shrink bool) {
		if shrink {
			shrinks.Add(1)
		} else {
			expands.Add(1)
		}
	}
	a.p.opts.AlterPartition = func(_ context.Context, _ string, _ int32, c ISRChange) (int32, error) {
		return c.PartitionEpoch + 1, nil
	}
	both := []int32{1, 2}
	if err := a.p.BecomeLeader(state(1, 1, 0, both, []int32{1})); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, both, []int32{1}))
	if r := a.p.Replication(); !r.Leader || !r.UnderReplicated() || !r.UnderMinISR() || r.MinInsyncReplicas != 2 {
		t.Fatalf("leader with the follower out of the ISR: %+v", r)
	}
	if r := b.p.Replication(); r.Leader || r.UnderReplicated() || r.UnderMinISR() || r.FetcherLag != -1 {
		t.Fatalf("follower before its first fetch: %+v", r)
	}
	// Under min.insync.replicas the high watermark stays (KIP-966); with
	// min.insync.replicas=1 it is 10 (the ISR is the leader alone), and b
	// gets one batch per fetch of 1 byte.
	if err := a.p.SetSettings(Settings{MinInsyncReplicas: 1, Log: storage.DefaultConfig()}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := a.p.AppendAsLeader(batch(5, -1, 0), 1); err != nil {
			t.Fatal(err)
		}
	}
	fetchLimited := func() {
		pos := b.p.FetchPosition()
		res, err := a.p.Read(ReadRequest{Offset: pos.FetchOffset, CurrentLeaderEpoch: 1, MaxBytes: 1, MinOneBatch: true,
			Follower: &FollowerRead{ReplicaID: 2, LastFetchedEpoch: pos.LastFetchedEpoch, LogStartOffset: pos.LogStartOffset}})
		if err != nil {
			t.Fatal(err)
		}
		data, err := res.Region.ReadAll(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.p.AppendAsFollower(1, data); err != nil {
			t.Fatal(err)
		}
		b.p.SetLeaderHighWatermark(res.HighWatermark)
	}
	fetchLimited()
	if r := b.p.Replication(); r.FetcherLag != 5 {
		t.Fatalf("follower after one batch of two: lag %d, want 5", r.FetcherLag)
	}
	fetchLimited()
	if r := b.p.Replication(); r.FetcherLag != 0 {
		t.Fatalf("follower with both batches: lag %d, want 0", r.FetcherLag)
	}
	fetchOnce(t, a, b) // at the log end: b joins the ISR
	poll.Until(t, 30*time.Second, "the expansion to commit", func() bool { return slices.Equal(a.p.ISR(), both) })
	if r := a.p.Replication(); r.UnderReplicated() || r.UnderMinISR() || expands.Load() != 1 || shrinks.Load() != 0 {
		t.Fatalf("after the expansion: %+v, %d expansions, %d shrinks counted", r, expands.Load(), shrinks.Load())
	}
}

// TestUnderReplicatedWhileMoving counts a partition being reassigned
// against its target replication factor, as Kafka's
// UnderReplicatedPartitions does: replicas {2,3,4} plus 1 being removed.
func TestUnderReplicatedWhileMoving(t *testing.T) {
	a := newNode(t, 2, 1)
	moving := State{Leader: 2, LeaderEpoch: 1, Replicas: []int32{2, 3, 4, 1}, ISR: []int32{1, 2, 3}, Removing: []int32{1}}
	if err := a.p.BecomeLeader(moving); err != nil {
		t.Fatal(err)
	}
	if r := a.p.Replication(); r.UnderReplicated() {
		t.Fatalf("moving with three in sync: %+v", r)
	}
	moving.PartitionEpoch, moving.ISR = 1, []int32{1, 2}
	if err := a.p.BecomeLeader(moving); err != nil {
		t.Fatal(err)
	}
	if r := a.p.Replication(); !r.UnderReplicated() {
		t.Fatalf("moving with two in sync: %+v", r)
	}
}
