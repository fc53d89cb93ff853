package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/testutil/faultproxy"
)

// The idempotent producer tests of issue 5: real clients produce numbered
// records to several partitions through a proxy that loses produce
// responses after the broker appended (so the clients retry batches the
// broker already has), and, in one test, while the broker is killed with
// SIGKILL and restarted. Every partition must then hold exactly the
// records produced, each once, in the order produced.
//
// Values are "<partition>:<sequence>", the sequence counting the records
// of that partition from 0.

// idempotenceRecords is how many records the franz-go tests produce.
const idempotenceRecords = 100_000

const idempotencePartitions = 4

// startProxied starts a broker behind a fault proxy that drops produce
// responses at dropRate; the broker advertises the proxy, so clients reach
// it only through the proxy.
func startProxied(t *testing.T, seed uint64, dropRate float64, sets ...string) (*process, *faultproxy.Proxy) {
	t.Helper()
	proxy, err := faultproxy.Listen(faultproxy.Options{Seed: seed, DropRate: dropRate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	p := startProcess(t, t.TempDir(), append([]string{"advertised.listeners=PLAINTEXT://" + proxy.Addr()}, sets...)...)
	proxy.SetTarget(p.addr)
	return p, proxy
}

func sequencedValue(partition int32, seq int) []byte {
	return []byte(fmt.Sprintf("%d:%d", partition, seq))
}

// ackTracker counts acknowledgements and errors of a produce run of n
// records, and signals when the acknowledgements reach chosen milestones
// and when every record is settled (acknowledged or failed).
type ackTracker struct {
	n          int64
	acked      atomic.Int64
	settledN   atomic.Int64
	settled    chan struct{}
	milestones map[int64]chan struct{} // read-only once producing starts

	mu     sync.Mutex
	errs   []error
	failed int
}

func newAckTracker(n int, milestones ...int64) *ackTracker {
	a := &ackTracker{n: int64(n), settled: make(chan struct{}), milestones: map[int64]chan struct{}{}}
	for _, m := range milestones {
		a.milestones[m] = make(chan struct{})
	}
	return a
}

func (a *ackTracker) done(err error) {
	if err != nil {
		a.mu.Lock()
		a.failed++
		if len(a.errs) < 10 {
			a.errs = append(a.errs, err)
		}
		a.mu.Unlock()
	} else if ch, ok := a.milestones[a.acked.Add(1)]; ok {
		close(ch)
	}
	if a.settledN.Add(1) == a.n {
		close(a.settled)
	}
}

// wait blocks until milestone m is reached.
func (a *ackTracker) wait(t *testing.T, ctx context.Context, m int64) {
	t.Helper()
	select {
	case <-a.milestones[m]:
	case <-ctx.Done():
		t.Fatalf("only %d records acknowledged, waiting for %d", a.acked.Load(), m)
	}
}

// waitSettled blocks until every record is acknowledged or failed.
func (a *ackTracker) waitSettled(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-a.settled:
	case <-ctx.Done():
		t.Fatalf("only %d of %d records settled", a.settledN.Load(), a.n)
	}
}

// check fails the test unless every record was acknowledged.
func (a *ackTracker) check(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed > 0 || a.acked.Load() != a.n {
		t.Fatalf("%d of %d records acknowledged, %d failed; first errors: %v", a.acked.Load(), a.n, a.failed, a.errs)
	}
}

// perPartition is how many of n records, dealt round-robin, go to each of
// the partitions.
func perPartition(n int, partitions int32) map[int32]int {
	out := map[int32]int{}
	for i := range n {
		out[int32(i)%partitions]++
	}
	return out
}

// produceSequenced produces n records with franz-go, dealt round-robin
// over the partitions, and waits for all of them to be acknowledged or
// failed.
func produceSequenced(ctx context.Context, cl *kgo.Client, topic string, partitions int32, n int, acks *ackTracker) error {
	next := map[int32]int{}
	for i := range n {
		part := int32(i) % partitions
		r := &kgo.Record{Topic: topic, Partition: part, Value: sequencedValue(part, next[part])}
		next[part]++
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) { acks.done(err) })
	}
	return cl.Flush(ctx)
}

