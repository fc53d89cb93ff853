package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// openLog opens a real partition log in dir.
func openLog(t *testing.T, dir string) *storage.Log {
	t.Helper()
	l, err := storage.OpenLog(vfs.Default, filepath.Join(dir, "orders-0"), storage.DefaultConfig(), storage.LogOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testOptions() Options {
	return Options{NodeID: 1, LagTimeMax: 30 * time.Second, Now: time.Now, Logger: slog.New(slog.DiscardHandler)}
}

func newLeader(t *testing.T, l *storage.Log, s Settings) *Partition {
	t.Helper()
	p, err := New("orders", 0, l, s, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.BecomeLeader(State{Leader: 1, LeaderEpoch: 3, PartitionEpoch: 0, Replicas: []int32{1}, ISR: []int32{1}}); err != nil {
		t.Fatal(err)
	}
	return p
}

// batch builds a producer batch of n records, idempotent when pid >= 0.
func batch(n int, pid int64, seq int32) []byte {
	recs := make([]record.Rec, n)
	for i := range recs {
		recs[i] = record.Rec{Value: []byte("v"), Timestamp: time.Now().UnixMilli()}
	}
	b := record.Build(nil, recs)
	if pid >= 0 {
		binary.BigEndian.PutUint64(b[43:], uint64(pid)) // producerId
		binary.BigEndian.PutUint16(b[51:], 0)           // producerEpoch
		binary.BigEndian.PutUint32(b[53:], uint32(seq)) // baseSequence
		binary.BigEndian.PutUint32(b[17:], record.Checksum(b))
	}
	return b
}

func TestLeaderAppendAdvancesHighWatermarkAndWakesWatchers(t *testing.T) {
	p := newLeader(t, openLog(t, t.TempDir()), Settings{MinInsyncReplicas: 1})
	wake := make(chan struct{}, 1)
	p.Watch(wake)
	res, err := p.AppendAsLeader(batch(3, -1, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstOffset != 0 || res.LastOffset != 2 || p.HighWatermark() != 3 {
		t.Fatalf("append: %+v, high watermark %d", res, p.HighWatermark())
	}
	select {
	case <-wake:
	default:
		t.Fatal("the watcher was not signalled")
	}
	if p.Watched() {
		t.Fatal("a signalled watcher stays registered")
	}
	if epoch, ok := p.log.LatestEpoch(); !ok || epoch != 3 {
		t.Fatalf("leader epoch in the log: %d %v", epoch, ok)
	}
}

func TestAppendRefusals(t *testing.T) {
	l := openLog(t, t.TempDir())
	follower, err := New("orders", 0, l, Settings{MinInsyncReplicas: 1}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.AppendAsLeader(batch(1, -1, 0), 1); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("append to a non-leader: %v", err)
	}
	strict := newLeader(t, l, Settings{MinInsyncReplicas: 2})
	if _, err := strict.AppendAsLeader(batch(1, -1, 0), -1); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all below min.insync.replicas: %v", err)
	}
	if _, err := strict.AppendAsLeader(batch(1, -1, 0), 1); err != nil {
		t.Fatalf("acks=1 does not need the ISR: %v", err)
	}
}

// TestSyncEveryAppendHoldsHighWatermarkUntilFlushed checks that with
// flush.messages=1 consumers see nothing before the fsync.
func TestSyncEveryAppendHoldsHighWatermarkUntilFlushed(t *testing.T) {
	p := newLeader(t, openLog(t, t.TempDir()), Settings{MinInsyncReplicas: 1, SyncEveryAppend: true})
	res, err := p.AppendAsLeader(batch(2, -1, 0), -1)
	if err != nil {
		t.Fatal(err)
	}
	if p.HighWatermark() != 0 {
		t.Fatalf("high watermark %d before the flush", p.HighWatermark())
	}
	if err := p.AwaitAcks(context.Background(), res.LastOffset+1, -1); err != nil {
		t.Fatal(err)
	}
	if p.HighWatermark() != 2 || p.log.RecoveryPoint() != 2 {
		t.Fatalf("after the flush: high watermark %d, recovery point %d", p.HighWatermark(), p.log.RecoveryPoint())
	}
}

// TestProducerStateSurvivesReopen retries an idempotent batch after the
// log was closed and opened again: the rebuilt state answers it as a
// duplicate with its original offset.
func TestProducerStateSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	p := newLeader(t, l, Settings{MinInsyncReplicas: 1})
	first := batch(5, 42, 0)
	if _, err := p.AppendAsLeader(first, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AppendAsLeader(batch(5, 42, 5), -1); err != nil {
		t.Fatal(err)
	}
	for _, snapshot := range []bool{false, true} {
		if snapshot {
			if err := p.SnapshotProducers(); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openLog(t, dir)
		p = newLeader(t, l, Settings{MinInsyncReplicas: 1})
		res, err := p.AppendAsLeader(batch(5, 42, 5), -1)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Duplicate || res.FirstOffset != 5 || l.LogEndOffset() != 10 {
			t.Fatalf("snapshot=%v: retry answered %+v, log end %d", snapshot, res, l.LogEndOffset())
		}
		if _, err := p.AppendAsLeader(batch(1, 42, 20), -1); !errors.Is(err, producer.ErrOutOfOrderSequence) {
			t.Fatalf("snapshot=%v: a sequence gap gave %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", snapshot, err)
		}
	}
	l.Close()
}

// TestSnapshotFailureAtRollKeepsProducerState fails the producer snapshot
// written when a segment rolls: the append still stands, and a retry of
// it is answered as a duplicate, not written twice.
func TestSnapshotFailureAtRollKeepsProducerState(t *testing.T) {
	fs := vfs.NewErrorFS(vfs.Default, vfs.Fault{Op: vfs.OpCreate, Path: ".snapshot"})
	cfg := storage.DefaultConfig()
	cfg.SegmentBytes = 1024
	l, err := storage.OpenLog(fs, filepath.Join(t.TempDir(), "orders-0"), cfg, storage.LogOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := newLeader(t, l, Settings{MinInsyncReplicas: 1})
	var seq int32
	for l.NumSegments() < 3 {
		if _, err := p.AppendAsLeader(batch(10, 7, seq), -1); err != nil {
			t.Fatalf("append at sequence %d: %v", seq, err)
		}
		seq += 10
	}
	if fs.Fired() == 0 {
		t.Fatal("no snapshot write was attempted at the rolls")
	}
	end := l.LogEndOffset()
	res, err := p.AppendAsLeader(batch(10, 7, seq-10), -1)
	if err != nil || !res.Duplicate || l.LogEndOffset() != end {
		t.Fatalf("retry of the last batch: %+v, %v; log end %d, was %d", res, err, l.LogEndOffset(), end)
	}
}
