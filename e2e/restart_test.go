package e2e

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKillNineWithManyPartitions kills a broker holding a few hundred
// partitions, a few with records, twice (once with records unflushed,
// once right after a restart) and checks that each restart keeps every
// acknowledged record and calls nothing corrupt: no "rebuilding index" or
// any other warning for logs a kill left as they were.
func TestKillNineWithManyPartitions(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, dir)
	cl := client(t, p.addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond))
	ctx := ctxTimeout(t, 120*time.Second)
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"quiet-a", "quiet-b", "busy"} {
		createTopic(t, cl, topic, 100, nil)
	}
	// 20 KiB in each of five partitions: several index entries each.
	produce := func(n int) {
		for i := range n {
			for part := range int32(5) {
				r := &kgo.Record{Topic: "busy", Partition: part, Value: bytes.Repeat([]byte{byte(i)}, 1000)}
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	produce(20)
	check := func(want int64) {
		t.Helper()
		ends, err := adm.ListEndOffsets(ctx, "busy", "quiet-a", "quiet-b")
		if err != nil {
			t.Fatal(err)
		}
		ends.Each(func(o kadm.ListedOffset) {
			expect := int64(0)
			if o.Topic == "busy" && o.Partition < 5 {
				expect = want
			}
			if o.Err != nil || o.Offset != expect {
				t.Errorf("%s-%d: end offset %d (%v), want %d", o.Topic, o.Partition, o.Offset, o.Err, expect)
			}
		})
	}
	noWarnings := func(phase string) {
		t.Helper()
		for _, line := range strings.Split(p.logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "rebuilding index") {
				t.Errorf("%s: %s", phase, line)
			}
		}
	}

	p.kill() // records unflushed: in the page cache only
	p.restart()
	noWarnings("restart after a kill with records unflushed")
	check(20)
	produce(5)

	p.stop()
	p.restart()
	p.kill() // nothing written since the clean restart
	p.restart()
	noWarnings("restart after a kill with everything flushed")
	check(25)
}