// franzIdempotentProducer is franz-go's default producer (idempotent,
// acks=all, unlimited retries) with records placed by partition number, and
// three changes that keep the tests short without changing what is tested:
// batches are capped at 1 KiB (about 80 records), so that the records take
// hundreds of produce requests (with 1 MB batches they take about 15, too
// few for faults); the retry backoff is 10 ms, not 250 ms and up; and
// metadata may be refreshed every 100 ms, not every 5 s (franz-go refreshes
// it when a new connection fails, which the proxy and the kills make
// happen). The client's log (info, or debug with STRATA_KGO_DEBUG set) is
// printed if the test fails.
func franzIdempotentProducer(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	level := kgo.LogLevelInfo
	if os.Getenv("STRATA_KGO_DEBUG") != "" {
		level = kgo.LogLevelDebug
	}
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("franz-go log:\n%s", logs)
		}
	})
	return client(t, addr, append([]kgo.Opt{
		kgo.WithLogger(kgo.BasicLogger(logs, level, func() string { return time.Now().Format("15:04:05.000 ") })),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1 << 10),
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }),
		kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)...)
}

// dumpStacks makes the broker print its goroutines (SIGQUIT) and returns
// its log, for a test that found it stuck.
func dumpStacks(p *process) string {
	p.cmd.Process.Signal(syscall.SIGQUIT)
	p.cmd.Wait()
	return p.logs.String()
}

// readAll reads every partition of topic from its start to its end offset.
func readAll(t *testing.T, ctx context.Context, addr, topic string) map[int32][]*kgo.Record {
	t.Helper()
	want := map[int32]int64{}
	starts := map[int32]kgo.Offset{}
	for p, end := range endOffsets(t, ctx, addr, topic) {
		if end > 0 {
			want[p] = end
			starts[p] = kgo.NewOffset().AtStart()
		}
	}
	out := map[int32][]*kgo.Record{}
	if len(want) == 0 {
		return out
	}
	cl := client(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: starts}), kgo.FetchMaxWait(100*time.Millisecond))
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s back: partitions %v not read to their end: %v", topic, want, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetching %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r)
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// checkExactlyOnce fails the test unless partition p holds exactly the
// records p:0 … p:(produced[p]-1), in that order, at consecutive offsets.
func checkExactlyOnce(t *testing.T, got map[int32][]*kgo.Record, produced map[int32]int) {
	t.Helper()
	for p, n := range produced {
		recs := got[p]
		seen := map[string]int64{}
		for i, r := range recs {
			if prev, ok := seen[string(r.Value)]; ok {
				t.Fatalf("partition %d: %s at offset %d is a duplicate of offset %d", p, r.Value, r.Offset, prev)
			}
			seen[string(r.Value)] = r.Offset
			if want := sequencedValue(p, i); string(r.Value) != string(want) {
				t.Fatalf("partition %d: record %d (offset %d) is %s, want %s: a gap or a reordering", p, i, r.Offset, r.Value, want)
			}
			if i > 0 && r.Offset != recs[i-1].Offset+1 {
				t.Fatalf("partition %d: offset %d after %d", p, r.Offset, recs[i-1].Offset)
			}
		}
		if len(recs) != n {
			t.Fatalf("partition %d holds %d records, %d were produced", p, len(recs), n)
		}
	}
	for p, recs := range got {
		if _, ok := produced[p]; !ok {
			t.Fatalf("partition %d holds %d records, none were produced there", p, len(recs))
		}
	}
}

// endOffsets returns the end offset of each partition of topic.
func endOffsets(t *testing.T, ctx context.Context, addr, topic string) map[int32]int64 {
	t.Helper()
	listed, err := kadm.NewClient(client(t, addr)).ListEndOffsets(ctx, topic)
	if err != nil || listed.Error() != nil {
		t.Fatalf("listing end offsets of %s: %v %v", topic, err, listed.Error())
	}
	out := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// snapshotOffsets lists the producer snapshots (<offset>.snapshot) in a
// partition's directory, ascending.
func snapshotOffsets(t *testing.T, dataDir, topic string, partition int32) []int64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dataDir, fmt.Sprintf("%s-%d", topic, partition), "*.snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, name := range names { // Glob sorts, and the names are zero-padded
		off, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(name), ".snapshot"), 10, 64)
		if err != nil {
			t.Fatalf("snapshot file %s: %v", name, err)
		}
		out = append(out, off)
	}
	return out
}

