package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/vfs"
)

// TestKillNineRecoversFromCheckpoint: a strata serve process whose
// partition rolled several segments flushes them in the background and
// checkpoints the recovery point (log.flush.offset.checkpoint.interval.ms,
// short here); SIGKILLed and restarted, it recovers from the checkpointed
// point, the active segment, as its recovery line says, not from the log
// start, and every acknowledged record is there.
func TestKillNineRecoversFromCheckpoint(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	dir := t.TempDir()
	p := startProcess(t, dir, "log.flush.offset.checkpoint.interval.ms=100", "strata.log.level=debug")
	createTopic(t, client(t, p.addr), "rolls", 1, map[string]string{"segment.bytes": "16384"})
	cl := client(t, p.addr, kgo.DefaultProduceTopic("rolls"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	var want []string
	for i := range 200 {
		v := fmt.Sprintf("r%04d-%s", i, strings.Repeat("x", 1000))
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	partDir := filepath.Join(dir, "rolls-0")
	active := func() int64 {
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
		if len(bases) < 5 {
			t.Fatalf("%d segments: want several rolled ones", len(bases))
		}
		return slices.Max(bases)
	}()
	tp := storage.TopicPartition{Topic: "rolls", Partition: 0}
	poll.UntilStatus(t, 30*time.Second, "the recovery-point checkpoint to name the active segment", func() (bool, string) {
		points, _ := storage.ReadOffsetCheckpoint(vfs.Default, filepath.Join(dir, storage.RecoveryPointCheckpointFile))
		return points[tp] == active, fmt.Sprintf("it says %d, want %d", points[tp], active)
	})
	p.kill()
	p.restart()

	var line string
	for _, l := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(l, "topic=rolls ") && strings.Contains(l, "recovered_from_segment=") {
			line = l
		}
	}
	if w := fmt.Sprintf("recovery_point=%d recovered_from_segment=%d", active, active); !strings.Contains(line, w) {
		t.Fatalf("the restart's recovery line %q does not say %q", line, w)
	}
	t.Logf("recovery after SIGKILL: %s", line)

	rd := client(t, p.addr, kgo.ConsumeTopics("rolls"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < len(want) {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", len(got), len(want), ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if !slices.Equal(got, want) {
		t.Fatalf("read %d records after the restart, not the %d acknowledged in order", len(got), len(want))
	}
}
