package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestClientsOnAClusterOfThree runs franz-go, kcat (librdkafka) and sarama
// against three real processes, as a user's services would: each lists
// the three brokers, produces to every partition of a replicated topic
// whose partitions are led by all three nodes, and reads everything back;
// then consumer groups whose coordinators are on three different nodes
// each read the topic and commit, and sarama does the same in a group of
// its own.
func TestClientsOnAClusterOfThree(t *testing.T) {
	c := startCluster(t, 3, "broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500")
	const (
		topic      = "clients"
		partitions = 6
		perClient  = 10 // records per partition from each client
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm := c.admin(1)
	if resp, err := adm.CreateTopic(ctx, partitions, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic); err != nil || resp.Err != nil {
		t.Fatalf("creating %s: %v %v", topic, err, resp.Err)
	}
	poll.UntilStatus(t, 30*time.Second, "the partitions led by all three nodes", func() (bool, string) {
		led := map[int32]bool{}
		for _, l := range c.leaders(2, topic) {
			led[l] = true
		}
		return len(led) == 3 && !led[-1], fmt.Sprint(c.leaders(2, topic))
	})
	seeds := []string{c.nodes[1].addr, c.nodes[2].addr, c.nodes[3].addr}

	// franz-go.
	m, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Brokers.NodeIDs(); len(got) != 3 {
		t.Fatalf("franz-go lists brokers %v", got)
	}
	cl := client(t, c.nodes[2].addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range int32(partitions) {
		for i := range perClient {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "kgo-%d-%d", p, i)}).FirstErr(); err != nil {
				t.Fatalf("franz-go producing to partition %d: %v", p, err)
			}
		}
	}

	// kcat, through librdkafka: the brokers it lists, then a producer
	// per partition (acks=all, librdkafka's default).
	kcatBrokers(t, ctx, c.nodes[3].addr)
	for p := range partitions {
		var in bytes.Buffer
		for i := range perClient {
			fmt.Fprintf(&in, "kcat-%d-%d\n", p, i)
		}
		cmd := exec.CommandContext(ctx, "kcat", "-b", c.nodes[3].addr, "-P", "-t", topic, "-p", fmt.Sprint(p))
		cmd.Stdin = &in
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat producing to partition %d: %v\n%s", p, err, out)
		}
	}

	// sarama.
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Return.Successes = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc, err := sarama.NewClient([]string{c.nodes[1].addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if got := len(sc.Brokers()); got != 3 {
		t.Fatalf("sarama lists %d brokers", got)
	}
	sp, err := sarama.NewSyncProducerFromClient(sc)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(partitions) {
		for i := range perClient {
			if _, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: p,
				Value: sarama.StringEncoder(fmt.Sprintf("sarama-%d-%d", p, i))}); err != nil {
				t.Fatalf("sarama producing to partition %d: %v", p, err)
			}
		}
	}
	sp.Close()

	// Everyone reads everything: 3 clients × 6 partitions × 10 records,
	// each partition in the order its producers wrote it.
	const total = 3 * partitions * perClient
	want := map[string]bool{}
	for _, who := range []string{"kgo", "kcat", "sarama"} {
		for p := range partitions {
			for i := range perClient {
				want[fmt.Sprintf("%s-%d-%d", who, p, i)] = true
			}
		}
	}
	check := func(reader string, got map[int32][]string) {
		t.Helper()
		n := 0
		for p, values := range got {
			n += len(values)
			last := map[string]int{}
			for _, v := range values {
				if !want[v] {
					t.Fatalf("%s read %q from partition %d, never written", reader, v, p)
				}
				var who string
				var vp, i int
				fmt.Sscanf(strings.ReplaceAll(v, "-", " "), "%s %d %d", &who, &vp, &i)
				if int32(vp) != p {
					t.Fatalf("%s read %q from partition %d", reader, v, p)
				}
				if prev, ok := last[who]; ok && i != prev+1 {
					t.Fatalf("%s read %s's records of partition %d out of order: %d after %d", reader, who, p, i, prev)
				}
				last[who] = i
			}
		}
		if n != total {
			t.Fatalf("%s read %d records, want %d", reader, n, total)
		}
	}
	check("franz-go", consumeAll(t, ctx, seeds, topic, "", total))
	check("kcat", kcatConsume(t, ctx, c.nodes[2].addr, topic, total))

	// Groups coordinated by each of the three nodes.
	groups := groupsOnEachNode(t, ctx, adm)
	for node, group := range groups {
		check(fmt.Sprintf("franz-go in group %s (coordinator %d)", group, node), consumeAll(t, ctx, seeds, topic, group, total))
		poll.UntilStatus(t, 30*time.Second, "group "+group+"'s offsets committed at the end", func() (bool, string) {
			offsets, err := kadm.NewClient(client(t, seeds[int(node)%3])).FetchOffsets(ctx, group)
			if err != nil {
				return false, err.Error()
			}
			sum := int64(0)
			offsets.Each(func(o kadm.OffsetResponse) { sum += o.At })
			return sum == total, fmt.Sprintf("offsets sum to %d", sum)
		})
	}
	// sarama in a group of its own, coordinated wherever it hashes.
	check("sarama in a group", saramaGroupConsume(t, ctx, seeds, cfg, topic, "sarama-group", total))
}

