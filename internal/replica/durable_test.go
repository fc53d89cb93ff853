package replica

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// settings returns a replica's settings for min.insync.replicas=minInsync,
// durable when every append is fsynced (flush.messages=1).
func settings(minInsync int, durable bool) Settings {
	s := Settings{MinInsyncReplicas: minInsync, Log: storage.DefaultConfig()}
	if durable {
		s.SyncEveryAppend, s.Log.FlushMessages = true, 1
	}
	return s
}

// produceReplicated appends n batches of 2 records with acks=all to a and
// replicates them to b until every one is acknowledged; it returns the
// offset below which everything was acknowledged.
func produceReplicated(t *testing.T, a, b *memNode, n int) int64 {
	t.Helper()
	var end int64
	acked := make(chan error, n)
	for range n {
		res, err := a.p.AppendAsLeader(batch(2, -1, 0), -1)
		if err != nil {
			t.Fatal(err)
		}
		end = res.LastOffset + 1
		go func(end int64) { acked <- a.p.AwaitAcks(context.Background(), end, -1) }(end)
	}
	fetchOnce(t, &a.node, &b.node) // b appends what a has
	fetchOnce(t, &a.node, &b.node) // b's log end tells a it has it
	for range n {
		select {
		case err := <-acked:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("acks=all not answered")
		}
	}
	return end
}

// TestDurableAcks is what the README promises of an acknowledgement, on
// the crashable file system: with flush.messages=1 (the topic's
// log.flush.interval.messages=1) an acks=all record was fsynced by the
// leader and every ISR member, so both machines can lose power at once and
// every acknowledged record is on both disks, byte for byte; an acks=1
// record was fsynced by the leader. Without it, the same acknowledgements
// promise only the page cache: a power loss of both machines loses them.
func TestDurableAcks(t *testing.T) {
	both := []int32{1, 2}
	for _, durable := range []bool{true, false} {
		s := settings(2, durable)
		ma, mb := vfs.NewMem(), vfs.NewMem()
		a, b := openMemNodeWith(t, 1, ma, ma, s), openMemNodeWith(t, 2, mb, mb, s)
		if err := a.p.BecomeLeader(state(1, 1, 0, both, both)); err != nil {
			t.Fatal(err)
		}
		b.p.BecomeFollower(state(1, 1, 0, both, both))
		acked := produceReplicated(t, a, b, 5)
		// acks=1: answered once the leader has it, synced when durable.
		res, err := a.p.AppendAsLeader(batch(3, -1, 0), 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Pending {
			if err := a.p.AwaitAcks(context.Background(), res.LastOffset+1, 1); err != nil {
				t.Fatal(err)
			}
		}
		ackedByLeader := res.LastOffset + 1

		a, b = a.powerLoss(t, s), b.powerLoss(t, s)
		if !durable {
			if a.log.LogEndOffset() != 0 || b.log.LogEndOffset() != 0 {
				t.Fatalf("without flush.messages=1: logs end at %d and %d after the power loss; the acknowledgements promised no fsync",
					a.log.LogEndOffset(), b.log.LogEndOffset())
			}
			continue
		}
		if a.log.LogEndOffset() != ackedByLeader || b.log.LogEndOffset() < acked {
			t.Fatalf("flush.messages=1: the leader ends at %d (acknowledged %d), the follower at %d (acks=all acknowledged %d)",
				a.log.LogEndOffset(), ackedByLeader, b.log.LogEndOffset(), acked)
		}
		if !bytes.Equal(logBytes(t, a.log)[:len(logBytes(t, b.log))], logBytes(t, b.log)) {
			t.Fatal("flush.messages=1: the logs differ after the power loss")
		}
	}
}

// TestOfflineFollowerStopsFetching fails a durable follower's fsync: its
// log goes offline and it fetches no more, so the leader never counts the
// records it appended but could not sync.
func TestOfflineFollowerStopsFetching(t *testing.T) {
	both := []int32{1, 2}
	s := settings(2, true)
	ma, mb := vfs.NewMem(), vfs.NewMem()
	efs := vfs.NewErrorFS(mb)
	a, b := openMemNodeWith(t, 1, ma, ma, s), openMemNodeWith(t, 2, mb, efs, s)
	if err := a.p.BecomeLeader(state(1, 1, 0, both, both)); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, both, both))
	if _, err := a.p.AppendAsLeader(batch(2, -1, 0), -1); err != nil {
		t.Fatal(err)
	}
	efs.Add(vfs.Fault{Op: vfs.OpSync})
	pos := b.p.FetchPosition()
	res, err := a.p.Read(ReadRequest{Offset: pos.FetchOffset, CurrentLeaderEpoch: 1, MaxBytes: 1 << 20, MinOneBatch: true,
		Follower: &FollowerRead{ReplicaID: 2, LastFetchedEpoch: pos.LastFetchedEpoch}})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := res.Region.ReadAll(nil)
	if _, err := b.p.AppendAsFollower(1, data); !errors.Is(err, storage.ErrLogOffline) && !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("append with a failing fsync: %v", err)
	}
	if pos := b.p.FetchPosition(); pos.Following {
		t.Fatalf("an offline follower still fetches, at %d", pos.FetchOffset)
	}
	if hw := a.p.HighWatermark(); hw != 0 {
		t.Fatalf("the leader's high watermark is %d: it counted an unsynced follower", hw)
	}
}