// describeProducers returns each partition's active producers.
func describeProducers(t *testing.T, ctx context.Context, addr, topic string, partitions int32) map[int32][]kadm.DescribedProducer {
	t.Helper()
	var set kadm.TopicsSet
	for p := range partitions {
		set.Add(topic, p)
	}
	described, err := kadm.NewClient(client(t, addr)).DescribeProducers(ctx, set)
	if err != nil {
		t.Fatalf("DescribeProducers: %v", err)
	}
	out := map[int32][]kadm.DescribedProducer{}
	described.EachPartition(func(p kadm.DescribedProducersPartition) {
		if p.Err != nil {
			t.Fatalf("DescribeProducers %s/%d: %v", topic, p.Partition, p.Err)
		}
		out[p.Partition] = p.ActiveProducers.Sorted()
	})
	return out
}

// checkProducerState fails the test unless each partition knows exactly
// one producer, id with epoch 0, whose last sequence is that of the last
// record produced there.
func checkProducerState(t *testing.T, ctx context.Context, addr, topic string, id int64, produced map[int32]int) {
	t.Helper()
	got := describeProducers(t, ctx, addr, topic, int32(len(produced)))
	for p, n := range produced {
		ps := got[p]
		if len(ps) != 1 || ps[0].ProducerID != id || ps[0].ProducerEpoch != 0 || ps[0].LastSequence != int32(n-1) {
			t.Fatalf("partition %d: DescribeProducers shows %+v, want producer %d epoch 0 at sequence %d", p, ps, id, n-1)
		}
	}
}

// TestIdempotentProducerDroppedResponses: franz-go's default idempotent
// producer writes 100,000 records to four partitions through a proxy that
// drops 5% of produce responses after the broker appended the batch. The
// client retries each of those batches on a new connection; the broker
// must answer them from its producer state without appending them again.
func TestIdempotentProducerDroppedResponses(t *testing.T) {
	ctx := ctxTimeout(t, 90*time.Second)
	p, proxy := startProxied(t, 1, 0.05, "log.segment.bytes=32768")
	createTopic(t, client(t, proxy.Addr()), "idem", idempotencePartitions, nil)

	cl := franzIdempotentProducer(t, proxy.Addr())
	acks := newAckTracker(idempotenceRecords)
	start := time.Now()
	if err := produceSequenced(ctx, cl, "idem", idempotencePartitions, idempotenceRecords, acks); err != nil {
		t.Fatalf("producing: %v; %d acknowledged; broker log and stacks:\n%s", err, acks.acked.Load(), dumpStacks(p))
	}
	acks.check(t)
	t.Logf("%d records in %v; %d of %d produce responses dropped", idempotenceRecords, time.Since(start).Round(time.Millisecond), proxy.Dropped(), proxy.Eligible())
	if proxy.Dropped() < 5 {
		t.Fatalf("only %d produce responses dropped: the test did not force retries", proxy.Dropped())
	}
	proxy.SetDropRate(0)

	produced := perPartition(idempotenceRecords, idempotencePartitions)
	checkExactlyOnce(t, readAll(t, ctx, proxy.Addr(), "idem"), produced)
	id, _, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkProducerState(t, ctx, p.addr, "idem", id, produced)
}

