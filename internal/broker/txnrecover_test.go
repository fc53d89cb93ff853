package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/storage"
)

// TestTxnIndexRebuiltAfterCrash: a partition of many small segments holds
// committed and aborted transactions; the broker stops, and its data
// directory is left as a crash before any flush leaves it (no clean
// shutdown marker, no recovery point) with the .txnindex files lost (a
// power loss takes what was never synced), then also the producer
// snapshots. Restarted, a read_committed franz-go consumer reads exactly
// the committed records, in order.
func TestTxnIndexRebuiltAfterCrash(t *testing.T) {
	tb := startBroker(t, txnSettings)
	adm := newAdmin(t, tb.Addr())
	createTopic(t, adm, "txr", 1, map[string]*string{"segment.bytes": new("4096")})
	cl := newClient(t, tb.Addr(), kgo.TransactionalID("txr"), kgo.DefaultProduceTopic("txr"),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	var committed []string
	for i := range 24 {
		commit := i%3 != 1
		produceTxn(t, cl, "txr", fmt.Sprintf("t%02d-%v-%s", i, commit, strings.Repeat("x", 200)), 4, commit)
		if commit {
			for j := range 4 {
				committed = append(committed, fmt.Sprintf("t%02d-%v-%s-%d", i, commit, strings.Repeat("x", 200), j))
			}
		}
	}
	consumeCommittedValues(t, tb, committed)
	partDir := filepath.Join(tb.dir, "txr-0")
	if n := len(matching(t, partDir, ".log")); n < 8 {
		t.Fatalf("%d segments: want transactions over many", n)
	}
	if n := len(matching(t, partDir, ".txnindex")); n < 4 {
		t.Fatalf("%d .txnindex files: want aborts in many segments", n)
	}
	for _, lose := range [][]string{{".txnindex"}, {".txnindex", ".snapshot"}} {
		t.Run("lost "+strings.Join(lose, " and "), func(t *testing.T) {
			if err := tb.Close(); err != nil {
				t.Fatal(err)
			}
			remove(t, filepath.Join(tb.dir, storage.CleanShutdownFile), filepath.Join(tb.dir, storage.RecoveryPointCheckpointFile))
			for _, suffix := range lose {
				remove(t, matching(t, partDir, suffix)...)
			}
			tb.start(t, tb.Addr())
			consumeCommittedValues(t, tb, committed)
		})
	}
}

// consumeCommittedValues checks what a read_committed consumer reads from
// the start of the topic txr: want, in order.
func consumeCommittedValues(t *testing.T, tb *testBroker, want []string) {
	t.Helper()
	var got []string
	for _, r := range consumeCommitted(t, tb.Addr(), len(want), "txr") {
		got = append(got, string(r.Value))
	}
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("read_committed record %d is %.20q..., want %.20q...", i, got[i], want[i])
			}
		}
		t.Fatalf("read_committed read %d records, want %d", len(got), len(want))
	}
}

func matching(t *testing.T, dir, suffix string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

func remove(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}