// TestOfflineLeaderServesNoOne fails a durable leader's fsync: its log goes
// offline, and a consumer's or a follower's fetch then fails with the
// offline error (KAFKA_STORAGE_ERROR on the wire), so that they look for
// the next leader instead of reading nothing from this one forever.
func TestOfflineLeaderServesNoOne(t *testing.T) {
	both := []int32{1, 2}
	s := settings(2, true)
	ma := vfs.NewMem()
	efs := vfs.NewErrorFS(ma)
	a := openMemNodeWith(t, 1, ma, efs, s)
	if err := a.p.BecomeLeader(state(1, 1, 0, both, both)); err != nil {
		t.Fatal(err)
	}
	efs.Add(vfs.Fault{Op: vfs.OpSync})
	if _, err := a.p.AppendAsLeader(batch(2, -1, 0), -1); err == nil {
		t.Fatal("an append whose fsync failed succeeded")
	}
	for _, f := range []*FollowerRead{nil, {ReplicaID: 2, LastFetchedEpoch: -1}} {
		_, err := a.p.Read(ReadRequest{Offset: 0, CurrentLeaderEpoch: 1, MaxBytes: 1 << 20, MinOneBatch: true, Follower: f})
		if !errors.Is(err, storage.ErrLogOffline) {
			t.Fatalf("a fetch (follower %v) from an offline leader: %v, want %v", f != nil, err, storage.ErrLogOffline)
		}
	}
}

// TestRestartedFollowerSyncsBeforeItCounts: a durable follower killed
// between appending what it fetched and syncing it finds those records
// again when it restarts (the page cache outlives the process). Its next
// fetch tells the leader it has them, and the leader counts them towards
// the high watermark and answers acks=all: they must be on the follower's
// disk by then, or a power loss of both machines takes from the follower
// records it was counted for (and a clean election may pick it).
func TestRestartedFollowerSyncsBeforeItCounts(t *testing.T) {
	both := []int32{1, 2}
	s := settings(2, true)
	ma, mb := vfs.NewMem(), vfs.NewMem()
	a, b := openMemNodeWith(t, 1, ma, ma, s), openMemNodeWith(t, 2, mb, mb, s)
	if err := a.p.BecomeLeader(state(1, 1, 0, both, both)); err != nil {
		t.Fatal(err)
	}
	b.p.BecomeFollower(state(1, 1, 0, both, both))
	res, err := a.p.AppendAsLeader(batch(2, -1, 0), -1)
	if err != nil {
		t.Fatal(err)
	}
	acked := make(chan error, 1)
	go func() { acked <- a.p.AwaitAcks(context.Background(), res.LastOffset+1, -1) }()
	// The follower's process dies after writing the leader's batch, before
	// its fsync: the storage append alone, as AppendAsFollower would have
	// made it.
	if _, err := b.log.Append(logBytes(t, a.log), storage.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	// It restarts on the same page cache and fetches from where its log
	// ends.
	b = openMemNodeWith(t, 2, mb, mb, s)
	b.p.BecomeFollower(state(1, 1, 0, both, both))
	fetchOnce(t, &a.node, &b.node)
	select {
	case err := <-acked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("acks=all not answered after the restarted follower's fetch")
	}
	counted := a.p.HighWatermark()
	// Both lose power.
	b = b.powerLoss(t, s)
	if end := b.log.LogEndOffset(); end < counted {
		t.Fatalf("the follower ends at %d after the power loss; the leader counted it up to %d and acknowledged", end, counted)
	}
}
