package replica

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// abortWorkload writes, on a log of small segments (each roll writes a
// producer snapshot), transactions of three producers with aborts in
// most segments: producer 7 ends one every three batches (abort, commit,
// ...), producer 8 keeps one open across many segments and snapshots and
// aborts it, producer 9 is idempotent only. The last batch is an ABORT
// marker of producer 7. It returns the aborted transactions as written
// (producer, first offset, marker offset; the last stable offsets are
// what the live index holds).
func abortWorkload(t *testing.T, p *Partition) []storage.AbortedTxn {
	t.Helper()
	seq := map[int64]int32{}
	appendTxn := func(pid int64, n int) int64 {
		t.Helper()
		res, err := p.AppendAsLeader(txnBatch(n, pid, seq[pid]), -1)
		if err != nil {
			t.Fatal(err)
		}
		seq[pid] += int32(n)
		return res.FirstOffset
	}
	var aborted []storage.AbortedTxn
	marker := func(pid, first int64, commit bool) {
		t.Helper()
		m, err := p.AppendMarker(pid, 0, commit, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !commit {
			aborted = append(aborted, storage.AbortedTxn{ProducerID: pid, FirstOffset: first, LastOffset: m.Offset})
		}
	}
	first7, first8 := int64(-1), int64(-1)
	for i := range 60 {
		if first7 < 0 {
			first7 = appendTxn(7, 3)
		} else {
			appendTxn(7, 3)
		}
		if i == 4 {
			first8 = appendTxn(8, 2)
		}
		if _, err := p.AppendAsLeader(batch(2, 9, seq[9]), -1); err != nil {
			t.Fatal(err)
		}
		seq[9] += 2
		if i%3 == 2 {
			marker(7, first7, (i/3)%2 == 1)
			first7 = -1
		}
		if i == 40 {
			marker(8, first8, false)
		}
	}
	marker(7, appendTxn(7, 1), false)
	return aborted
}

// openSmallLog opens dir's partition log with 1 KiB segments.
func openSmallLog(t *testing.T, dir string, opts storage.LogOptions) *storage.Log {
	t.Helper()
	cfg := storage.DefaultConfig()
	cfg.SegmentBytes = 1024
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.LogStartOffset = -1
	l, err := storage.OpenLog(vfs.Default, filepath.Join(dir, "orders-0"), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// files returns the names in the partition directory with suffix.
func files(t *testing.T, dir, suffix string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "orders-0"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, filepath.Join(dir, "orders-0", e.Name()))
		}
	}
	return out
}

func baseOf(path string) int64 {
	var base int64
	fmt.Sscanf(filepath.Base(path), "%d", &base)
	return base
}

