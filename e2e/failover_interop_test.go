package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// failoverRecords and failoverRate: a run of about 10 s, long enough for
// a leader's SIGKILL, its fencing (broker.session.timeout.ms=3000) and a
// new leader in the middle.
const (
	failoverRecords    = 20_000
	failoverRate       = 2_000
	failoverPartitions = 3
)

// killLeaderMidway waits until a quarter of the records are committed,
// then kills the leader of the topic's partition 0 with SIGKILL, waits for
// another leader, and starts the old one again.
func (c *cluster) killLeaderMidway(t *testing.T, ctx context.Context, topic string, done <-chan struct{}) {
	t.Helper()
	adm := kadm.NewClient(client(t, c.nodes[1].addr, kgo.SeedBrokers(c.seeds()...)))
	poll.UntilStatus(t, 60*time.Second, "a quarter of the records committed", func() (bool, string) {
		select {
		case <-done:
			t.Fatal("the producer finished before the leader was killed")
		default:
		}
		listed, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		var sum int64
		listed.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				sum += o.Offset
			}
		})
		return sum >= failoverRecords/4, strconv.FormatInt(sum, 10)
	})
	start := time.Now()
	node := c.bounce(topic, true)
	t.Logf("node %d (leader of %s/0) killed; another led it, and it was restarted, %v later", node, topic, time.Since(start).Round(time.Millisecond))
}

// TestIdempotentFailoverInterop: sarama's and librdkafka's idempotent
// producers (acks=all) through the SIGKILL of a partition leader on three
// real processes, RF 3, min.insync.replicas=2: every record is
// acknowledged, and each partition holds each record once, in order.
// franz-go's is TestReplicationBounces.
func TestIdempotentFailoverInterop(t *testing.T) {
	c := startCluster(t, 3, replicatedSets...)
	t.Run("sarama", func(t *testing.T) {
		const topic = "sarama-failover"
		c.createReplicated(1, topic, failoverPartitions)
		c.waitInSync(1, topic, failoverPartitions)
		ctx := ctxTimeout(t, 150*time.Second)
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V3_6_0_0
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
		cfg.Producer.Return.Successes = true
		cfg.Producer.Retry.Max = 1000
		cfg.Producer.Retry.Backoff = 50 * time.Millisecond
		cfg.Producer.Flush.Frequency = 5 * time.Millisecond
		cfg.Producer.Flush.MaxMessages = 100
		cfg.Metadata.Retry.Max = 1000
		cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
		producer, err := sarama.NewAsyncProducer(c.seeds(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		acks := newAckTracker(failoverRecords)
		var drained sync.WaitGroup
		drained.Add(2)
		go func() {
			defer drained.Done()
			for range producer.Successes() {
				acks.done(nil)
			}
		}()
		go func() {
			defer drained.Done()
			for e := range producer.Errors() {
				acks.done(e)
			}
		}()
		fed := make(chan struct{})
		go func() {
			defer close(fed)
			next := map[int32]int{}
			start := time.Now()
			for i := range failoverRecords {
				if ahead := time.Until(start.Add(time.Duration(i) * time.Second / failoverRate)); ahead > 0 {
					time.Sleep(ahead) // pacing the producer, not waiting for a condition
				}
				part := int32(i) % failoverPartitions
				msg := &sarama.ProducerMessage{Topic: topic, Partition: part, Value: sarama.ByteEncoder(sequencedValue(part, next[part]))}
				next[part]++
				select {
				case producer.Input() <- msg:
				case <-ctx.Done():
					return
				}
			}
		}()
		c.killLeaderMidway(t, ctx, topic, fed)
		<-fed
		acks.waitSettled(t, ctx)
		producer.AsyncClose()
		drained.Wait()
		acks.check(t)
		c.waitInSync(c.alive(-1), topic, failoverPartitions)
		checkExactlyOnce(t, readAll(t, ctx, c.nodes[c.alive(-1)].addr, topic), perPartition(failoverRecords, failoverPartitions))
	})
	t.Run("librdkafka", func(t *testing.T) {
		const python = "/usr/bin/python3"
		if out, err := exec.Command(python, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
			t.Skipf("librdkafka test needs %s with the confluent_kafka module: %v: %s", python, err, strings.TrimSpace(string(out)))
		}
		const topic = "rdkafka-failover"
		c.createReplicated(1, topic, failoverPartitions)
		c.waitInSync(1, topic, failoverPartitions)
		ctx := ctxTimeout(t, 150*time.Second)
		cmd := exec.CommandContext(ctx, python, "testdata/librdkafka_idempotent.py", strings.Join(c.seeds(), ","), topic,
			strconv.Itoa(failoverPartitions), strconv.Itoa(failoverRecords), strconv.Itoa(failoverRate))
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(exited) }()
		c.killLeaderMidway(t, ctx, topic, exited)
		<-exited
		if waitErr != nil {
			t.Fatalf("librdkafka producer: %v\n%s", waitErr, stderr.String())
		}
		var result struct {
			Acked  int      `json:"acked"`
			Failed int      `json:"failed"`
			Errors []string `json:"errors"`
			Fatal  string   `json:"fatal"`
		}
		if err := json.Unmarshal([]byte(stdout.String()), &result); err != nil {
			t.Fatalf("librdkafka producer printed %q: %v\n%s", stdout.String(), err, stderr.String())
		}
		if result.Acked != failoverRecords || result.Failed != 0 || result.Fatal != "" {
			t.Fatalf("librdkafka: %d of %d acknowledged, %d failed, fatal %q; errors %v\n%s", result.Acked, failoverRecords, result.Failed, result.Fatal, result.Errors, stderr.String())
		}
		c.waitInSync(c.alive(-1), topic, failoverPartitions)
		checkExactlyOnce(t, readAll(t, ctx, c.nodes[c.alive(-1)].addr, topic), perPartition(failoverRecords, failoverPartitions))
	})
}