// kcatBrokers checks that kcat -L lists three brokers.
func kcatBrokers(t *testing.T, ctx context.Context, seed string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "kcat", "-b", seed, "-L", "-J").Output()
	if err != nil {
		t.Fatalf("kcat -L: %v", err)
	}
	var md struct {
		Brokers []struct {
			ID int32 `json:"id"`
		} `json:"brokers"`
	}
	if err := json.Unmarshal(out, &md); err != nil {
		t.Fatalf("kcat -L -J: %v\n%s", err, out)
	}
	if len(md.Brokers) != 3 {
		t.Fatalf("kcat lists %d brokers: %s", len(md.Brokers), out)
	}
}

// kcatConsume reads the topic from the start to its end with kcat.
func kcatConsume(t *testing.T, ctx context.Context, seed, topic string, total int) map[int32][]string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "kcat", "-b", seed, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
		"-f", "%p %s\n").Output()
	if err != nil {
		t.Fatalf("kcat -C: %v", err)
	}
	got := map[int32][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var p int32
		var v string
		if _, err := fmt.Sscanf(sc.Text(), "%d %s", &p, &v); err != nil {
			t.Fatalf("kcat printed %q", sc.Text())
		}
		got[p] = append(got[p], v)
	}
	return got
}

// consumeAll reads total records of topic with franz-go, in group (and
// committing) when it is not empty.
func consumeAll(t *testing.T, ctx context.Context, seeds []string, topic, group string, total int) map[int32][]string {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if group != "" {
		opts = append(opts, kgo.ConsumerGroup(group), kgo.DisableAutoCommit())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[int32][]string{}
	n := 0
	for n < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s (group %q): %v", n, total, topic, group, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetching %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			n++
		})
	}
	if group != "" {
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("group %s committing: %v", group, err)
		}
	}
	return got
}

// groupsOnEachNode finds, among names g-0, g-1, ..., a group coordinated
// by each of the three nodes.
func groupsOnEachNode(t *testing.T, ctx context.Context, adm *kadm.Client) map[int32]string {
	t.Helper()
	var names []string
	for i := range 60 {
		names = append(names, fmt.Sprintf("g-%d", i))
	}
	out := map[int32]string{}
	poll.UntilStatus(t, 60*time.Second, "groups coordinated by each node", func() (bool, string) {
		clear(out)
		for _, r := range adm.FindGroupCoordinators(ctx, names...) {
			if r.Err != nil {
				return false, fmt.Sprintf("%s: %v", r.Name, r.Err)
			}
			if _, ok := out[r.NodeID]; !ok {
				out[r.NodeID] = r.Name
			}
		}
		nodes := make([]int32, 0, len(out))
		for n := range out {
			nodes = append(nodes, n)
		}
		slices.Sort(nodes)
		return slices.Equal(nodes, []int32{1, 2, 3}), fmt.Sprint(out)
	})
	return out
}

// saramaGroupConsume reads total records of topic in a sarama consumer
// group, marking and committing each.
func saramaGroupConsume(t *testing.T, ctx context.Context, seeds []string, cfg *sarama.Config, topic, group string, total int) map[int32][]string {
	t.Helper()
	g, err := sarama.NewConsumerGroup(seeds, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	h := &collectHandler{want: total, got: map[int32][]string{}, done: make(chan struct{})}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		for gctx.Err() == nil {
			if err := g.Consume(gctx, []string{topic}, h); err != nil && gctx.Err() == nil {
				errs <- err
				return
			}
		}
	}()
	select {
	case <-h.done:
	case err := <-errs:
		t.Fatalf("sarama group %s: %v", group, err)
	case <-ctx.Done():
		t.Fatalf("sarama group %s read %d of %d records", group, h.count(), total)
	}
	return h.snapshot()
}

type collectHandler struct {
	mu   sync.Mutex
	want int
	n    int
	got  map[int32][]string
	done chan struct{}
}

func (h *collectHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *collectHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *collectHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		h.mu.Lock()
		h.got[msg.Partition] = append(h.got[msg.Partition], string(msg.Value))
		h.n++
		if h.n == h.want {
			close(h.done)
		}
		h.mu.Unlock()
		s.MarkMessage(msg, "")
	}
	return nil
}

func (h *collectHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *collectHandler) snapshot() map[int32][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int32][]string, len(h.got))
	for p, v := range h.got {
		out[p] = slices.Clone(v)
	}
	return out
}
