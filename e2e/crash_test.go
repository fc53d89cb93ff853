package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKillNineKeepsAcknowledgedRecords produces with acks=all and the
// default idempotent producer while the broker is killed with SIGKILL,
// restarts it, and checks that every acknowledged record is there, in
// order, exactly once.
func TestKillNineKeepsAcknowledgedRecords(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, dir, "log.segment.bytes=1048576")
	admin := client(t, p.addr)
	createTopic(t, admin, "orders", 3, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl := client(t, p.addr, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(time.Millisecond))

	// Producing stops, and records still buffered fail, when the broker is
	// killed.
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	produce := func(i int) {
		v := fmt.Sprintf("order-%06d", i)
		wg.Add(1)
		cl.Produce(prodCtx, &kgo.Record{Topic: "orders", Key: []byte(v), Value: []byte(v)}, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err == nil {
				mu.Lock()
				acked[string(r.Value)] = true
				mu.Unlock()
			}
		})
	}
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	for i := 0; i < 5000; i++ {
		produce(i)
	}
	wg.Wait()
	if ackedCount() != 5000 {
		t.Fatalf("%d of 5000 acknowledged before the kill", ackedCount())
	}
	// Keep producing, a few records at a time, and kill the broker in the
	// middle of it.
	stop := make(chan struct{})
	producing := make(chan struct{})
	go func() {
		defer close(producing)
		for i := 5000; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			produce(i)
			if i%50 == 0 {
				cl.Flush(prodCtx)
			}
		}
	}()
	for ackedCount() < 10000 {
		if ctx.Err() != nil {
			t.Fatalf("only %d acknowledged", ackedCount())
		}
		time.Sleep(time.Millisecond)
	}
	p.kill()
	close(stop)
	stopProducing()
	<-producing
	// The idempotent producer keeps the records that were in flight (it
	// cannot know whether they were written) and retries them once the
	// broker is back: the restarted broker must recognise what it already
	// has from its rebuilt producer state, and write no duplicate.
	p.restart()
	wg.Wait()
	if !strings.Contains(p.logs.String(), "recover") {
		t.Logf("restart logs:\n%s", p.logs)
	}
	consumer := client(t, p.addr, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	seen := map[string]int{}
	lastOffset := map[int32]int64{}
	idle := 0
	for idle < 3 {
		fs := consumer.PollFetches(ctxTimeout(t, time.Second))
		if len(fs.Records()) == 0 {
			idle++
			continue
		}
		idle = 0
		for _, r := range fs.Records() {
			seen[string(r.Value)]++
			if last, ok := lastOffset[r.Partition]; ok && r.Offset != last+1 {
				t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, last)
			}
			lastOffset[r.Partition] = r.Offset
		}
	}
	for v := range acked {
		if seen[v] == 0 {
			t.Fatalf("acknowledged record %s lost (%d acknowledged, %d read)", v, len(acked), len(seen))
		}
	}
	for v, n := range seen {
		if n > 1 {
			t.Fatalf("record %s read %d times", v, n)
		}
	}
	t.Logf("%d acknowledged, %d read back after SIGKILL", len(acked), len(seen))

	// A clean stop and start keeps everything too and skips recovery.
	p.stop()
	p.restart()
	consumer2 := client(t, p.addr, kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	n := 0
	for n < len(seen) {
		fs := consumer2.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("after clean restart read %d of %d", n, len(seen))
		}
		n += len(fs.Records())
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
