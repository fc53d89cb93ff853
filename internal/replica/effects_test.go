package replica

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// manualClock is a clock tests move by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestShrinkThroughTheController drives the partition's edge: a follower
// that never fetches leaves the ISR at the tick after
// replica.lag.time.max.ms, the change goes to the controller (retried once
// after a lost answer), and the acks=all produce waiting for the follower
// is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND once the ISR is the leader
// alone.
func TestShrinkThroughTheController(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	changes := make(chan ISRChange, 4)
	calls := 0
	opts := testOptions()
	opts.Now = clock.Now
	opts.AlterPartition = func(_ context.Context, topic string, partition int32, c ISRChange) (int32, error) {
		calls++
		changes <- c
		if calls == 1 {
			return 0, errors.New("connection reset") // retried
		}
		return c.PartitionEpoch + 1, nil
	}
	var shrinks, expands sync.WaitGroup // counted as the metrics count
	shrinks.Add(1)
	opts.ISRChanged = func(shrink bool) {
		if shrink {
			shrinks.Done() // a second call panics
		} else {
			expands.Done()
		}
	}
	p, err := New("orders", 0, openLog(t, t.TempDir()), Settings{MinInsyncReplicas: 2}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.BecomeLeader(State{Leader: 1, LeaderEpoch: 1, PartitionEpoch: 3, Replicas: []int32{1, 2}, ISR: []int32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	res, err := p.AppendAsLeader(batch(3, -1, 0), -1)
	if err != nil || !res.Pending {
		t.Fatalf("append: %+v, %v", res, err)
	}
	acked := make(chan error, 1)
	go func() { acked <- p.AwaitAcks(context.Background(), res.LastOffset+1, -1) }()

	p.Tick()
	select {
	case c := <-changes:
		t.Fatalf("proposed %+v before the follower fell behind", c)
	default:
	}
	clock.Advance(31 * time.Second)
	p.Tick()
	for i := range 2 {
		select {
		case c := <-changes:
			if !c.Shrink || !slices.Equal(c.ISR, []int32{1}) || c.LeaderEpoch != 1 || c.PartitionEpoch != 3 {
				t.Fatalf("proposal %d: %+v", i, c)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("proposal %d never came", i)
		}
	}
	select {
	case err := <-acked:
		if !errors.Is(err, kerr.NotEnoughReplicasAfterAppend) {
			t.Fatalf("acks=all after the shrink: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("acks=all not answered after the shrink")
	}
	// Below min.insync.replicas the high watermark stays (KIP-966).
	if isr := p.ISR(); !slices.Equal(isr, []int32{1}) || p.HighWatermark() != 0 {
		t.Fatalf("ISR %v, high watermark %d", isr, p.HighWatermark())
	}
	shrinks.Wait() // counted once, for the committed change only
	if r := p.Replication(); !r.Leader || !r.UnderReplicated() || !r.UnderMinISR() || r.FetcherLag != -1 {
		t.Fatalf("replication after the shrink: %+v", r)
	}
	if _, err := p.AppendAsLeader(batch(1, -1, 0), -1); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all below min.insync.replicas: %v", err)
	}
}