// TestIdempotentProducerKillNine: the same, with the broker killed by
// SIGKILL and restarted three times while franz-go produces (responses still
// dropped, less often). The producer keeps every unacknowledged batch and
// retries it against the restarted broker, which must recognise the ones
// it already had from producer state rebuilt from its snapshots and log:
// every record is acknowledged and stored once, in order.
//
// Then, quiescent, after another SIGKILL DescribeProducers must show the
// producer at its last sequence on every partition and a resent last batch
// must be answered as a duplicate (state rebuilt from a snapshot plus the
// log after it); and a SIGTERM must write a snapshot at each log end
// offset, so that the next start replays no batch, with the same results.
func TestIdempotentProducerKillNine(t *testing.T) {
	ctx := ctxTimeout(t, 90*time.Second)
	p, proxy := startProxied(t, 2, 0.002, "log.segment.bytes=32768")
	createTopic(t, client(t, proxy.Addr()), "idem", idempotencePartitions, nil)

	cl := franzIdempotentProducer(t, proxy.Addr())
	kills := []int64{idempotenceRecords / 4, idempotenceRecords / 2, idempotenceRecords * 3 / 4}
	acks := newAckTracker(idempotenceRecords, kills...)
	produceErr := make(chan error, 1)
	go func() {
		produceErr <- produceSequenced(ctx, cl, "idem", idempotencePartitions, idempotenceRecords, acks)
	}()
	for _, at := range kills {
		acks.wait(t, ctx, at)
		p.kill()
		p.restart()
	}
	if err := <-produceErr; err != nil {
		t.Fatalf("producing: %v; %d acknowledged; broker log and stacks:\n%s", err, acks.acked.Load(), dumpStacks(p))
	}
	acks.check(t)
	t.Logf("%d records acknowledged across %d SIGKILLs; %d of %d produce responses dropped", idempotenceRecords, len(kills), proxy.Dropped(), proxy.Eligible())
	proxy.SetDropRate(0)

	produced := perPartition(idempotenceRecords, idempotencePartitions)
	checkExactlyOnce(t, readAll(t, ctx, proxy.Addr(), "idem"), produced)
	id, _, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()

	// Rebuilt after a crash from the latest snapshot and the batches after
	// it: the segments are small, so every partition has rolled, and
	// snapshotted, below its log end.
	ends := endOffsets(t, ctx, p.addr, "idem")
	p.kill()
	for part, end := range ends {
		offs := snapshotOffsets(t, p.dir, "idem", part)
		if len(offs) == 0 || offs[len(offs)-1] >= end {
			files, _ := filepath.Glob(filepath.Join(p.dir, fmt.Sprintf("idem-%d", part), "*"))
			t.Fatalf("partition %d: snapshots at %v, log end %d: want the latest below the end, so that the restart replays the log after it; files %v", part, offs, end, files)
		}
	}
	p.restart()
	checkProducerState(t, ctx, p.addr, "idem", id, produced)
	checkRetryDeduplicated(t, ctx, p.addr, "idem", ends)

	// A clean stop snapshots at the log end, so that the next start reads
	// the state from the snapshot and replays nothing.
	p.stop()
	for part, end := range ends {
		if offs := snapshotOffsets(t, p.dir, "idem", part); len(offs) == 0 || offs[len(offs)-1] != end {
			t.Fatalf("partition %d: snapshots at %v after SIGTERM, want one at the log end %d", part, offs, end)
		}
	}
	p.restart()
	checkProducerState(t, ctx, p.addr, "idem", id, produced)
	checkRetryDeduplicated(t, ctx, p.addr, "idem", ends)
}

// checkRetryDeduplicated resends the last batch of each partition exactly
// as it is stored (same producer id, epoch and sequences, as a producer's
// retry would be) and fails the test unless the broker answers with the
// batch's original offset and appends nothing. ends are the partitions' end
// offsets.
func checkRetryDeduplicated(t *testing.T, ctx context.Context, addr, topic string, ends map[int32]int64) {
	t.Helper()
	// Fetch v12 and Produce v9 name topics; later versions use ids.
	cl := client(t, addr, kgo.MaxVersions(kversion.V3_0_0()))
	brokers, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil || len(brokers.Brokers) != 1 {
		t.Fatalf("broker metadata: %v %v", brokers, err)
	}
	leader := cl.Broker(int(brokers.Brokers[0].NodeID))
	for part, end := range ends {
		fetch := kmsg.NewPtrFetchRequest()
		fetch.MaxBytes = 1 << 20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = topic
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = part, end-1, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
		fetch.Topics = append(fetch.Topics, ft)
		fetched, err := fetch.RequestWith(ctx, leader)
		if err != nil || fetched.ErrorCode != 0 || fetched.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("fetching the last batch of %s/%d: %v %+v", topic, part, err, fetched)
		}
		var last []byte
		var lastHeader record.Header
		record.Batches(fetched.Topics[0].Partitions[0].RecordBatches, func(h record.Header, b []byte) bool {
			if h.LastOffset() == end-1 {
				last, lastHeader = slices.Clone(b[:h.Size()]), h
			}
			return true
		})
		if last == nil || !lastHeader.HasProducerID() {
			t.Fatalf("%s/%d: no idempotent batch ends at %d", topic, part, end-1)
		}

		produce := kmsg.NewPtrProduceRequest()
		produce.Acks, produce.TimeoutMillis = -1, 10_000
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic = topic
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Partition, pp.Records = part, last
		pt.Partitions = append(pt.Partitions, pp)
		produce.Topics = append(produce.Topics, pt)
		produced, err := produce.RequestWith(ctx, leader)
		if err != nil {
			t.Fatalf("resending the last batch of %s/%d: %v", topic, part, err)
		}
		if got := produced.Topics[0].Partitions[0]; got.ErrorCode != 0 || got.BaseOffset != lastHeader.BaseOffset {
			t.Fatalf("%s/%d: a retry of producer %d's sequences %d-%d got error %d at offset %d, want its original offset %d",
				topic, part, lastHeader.ProducerID, lastHeader.BaseSequence, lastHeader.LastSequence(), got.ErrorCode, got.BaseOffset, lastHeader.BaseOffset)
		}
	}
	if after := endOffsets(t, ctx, addr, topic); !maps.Equal(after, ends) {
		t.Fatalf("end offsets moved from %v to %v: a retried batch was appended again", ends, after)
	}
}

