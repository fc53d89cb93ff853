package replica

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// BenchmarkReopenAfterCrash opens a partition of 256 MiB (16 KiB batches,
// 1 MiB segments, a producer snapshot at each roll, an aborted
// transaction per segment) as after a crash, with the recovery point at
// the log start (nothing flushed), at the active segment, and where the
// storage Manager that wrote the log checkpointed it (its background
// work ran, with log.flush.offset.checkpoint.interval.ms at 10 ms, for up
// to 5 s after the last append; the sub-benchmark reports it as
// checkpointed_rp/active_base), and rebuilds the replica: storage
// recovery, the producers' replay and the aborted transactions' index.
func BenchmarkReopenAfterCrash(b *testing.B) {
	dir := b.TempDir()
	cfg := storage.DefaultConfig()
	cfg.SegmentBytes = 1 << 20
	open := func(opts storage.LogOptions) *storage.Log {
		opts.Logger, opts.LogStartOffset = slog.New(slog.DiscardHandler), -1
		l, err := storage.OpenLog(vfs.Default, filepath.Join(dir, "orders-0"), cfg, opts)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	m, err := storage.OpenManager(vfs.Default, dir, storage.ManagerOptions{Logger: slog.New(slog.DiscardHandler), Default: cfg,
		CheckpointInterval: 10 * time.Millisecond, DisableCleaner: true})
	if err != nil {
		b.Fatal(err)
	}
	m.Start()
	l, err := m.GetOrCreate("orders", 0, cfg)
	if err != nil {
		b.Fatal(err)
	}
	p, err := New("orders", 0, l, Settings{MinInsyncReplicas: 1}, testOptions())
	if err != nil {
		b.Fatal(err)
	}
	if err := p.BecomeLeader(State{Leader: 1, LeaderEpoch: 3, Replicas: []int32{1}, ISR: []int32{1}}); err != nil {
		b.Fatal(err)
	}
	recs := make([]record.Rec, 16)
	for i := range recs {
		recs[i] = record.Rec{Value: make([]byte, 1000)}
	}
	plain := record.Build(nil, recs)
	seq := int32(0)
	for l.Size() < 256<<20 {
		if _, err := p.AppendAsLeader(plain, -1); err != nil {
			b.Fatal(err)
		}
		if l.Size()%(1<<20) < 17<<10 {
			if _, err := p.AppendAsLeader(txnBatch(2, 7, seq), -1); err != nil {
				b.Fatal(err)
			}
			seq += 2
			if _, err := p.AppendMarker(7, 0, false, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	bases := l.SegmentBaseOffsets()
	active := bases[len(bases)-1]
	aborted := len(l.TxnIndex().Aborted(0, l.LogEndOffset()))
	tp := storage.TopicPartition{Topic: "orders", Partition: 0}
	checkpointed := int64(0)
	for deadline := time.Now().Add(5 * time.Second); checkpointed != active && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		points, _ := storage.ReadOffsetCheckpoint(vfs.Default, filepath.Join(dir, storage.RecoveryPointCheckpointFile))
		checkpointed = points[tp]
	}
	// The log first: the Manager's Close would flush it whole. Closing the
	// Manager then only stops its background work (its error is about the
	// closed log).
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	m.Close()
	for _, rp := range []struct {
		name  string
		point int64
	}{{"recovery_point=log_start", 0}, {"recovery_point=active_segment", active}, {"recovery_point=checkpointed", checkpointed}} {
		b.Run(rp.name, func(b *testing.B) {
			if rp.name == "recovery_point=checkpointed" {
				b.ReportMetric(float64(rp.point)/float64(active), "checkpointed_rp/active_base")
			}
			for range b.N {
				l := open(storage.LogOptions{RecoveryPoint: rp.point})
				if _, err := New("orders", 0, l, Settings{MinInsyncReplicas: 1}, testOptions()); err != nil {
					b.Fatal(err)
				}
				if got := len(l.TxnIndex().Aborted(0, l.LogEndOffset())); got != aborted {
					b.Fatalf("%d aborted transactions, want %d", got, aborted)
				}
				l.Close()
			}
		})
	}
}
