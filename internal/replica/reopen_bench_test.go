package replica

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// BenchmarkReopenAfterCrash opens a partition of 256 MiB (16 KiB batches,
// 1 MiB segments, a producer snapshot at each roll, an aborted
// transaction per segment) as after a crash, with the recovery point at
// the log start (nothing flushed: Strata's default) and at the active
// segment (what a flush at each roll would leave), and rebuilds the
// replica: storage recovery, the producers' replay and the aborted
// transactions' index.
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
	l := open(storage.LogOptions{})
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
	aborted := len(l.AbortedTxns(0, l.LogEndOffset()))
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	for _, rp := range []struct {
		name  string
		point int64
	}{{"recovery_point=log_start", 0}, {"recovery_point=active_segment", bases[len(bases)-1]}} {
		b.Run(rp.name, func(b *testing.B) {
			for range b.N {
				l := open(storage.LogOptions{RecoveryPoint: rp.point})
				if _, err := New("orders", 0, l, Settings{MinInsyncReplicas: 1}, testOptions()); err != nil {
					b.Fatal(err)
				}
				if got := len(l.AbortedTxns(0, l.LogEndOffset())); got != aborted {
					b.Fatalf("%d aborted transactions, want %d", got, aborted)
				}
				l.Close()
			}
		})
	}
}
