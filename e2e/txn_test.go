package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestTransactionsLibrdkafka: librdkafka's transactional producer
// (confluent-kafka for Python, testdata/librdkafka_transactional.py)
// commits and aborts; its read_committed consumer never sees the aborted
// records, its read_uncommitted consumer sees them all, and neither sees a
// marker.
func TestTransactionsLibrdkafka(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import confluent_kafka").CombinedOutput(); err != nil {
		t.Skipf("librdkafka test needs %s with the confluent_kafka module: %v: %s", python, err, strings.TrimSpace(string(out)))
	}
	ctx := ctxTimeout(t, 120*time.Second)
	p := startProcess(t, t.TempDir(), "transaction.state.log.num.partitions=3", "offsets.topic.num.partitions=3")
	createTopic(t, client(t, p.addr), "rdkafka-txn", 1, nil)
	cmd := exec.CommandContext(ctx, python, "testdata/librdkafka_transactional.py", p.addr, "rdkafka-txn")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("librdkafka: %v\n%s\n%s", err, stderr.String(), p.logs)
	}
	var got struct {
		Committed   []string `json:"read_committed"`
		Uncommitted []string `json:"read_uncommitted"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("librdkafka printed %q: %v", out, err)
	}
	values := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%d", prefix, i))
		}
		return out
	}
	wantCommitted := append(values("commit", 10), values("after", 3)...)
	wantAll := append(append(values("commit", 10), values("abort", 5)...), values("after", 3)...)
	if !slices.Equal(got.Committed, wantCommitted) {
		t.Fatalf("read_committed saw %v, want %v", got.Committed, wantCommitted)
	}
	if !slices.Equal(got.Uncommitted, wantAll) {
		t.Fatalf("read_uncommitted saw %v, want %v", got.Uncommitted, wantAll)
	}
}

var (
	etlRecords = flag.Int("etl-records", 3000, "records TestTransactionalCopyUnderKills copies (Kafka's transactions_test: 100000)")
	etlTxnSize = flag.Int("etl-txn-size", 750, "most records in one of TestTransactionalCopyUnderKills's transactions (Kafka's transactions_test: 750)")
)

// copierEnv makes the test binary a copier process (TestCopierProcess);
// copierTxnSizeEnv gives it -etl-txn-size.
const (
	copierEnv        = "STRATA_E2E_COPIER"
	copierTxnSizeEnv = "STRATA_E2E_COPIER_TXN_SIZE"
)

// TestCopierProcess is not a test: run with STRATA_E2E_COPIER=addr, it is
// one copier of TestTransactionalCopyUnderKills, copying topic etl-in to
// etl-out partition by partition with franz-go's GroupTransactSession in
// transactions of at most $STRATA_E2E_COPIER_TXN_SIZE records, until
// killed.
func TestCopierProcess(t *testing.T) {
	addr := os.Getenv(copierEnv)
	if addr == "" {
		t.Skip("a helper process of TestTransactionalCopyUnderKills")
	}
	txnSize, err := strconv.Atoi(os.Getenv(copierTxnSizeEnv))
	if err != nil || txnSize < 1 {
		t.Fatalf("$%s: want a positive number: %v", copierTxnSizeEnv, err)
	}
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(strings.Split(addr, ",")...),
		kgo.TransactionalID("etl-copier"), kgo.ConsumerGroup("etl-copier"), kgo.ConsumeTopics("etl-in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.TransactionTimeout(10*time.Second), kgo.SessionTimeout(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := sess.PollRecords(pctx, txnSize)
		cancel()
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Topic: "etl-out", Partition: r.Partition, Key: r.Key, Value: r.Value}, nil)
		})
		if _, err := sess.End(ctx, kgo.TryCommit); err != nil {
			fmt.Fprintln(os.Stderr, "ending a transaction:", err)
		}
	}
}

// etlRead is what a read_committed consumer of etl-out saw: how many
// times each value, and each partition's values in order.
type etlRead struct {
	times        map[int]int
	perPartition map[int32][]int
	total        int
}

// readETL consumes etl-out with cl until it has read want records or ctx
// ends.
func readETL(ctx context.Context, cl *kgo.Client, want int) etlRead {
	r := etlRead{times: map[int]int{}, perPartition: map[int32][]int{}}
	for r.total < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(r.add)
	}
	return r
}

func (r *etlRead) add(rec *kgo.Record) {
	v, err := strconv.Atoi(string(rec.Value))
	if err != nil {
		v = -1
	}
	r.times[v]++
	r.perPartition[rec.Partition] = append(r.perPartition[rec.Partition], v)
	r.total++
}

// check fails t unless r is exactly the values 0 to n-1, each once, each
// partition in etl-in's order (round robin: increasing values).
func (r etlRead) check(t *testing.T, who string, n int) {
	t.Helper()
	var duplicates, missing []int
	for v := range n {
		switch r.times[v] {
		case 0:
			missing = append(missing, v)
		case 1:
		default:
			duplicates = append(duplicates, v)
		}
	}
	foreign := r.total - n - len(missing)
	for _, v := range duplicates {
		foreign -= r.times[v] - 1
	}
	if len(duplicates) > 0 || len(missing) > 0 || foreign != 0 {
		t.Fatalf("%s read %d records: %d values twice or more (%v), %d missing (%v), %d not in etl-in",
			who, r.total, len(duplicates), head(duplicates), len(missing), head(missing), foreign)
	}
	for p, vs := range r.perPartition {
		if !slices.IsSorted(vs) {
			t.Fatalf("%s: partition %d out of order", who, p)
		}
	}
}

func head(vs []int) []int { return vs[:min(len(vs), 10)] }

// TestTransactionalCopyUnderKills is Kafka's transactions_test on a
// cluster of three: copier processes copy etl-in to etl-out in
// transactions of at most -etl-txn-size records (output records and input
// offsets committed together); at every seventh of the input, the leader
// of one of etl-out's partitions is bounced (SIGKILL, SIGTERM, SIGKILL)
// while a copier runs, or the copier is SIGKILLed (three times) and the
// next started. A read_committed consumer reading
// etl-out all along, and one reading it after, then each saw exactly
// etl-in's records, none twice, in per-partition order.
func TestTransactionalCopyUnderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	start := time.Now()
	c := startCluster(t, 3, "broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500",
		"transaction.state.log.num.partitions=5", "offsets.topic.num.partitions=5",
		"group.initial.rebalance.delay.ms=0", "default.replication.factor=3", "min.insync.replicas=2")
	addrs := []string{c.nodes[1].addr, c.nodes[2].addr, c.nodes[3].addr}
	seeds := strings.Join(addrs, ",")
	n, txnSize := *etlRecords, *etlTxnSize
	ctx := ctxTimeout(t, 5*time.Minute+time.Duration(n)*time.Millisecond)
	adm := kadm.NewClient(client(t, addrs[0], kgo.SeedBrokers(addrs...)))
	for _, topic := range []string{"etl-in", "etl-out"} {
		if resp, err := adm.CreateTopic(ctx, 3, 3, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("creating %s: %v %v", topic, err, resp.Err)
		}
	}
	in := client(t, addrs[0], kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	for i := 0; i < n; i += 500 {
		var batch []*kgo.Record
		for j := i; j < min(i+500, n); j++ {
			batch = append(batch, &kgo.Record{Topic: "etl-in", Key: []byte(strconv.Itoa(j)), Value: []byte(strconv.Itoa(j))})
		}
		if err := in.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	readCommitted := func() *kgo.Client {
		return client(t, addrs[0], kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("etl-out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(500*time.Millisecond))
	}
	concurrentCl := readCommitted()
	concurrent := make(chan etlRead, 1)
	go func() { concurrent <- readETL(ctx, concurrentCl, n) }()

	copied := func() int64 {
		offsets, err := adm.FetchOffsets(ctx, "etl-copier")
		if err != nil || offsets.Error() != nil {
			return 0
		}
		var total int64
		offsets.Each(func(o kadm.OffsetResponse) { total += max(o.At, 0) })
		return total
	}
	startCopier := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCopierProcess$")
		cmd.Env = append(os.Environ(), copierEnv+"="+seeds, copierTxnSizeEnv+"="+strconv.Itoa(txnSize))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
		})
		return cmd
	}
	// Six steps, at every seventh of the input: the leader of one of
	// etl-out's partitions is bounced while a copier copies, then that
	// copier is SIGKILLed and the next started.
	reach := func(step int) {
		milestone := int64(n * step / 7)
		poll.UntilStatus(t, 2*time.Minute, fmt.Sprintf("%d copied", milestone), func() (bool, string) {
			got := copied()
			return got >= milestone, fmt.Sprintf("%d of %d copied", got, n)
		})
	}
	copier := startCopier()
	var bounced []string
	for round := range 3 {
		reach(2*round + 1)
		hard := round != 1
		node := c.bouncePartition("etl-out", int32(round), hard)
		bounced = append(bounced, fmt.Sprintf("node %d (etl-out/%d, %s)", node, round, map[bool]string{true: "SIGKILL", false: "SIGTERM"}[hard]))
		t.Logf("bounced %s, back at %d of %d copied", bounced[len(bounced)-1], copied(), n)
		reach(2*round + 2)
		copier.Process.Signal(syscall.SIGKILL)
		copier.Wait()
		t.Logf("copier %d SIGKILLed at %d of %d copied", round, copied(), n)
		copier = startCopier()
	}
	poll.UntilStatus(t, 3*time.Minute, "every record copied", func() (bool, string) {
		got := copied()
		return got == int64(n), fmt.Sprintf("%d of %d copied", got, n)
	})
	copiedIn := time.Since(start)

	var during etlRead
	select {
	case during = <-concurrent:
	case <-ctx.Done():
	}
	during.check(t, "the read_committed consumer reading during the copy", n)
	after := readETL(ctx, readCommitted(), n)
	after.check(t, "a read_committed consumer reading after the copy", n)
	// Nothing more.
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if extra := concurrentCl.PollFetches(pctx).NumRecords(); extra != 0 {
		t.Fatalf("%d records beyond the %d copied", extra, n)
	}
	t.Logf("%d records copied in transactions of at most %d in %s (cluster start to last offset committed): "+
		"3 copier SIGKILLs, bounced %s; 0 duplicates, none missing, in order, read_committed during and after",
		n, txnSize, copiedIn.Round(100*time.Millisecond), strings.Join(bounced, ", "))
}

// TestTransactionsSarama: sarama's transactional producer commits and
// aborts; franz-go consumers at both isolation levels see what Kafka's
// would.
func TestTransactionsSarama(t *testing.T) {
	ctx := ctxTimeout(t, 90*time.Second)
	p := startProcess(t, t.TempDir(), "transaction.state.log.num.partitions=3", "offsets.topic.num.partitions=3")
	createTopic(t, client(t, p.addr), "sarama-txn", 1, nil)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.Transaction.ID = "sarama-txn"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Net.MaxOpenRequests = 1
	producer, err := sarama.NewSyncProducer([]string{p.addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	txn := func(prefix string, n int, commit bool) {
		t.Helper()
		if err := producer.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: "sarama-txn", Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", prefix, i))}); err != nil {
				t.Fatalf("sarama transactional send: %v", err)
			}
		}
		end := producer.CommitTxn
		if !commit {
			end = producer.AbortTxn
		}
		if err := end(); err != nil {
			t.Fatalf("sarama ending a transaction (commit=%v): %v", commit, err)
		}
	}
	txn("commit", 10, true)
	txn("abort", 5, false)
	txn("after", 3, true)

	read := func(level kgo.IsolationLevel, want int) []string {
		cl := client(t, p.addr, kgo.ConsumeTopics("sarama-txn"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(200*time.Millisecond))
		var out []string
		for len(out) < want {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("read %v, want %d records", out, want)
			}
			fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
		}
		return out
	}
	if got := read(kgo.ReadCommitted(), 13); slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, "abort") }) || len(got) != 13 {
		t.Fatalf("read_committed: %v", got)
	}
	if got := read(kgo.ReadUncommitted(), 18); len(got) != 18 {
		t.Fatalf("read_uncommitted: %v", got)
	}
}

// TestTransactionCoordinatorFailover: the transaction coordinator's broker
// is SIGKILLed while a producer commits transaction after transaction; its
// __transaction_state partition moves to another broker, which finishes
// what was decided. Under read_committed every transaction is there whole
// or not at all, and every commit that was acknowledged is there.
func TestTransactionCoordinatorFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	c := startCluster(t, 3, "broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500",
		"transaction.state.log.num.partitions=3", "offsets.topic.num.partitions=3", "default.replication.factor=3")
	addrs := []string{c.nodes[1].addr, c.nodes[2].addr, c.nodes[3].addr}
	ctx := ctxTimeout(t, 4*time.Minute)
	adm := kadm.NewClient(client(t, addrs[0], kgo.SeedBrokers(addrs...)))
	if resp, err := adm.CreateTopic(ctx, 3, 3, nil, "failover"); err != nil || resp.Err != nil {
		t.Fatalf("creating the topic: %v %v", err, resp.Err)
	}
	const txns, perTxn = 60, 9
	newProducer := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("failover"), kgo.DefaultProduceTopic("failover"),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.TransactionTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	cl := newProducer()
	defer func() { cl.Close() }()
	acked := map[int]bool{}
	var killed int32 = -1
	killDone := make(chan struct{})
	for i := range txns {
		err := cl.BeginTransaction()
		for j := 0; err == nil && j < perTxn; j++ {
			err = cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d-%d", i, j)}).FirstErr()
		}
		if i == txns/3 {
			// The coordinator of "failover" is SIGKILLed as this
			// transaction's EndTxn goes out, and stays down while the
			// next ones run.
			described, derr := adm.DescribeTransactions(ctx, "failover")
			if derr != nil {
				t.Fatal(derr)
			}
			killed = described["failover"].Coordinator
			go func() {
				defer close(killDone)
				c.nodes[killed].kill()
			}()
		}
		if err == nil {
			err = cl.EndTransaction(ctx, kgo.TryCommit)
		}
		if err == nil {
			acked[i] = true
			continue
		}
		t.Logf("transaction %d: %v", i, err)
		// Its outcome is unknown: start over with a new producer, which
		// fences this one and aborts what it left open.
		cl.Close()
		cl = newProducer()
	}
	<-killDone
	c.nodes[killed].restart()
	if len(acked) < txns/2 {
		t.Fatalf("only %d of %d transactions committed", len(acked), txns)
	}
	// Nothing left open: the last stable offset reaches the end.
	out := client(t, addrs[0], kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("failover"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(500*time.Millisecond))
	seen := map[int]int{}
	want := len(acked) * perTxn
	got := 0
	for got < want {
		fs := out.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of at least %d committed records", got, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var i, j int
			fmt.Sscanf(string(r.Value), "%d-%d", &i, &j)
			seen[i]++
			if acked[i] {
				got++
			}
		})
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
		var i, j int
		fmt.Sscanf(string(r.Value), "%d-%d", &i, &j)
		seen[i]++
	})
	for i := range txns {
		switch n := seen[i]; {
		case acked[i] && n != perTxn:
			t.Errorf("acknowledged transaction %d: %d of %d records", i, n, perTxn)
		case n != 0 && n != perTxn:
			t.Errorf("transaction %d torn: %d of %d records", i, n, perTxn)
		}
	}
}