// interopRecords is how many records the sarama and librdkafka tests
// produce: enough for many dropped responses, few enough to be quick.
const interopRecords = 20_000

// TestIdempotentSarama: sarama's idempotent producer (Idempotent, one
// request in flight, acks=all) through the dropping proxy.
func TestIdempotentSarama(t *testing.T) {
	ctx := ctxTimeout(t, 90*time.Second)
	_, proxy := startProxied(t, 3, 0.05)
	createTopic(t, client(t, proxy.Addr()), "sarama-idem", idempotencePartitions, nil)

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 1000
	cfg.Producer.Retry.Backoff = 10 * time.Millisecond
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	// About 200 requests, as with franz-go's 1 KiB batches, rather than
	// ten.
	cfg.Producer.Flush.MaxMessages = 100
	cfg.Metadata.Retry.Backoff = 10 * time.Millisecond
	producer, err := sarama.NewAsyncProducer([]string{proxy.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	acks := newAckTracker(interopRecords)
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
	next := map[int32]int{}
	for i := range interopRecords {
		part := int32(i) % idempotencePartitions
		msg := &sarama.ProducerMessage{Topic: "sarama-idem", Partition: part, Value: sarama.ByteEncoder(sequencedValue(part, next[part]))}
		next[part]++
		select {
		case producer.Input() <- msg:
		case <-ctx.Done():
			t.Fatalf("sarama stopped taking records after %d", i)
		}
	}
	// Closing fails the records sarama is still retrying: close once all
	// are settled.
	acks.waitSettled(t, ctx)
	producer.AsyncClose()
	drained.Wait()
	acks.check(t)
	t.Logf("sarama: %d records; %d of %d produce responses dropped", interopRecords, proxy.Dropped(), proxy.Eligible())
	if proxy.Dropped() < 5 {
		t.Fatalf("only %d produce responses dropped: the test did not force retries", proxy.Dropped())
	}
	proxy.SetDropRate(0)
	checkExactlyOnce(t, readAll(t, ctx, proxy.Addr(), "sarama-idem"), perPartition(interopRecords, idempotencePartitions))
}

// TestIdempotentLibrdkafka: librdkafka (confluent-kafka for Python) with
// enable.idempotence=true through the dropping proxy. The producer runs in
// /usr/bin/python3 (testdata/librdkafka_idempotent.py).
func TestIdempotentLibrdkafka(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		t.Skipf("librdkafka test needs %s with the confluent_kafka module: %v: %s", python, err, strings.TrimSpace(string(out)))
	}
	ctx := ctxTimeout(t, 90*time.Second)
	_, proxy := startProxied(t, 4, 0.05)
	createTopic(t, client(t, proxy.Addr()), "rdkafka-idem", idempotencePartitions, nil)

	cmd := exec.CommandContext(ctx, python, "testdata/librdkafka_idempotent.py",
		proxy.Addr(), "rdkafka-idem", strconv.Itoa(idempotencePartitions), strconv.Itoa(interopRecords))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("librdkafka producer: %v\n%s", err, stderr.String())
	}
	var result struct {
		Acked  int      `json:"acked"`
		Failed int      `json:"failed"`
		Errors []string `json:"errors"`
		Fatal  string   `json:"fatal"`
	}
	if err := json.Unmarshal(out, &result); err != nil {
		t.Fatalf("librdkafka producer printed %q: %v\n%s", out, err, stderr.String())
	}
	if result.Acked != interopRecords || result.Failed != 0 || result.Fatal != "" {
		t.Fatalf("librdkafka: %d of %d acknowledged, %d failed, fatal %q; errors %v\n%s", result.Acked, interopRecords, result.Failed, result.Fatal, result.Errors, stderr.String())
	}
	t.Logf("librdkafka: %d records; %d of %d produce responses dropped", interopRecords, proxy.Dropped(), proxy.Eligible())
	if proxy.Dropped() < 5 {
		t.Fatalf("only %d produce responses dropped: the test did not force retries", proxy.Dropped())
	}
	proxy.SetDropRate(0)
	checkExactlyOnce(t, readAll(t, ctx, proxy.Addr(), "rdkafka-idem"), perPartition(interopRecords, idempotencePartitions))
}
