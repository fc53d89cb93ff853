package strata_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/verify"
)

// TestClusterDiskFaults fails the disk of partition 0's leader while the
// verify workload (idempotent acks=all producers, consumers, a final read)
// runs: the node takes its logs offline, asks to be fenced, its
// leaderships move to the other in-sync replicas, it stops (as Kafka halts
// when its last log directory fails), and the checker finds nothing
// acknowledged lost, duplicated or inconsistent.
func TestClusterDiskFaults(t *testing.T) {
	for _, fault := range []strata.DiskFault{strata.DiskFull, strata.SyncFails} {
		t.Run(fmt.Sprint(fault), func(t *testing.T) {
			// Every append synced, so that a failing fsync shows at once.
			c := startCluster(t, map[string]string{"log.flush.interval.messages": "1", "group.initial.rebalance.delay.ms": "0"})
			topic := "disk"
			ready := &readyWriter{match: "replication factor", ready: make(chan struct{})}
			if testing.Verbose() {
				ready.tee = os.Stderr
			}
			cfg := verify.Config{
				Brokers: c.Addrs(), Topic: topic, Partitions: 3, ReplicationFactor: 3,
				Producers: 2, AssignedConsumers: 1, GroupConsumers: 1,
				Duration: time.Hour, Rate: 200, Idempotent: true, Acks: kgo.AllISRAcks(),
				DeliveryTimeout: time.Minute, DrainTimeout: 30 * time.Second, KeepTopic: true,
				Progress: ready,
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			type outcome struct {
				res *verify.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				_, res, err := verify.Verify(ctx, cfg)
				done <- outcome{res, err}
			}()
			select {
			case <-ready.ready:
			case o := <-done:
				t.Fatalf("the workload ended before it started: %v", o.err)
			}
			<-time.After(time.Second)
			lctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			victim, err := c.Leader(lctx, topic, 0)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := c.FailDisk(victim, fault); err != nil {
				t.Fatal(err)
			}
			poll.UntilStatus(t, 60*time.Second, "partition 0's leadership to move off the failed disk", func() (bool, string) {
				l, err := c.Leader(lctx, topic, 0)
				return err == nil && l >= 0 && l != victim, fmt.Sprint(l, err)
			})
			moved := time.Since(start)
			poll.UntilStatus(t, 60*time.Second, "the node with the failed disk to stop", func() (bool, string) {
				return !c.Running(victim), "running"
			})
			<-time.After(2 * time.Second)
			stop()
			o := <-done
			if o.err != nil {
				t.Fatal(o.err)
			}
			var report bytes.Buffer
			o.res.WriteText(&report)
			t.Logf("%v on node %d, leader of partition 0; leadership moved %v later\n%s", fault, victim, moved.Round(time.Millisecond), report.String())
			if !o.res.Valid || o.res.Stats.Acknowledged == 0 {
				t.Fatalf("%s (%d acknowledged)", o.res.Summary(), o.res.Stats.Acknowledged)
			}
		})
	}
}

// readyWriter takes the workload's progress lines and closes ready at the
// first that contains match.
type readyWriter struct {
	match string
	tee   io.Writer
	once  sync.Once
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if w.tee != nil {
		w.tee.Write(p)
	}
	if bytes.Contains(p, []byte(w.match)) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}
