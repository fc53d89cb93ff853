package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// TestTxnAbortedStayHiddenAfterSIGKILL: a strata serve process holding
// committed and aborted transactions over many segments is SIGKILLed, and
// the .txnindex files that recovery checks (every segment from the one
// holding the checkpointed recovery point: what a power loss may take,
// never synced) are lost; the second time the producer snapshots are
// lost too. Restarted, a read_committed franz-go consumer reads exactly
// the committed records, in order, and a read_uncommitted one all of
// them.
func TestTxnAbortedStayHiddenAfterSIGKILL(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	dir := t.TempDir()
	p := startProcess(t, dir, "transaction.state.log.num.partitions=3", "offsets.topic.num.partitions=3")
	createTopic(t, client(t, p.addr), "txk", 1, map[string]string{"segment.bytes": "4096"})
	var committed []string
	total := 0
	round := func(from, to int) {
		t.Helper()
		cl := client(t, p.addr, kgo.TransactionalID("txk"), kgo.DefaultProduceTopic("txk"),
			kgo.ProducerBatchCompression(kgo.NoCompression()))
		for i := from; i < to; i++ {
			commit := i%3 != 1
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for j := range 4 {
				v := fmt.Sprintf("t%03d-%d-%v-%s", i, j, commit, strings.Repeat("x", 200))
				if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if commit {
					committed = append(committed, v)
				}
				total++
			}
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
		}
		cl.Close()
	}
	partDir := filepath.Join(dir, "txk-0")
	for phase, lose := range [][]string{{".txnindex"}, {".txnindex", ".snapshot"}} {
		round(phase*24, phase*24+24)
		// Every marker is in: the consumer reads every committed record.
		checkCommitted(ctx, t, p.addr, committed)
		p.kill()
		lost := lostOnPowerLoss(t, dir, partDir, lose)
		if !slices.Contains(lose, ".snapshot") && lost == 0 {
			t.Fatal("no .txnindex file to lose: want aborts in the recovered segments")
		}
		p.restart()
		checkCommitted(ctx, t, p.addr, committed)
		if got := readTxk(ctx, t, p.addr, kgo.ReadUncommitted(), total); len(got) != total {
			t.Fatalf("read_uncommitted read %d records, want %d", len(got), total)
		}
	}
}

// lostOnPowerLoss removes the files with the suffixes of the segments a
// restart recovers (from the one holding the checkpointed recovery point
// on; all of them for a .snapshot) and returns how many .txnindex files
// went.
func lostOnPowerLoss(t *testing.T, dataDir, partDir string, suffixes []string) int {
	t.Helper()
	points, err := storage.ReadOffsetCheckpoint(vfs.Default, filepath.Join(dataDir, storage.RecoveryPointCheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(partDir)
	if err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for _, e := range entries {
		var base int64
		if n, _ := fmt.Sscanf(e.Name(), "%020d.log", &base); n == 1 && strings.HasSuffix(e.Name(), ".log") {
			bases = append(bases, base)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	if len(bases) < 8 {
		t.Fatalf("%d segments: want transactions over many", len(bases))
	}
	rp := points[storage.TopicPartition{Topic: "txk", Partition: 0}]
	first := bases[max(sort.Search(len(bases), func(i int) bool { return bases[i] > rp })-1, 0)]
	lostIndexes := 0
	for _, e := range entries {
		for _, suffix := range suffixes {
			var base int64
			if n, _ := fmt.Sscanf(e.Name(), "%020d", &base); n != 1 || !strings.HasSuffix(e.Name(), suffix) {
				continue
			}
			if suffix == ".txnindex" && base < first {
				continue
			}
			if err := os.Remove(filepath.Join(partDir, e.Name())); err != nil {
				t.Fatal(err)
			}
			if suffix == ".txnindex" {
				lostIndexes++
			}
		}
	}
	t.Logf("recovery point %d, recovery from segment %d of %d segments: %d .txnindex files lost", rp, first, len(bases), lostIndexes)
	return lostIndexes
}

// readTxk reads topic txk from its start with a fresh consumer at the
// isolation level until it has read n records, and returns them.
func readTxk(ctx context.Context, t *testing.T, addr string, iso kgo.IsolationLevel, n int) []string {
	t.Helper()
	cl := client(t, addr, kgo.ConsumeTopics("txk"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso), kgo.FetchMaxWait(200*time.Millisecond))
	defer cl.Close()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", len(got), n, ctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch error: %v", e.Err)
		}
		for _, r := range fs.Records() {
			got = append(got, string(r.Value))
		}
	}
	return got
}

// checkCommitted checks that a read_committed consumer reads exactly
// want, in order.
func checkCommitted(ctx context.Context, t *testing.T, addr string, want []string) {
	t.Helper()
	got := readTxk(ctx, t, addr, kgo.ReadCommitted(), len(want))
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("read_committed record %d is %.12q, want %.12q (an aborted record?)", i, got[i], want[i])
			}
		}
		t.Fatalf("read_committed read %d records, want %d", len(got), len(want))
	}
}