// TestAbortedIndexRebuiltAfterCrash damages a partition's .txnindex files,
// producer snapshots and log tail as crashes and power losses do, reopens
// it, and checks that the aborted-transaction index, and so what a
// read_committed fetch is told to drop, is what the log says, in every
// segment, not only past the newest snapshot.
func TestAbortedIndexRebuiltAfterCrash(t *testing.T) {
	base := t.TempDir()
	l := openSmallLog(t, base, storage.LogOptions{})
	p := newLeader(t, l, Settings{MinInsyncReplicas: 1})
	written := abortWorkload(t, p)
	truth := l.TxnIndex().Aborted(0, l.LogEndOffset())
	bases := l.SegmentBaseOffsets()
	leo := l.LogEndOffset()
	if len(bases) < 8 || len(truth) < 8 || len(l.Snapshots().Offsets()) < 4 {
		t.Fatalf("%d segments, %d aborted transactions, %d snapshots: want a bigger workload", len(bases), len(truth), len(l.Snapshots().Offsets()))
	}
	// The live index is what was written.
	if len(truth) != len(written) {
		t.Fatalf("live index %+v, written %+v", truth, written)
	}
	for i, a := range truth {
		w := written[i]
		if a.ProducerID != w.ProducerID || a.FirstOffset != w.FirstOffset || a.LastOffset != w.LastOffset {
			t.Fatalf("live index entry %+v, written %+v", a, w)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mid := bases[len(bases)/2]
	lastAbort := truth[len(truth)-1]

	removeAll := func(paths []string) {
		t.Helper()
		for _, path := range paths {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
	}
	from := func(paths []string, offset int64) []string {
		return slices.DeleteFunc(paths, func(p string) bool { return baseOf(p) < offset })
	}
	for _, c := range []struct {
		name   string
		opts   storage.LogOptions
		damage func(t *testing.T, dir string)
		// torn: the last ABORT marker is gone with the log's torn tail.
		torn bool
	}{
		{"clean shutdown", storage.LogOptions{CleanShutdown: true}, func(*testing.T, string) {}, false},
		{"crash with nothing flushed, every .txnindex lost", storage.LogOptions{}, func(t *testing.T, dir string) {
			removeAll(files(t, dir, ".txnindex"))
		}, false},
		{"crash mid-log, the recovered segments' .txnindex lost", storage.LogOptions{RecoveryPoint: mid}, func(t *testing.T, dir string) {
			removeAll(from(files(t, dir, ".txnindex"), mid))
		}, false},
		{"crash mid-log, the recovered segments' .txnindex stale", storage.LogOptions{RecoveryPoint: mid}, func(t *testing.T, dir string) {
			// Entries of another history: shifted first offsets, and an
			// abort at an offset that holds a plain batch.
			for _, path := range from(files(t, dir, ".txnindex"), mid) {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				for i := 10; i+8 <= len(data); i += 34 {
					data[i+7]++
				}
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			stale := storage.AbortedTxn{ProducerID: 9, FirstOffset: mid, LastOffset: mid + 1, LastStableOffset: mid + 2}
			writeTxnIndex(t, filepath.Join(dir, "orders-0", fmt.Sprintf("%020d.txnindex", mid)), stale, true)
		}, false},
		{"crash, snapshots and .txnindex lost", storage.LogOptions{RecoveryPoint: mid}, func(t *testing.T, dir string) {
			removeAll(files(t, dir, ".txnindex"))
			removeAll(files(t, dir, ".snapshot"))
		}, false},
		{"power loss mid-log, the recovered segments' .txnindex and roll snapshots lost or empty", storage.LogOptions{RecoveryPoint: mid}, func(t *testing.T, dir string) {
			// What a power loss leaves of the snapshots a roll wrote and
			// its flush had not synced yet (ProducerSnapshots.WriteRoll): the replay
			// falls back to an older snapshot.
			removeAll(from(files(t, dir, ".txnindex"), mid))
			for i, path := range from(files(t, dir, ".snapshot"), mid) {
				if i%2 == 0 {
					if err := os.Truncate(path, 0); err != nil {
						t.Fatal(err)
					}
				} else {
					removeAll([]string{path})
				}
			}
		}, false},
		{"clean shutdown, a torn .txnindex in the first segments", storage.LogOptions{CleanShutdown: true}, func(t *testing.T, dir string) {
			path := files(t, dir, ".txnindex")[0]
			if err := os.Truncate(path, 20); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"crash with a torn log tail", storage.LogOptions{RecoveryPoint: bases[len(bases)-1]}, func(t *testing.T, dir string) {
			logs := files(t, dir, ".log")
			last := logs[len(logs)-1]
			info, err := os.Stat(last)
			if err != nil {
				t.Fatal(err)
			}
			// The marker batch is the last: cut into it.
			if err := os.Truncate(last, info.Size()-10); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, base, dir)
			c.damage(t, dir)
			l := openSmallLog(t, dir, c.opts)
			defer l.Close()
			p := newLeader(t, l, Settings{MinInsyncReplicas: 1})
			want := truth
			wantEnd, wantLSO := leo, leo
			if c.torn {
				want = truth[:len(truth)-1]
				wantEnd, wantLSO = lastAbort.LastOffset, lastAbort.FirstOffset
			}
			if got := l.LogEndOffset(); got != wantEnd {
				t.Fatalf("log end %d, want %d", got, wantEnd)
			}
			if got := l.TxnIndex().Aborted(0, wantEnd); !slices.Equal(got, want) {
				t.Fatalf("aborted transactions\n got %+v\nwant %+v", got, want)
			}
			// What a read_committed fetch of each segment is told.
			for _, b := range l.SegmentBaseOffsets() {
				res, err := p.Read(ReadRequest{Offset: b, CurrentLeaderEpoch: -1, MaxBytes: 1 << 20, ReadCommitted: true})
				if err != nil {
					t.Fatal(err)
				}
				var expect []storage.AbortedTxn
				for _, a := range want {
					if a.LastOffset >= b && a.FirstOffset < res.Limit {
						expect = append(expect, a)
					}
				}
				if !slices.Equal(res.AbortedTxns, expect) {
					t.Fatalf("read_committed from %d (limit %d): aborted %+v, want %+v", b, res.Limit, res.AbortedTxns, expect)
				}
			}
			if got := p.LastStableOffset(); got != wantLSO {
				t.Fatalf("last stable offset %d, want %d", got, wantLSO)
			}
			// The idempotent producer's state came back too: a retry of
			// its last batch (sequence 118, the workload's 60th) is a
			// duplicate, whichever snapshot the replay started from.
			if res, err := p.AppendAsLeader(batch(2, 9, 118), -1); err != nil || !res.Duplicate {
				t.Fatalf("retry of producer 9's last batch: %+v, %v; want a duplicate", res, err)
			}
			// The rebuilt index survives a clean reopen as it is.
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openSmallLog(t, dir, storage.LogOptions{CleanShutdown: true})
			if got := l.TxnIndex().Aborted(0, wantEnd); !slices.Equal(got, want) {
				t.Fatalf("reopened: %+v, want %+v", got, want)
			}
		})
	}
}

// writeTxnIndex appends (or, without add, writes) one entry in Kafka's
// .txnindex format.
func writeTxnIndex(t *testing.T, path string, a storage.AbortedTxn, add bool) {
	t.Helper()
	flags := os.O_CREATE | os.O_WRONLY
	if add {
		flags |= os.O_APPEND
	} else {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 2, 34)
	for _, v := range []int64{a.ProducerID, a.FirstOffset, a.LastOffset, a.LastStableOffset} {
		b = append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	if _, err := f.Write(b); err != nil && err != io.EOF {
		t.Fatal(err)
	}
}
