package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/txn"
)

// txnSettings shrink __transaction_state for a single node's tests.
var txnSettings = map[string]string{"transaction.state.log.num.partitions": "3"}

// produceTxn produces n records to topic in one transaction of a
// transactional franz-go client and ends it with commit.
func produceTxn(t *testing.T, cl *kgo.Client, topic, prefix string, n int, commit bool) {
	t.Helper()
	ctx := testContext(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r := &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("transactional produce: %v", err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("ending the transaction (commit=%v): %v", commit, err)
	}
}

// TestTransactionalProducerCommitsAndAborts drives the coordinator with
// franz-go's transactional producer: the markers land in the partitions,
// and the coordinator's state says how each transaction ended.
func TestTransactionalProducerCommitsAndAborts(t *testing.T) {
	tb := startBroker(t, txnSettings)
	adm := newAdmin(t, tb.Addr())
	createTopic(t, adm, "tx", 2, nil)
	cl := newClient(t, tb.Addr(), kgo.TransactionalID("tx-1"), kgo.DefaultProduceTopic("tx"))

	produceTxn(t, cl, "tx", "committed", 10, true)
	produceTxn(t, cl, "tx", "aborted", 5, false)
	produceTxn(t, cl, "tx", "committed-again", 3, true)

	var md txn.Metadata
	poll.UntilStatus(t, 30*time.Second, "the last transaction completes", func() (bool, string) {
		var err error
		md, err = tb.txns.Describe("tx-1")
		return err == nil && md.State == txn.CompleteCommit && len(md.Partitions) == 0, fmt.Sprintf("%+v %v", md, err)
	})
	// Every record and a marker per transaction and partition written to:
	// a read_uncommitted consumer sees the 18 records, never the markers.
	recs := consumeN(t, tb.Addr(), 18, "tx")
	if len(recs) != 18 {
		t.Fatalf("read %d records, want 18", len(recs))
	}
	for _, r := range recs {
		if r.ProducerID != md.ProducerID {
			t.Fatalf("record from producer %d, want %d", r.ProducerID, md.ProducerID)
		}
	}
	// read_committed: the committed 13, in order, none of the aborted.
	committed := consumeCommitted(t, tb.Addr(), 13, "tx")
	for _, r := range committed {
		if strings.HasPrefix(string(r.Value), "aborted") {
			t.Fatalf("read_committed consumer read %q", r.Value)
		}
	}
	// The partitions hold no open transaction once the last markers are
	// in: the last stable offset is the high watermark.
	for p := range int32(2) {
		rp, _ := tb.partition("tx", p)
		poll.Until(t, 30*time.Second, "the markers are written", func() bool { return rp.LastStableOffset() == rp.HighWatermark() })
	}

	// After a restart the aborted-transaction index still hides the
	// aborted records, and the coordinator still knows the id.
	tb.restart(t)
	consumeCommitted(t, tb.Addr(), 13, "tx")
	produceTxn(t, cl, "tx", "after-restart", 2, true)
	consumeCommitted(t, tb.Addr(), 15, "tx")
}

// consumeCommitted reads n records from the start of the topics with a
// read_committed consumer, and checks no more come.
func consumeCommitted(t *testing.T, addr string, n int, topics ...string) []*kgo.Record {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	ctx := testContext(t)
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", len(out), n, ctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch error on %s/%d: %v", e.Topic, e.Partition, e.Err)
		}
		out = append(out, fs.Records()...)
	}
	if len(out) != n {
		t.Fatalf("read_committed read %d records, want %d", len(out), n)
	}
	return out
}

// TestZombieProducerIsFenced: a second producer with the same
// transactional id fences the first, whose transaction is aborted and
// whose later requests are refused.
func TestZombieProducerIsFenced(t *testing.T) {
	tb := startBroker(t, txnSettings)
	adm := newAdmin(t, tb.Addr())
	createTopic(t, adm, "zombie", 1, nil)
	ctx := testContext(t)
	old := newClient(t, tb.Addr(), kgo.TransactionalID("z"), kgo.DefaultProduceTopic("zombie"))
	if err := old.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := old.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rp, _ := tb.partition("zombie", 0)
	if lso := rp.LastStableOffset(); lso != 0 {
		t.Fatalf("last stable offset %d with a transaction open at 0", lso)
	}
	// ListOffsets: latest is the last stable offset for read_committed,
	// the high watermark for read_uncommitted.
	for level, want := range map[int8]int64{0: 1, 1: 0} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version, req.ReplicaID, req.IsolationLevel = 5, -1, level
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "zombie"
		rpart := kmsg.NewListOffsetsRequestTopicPartition()
		rpart.Timestamp = -1
		rt.Partitions = append(rt.Partitions, rpart)
		req.Topics = append(req.Topics, rt)
		resp := rawRequest(t, tb.Addr(), req).(*kmsg.ListOffsetsResponse)
		if got := resp.Topics[0].Partitions[0].Offset; got != want {
			t.Fatalf("ListOffsets latest at isolation %d: %d, want %d", level, got, want)
		}
	}

	// The new instance's InitProducerId aborts the open transaction at a
	// bumped epoch.
	fresh := newClient(t, tb.Addr(), kgo.TransactionalID("z"), kgo.DefaultProduceTopic("zombie"))
	produceTxn(t, fresh, "zombie", "fresh", 2, true)
	// EndTxn is answered once the commit is decided; the markers follow.
	poll.Until(t, 30*time.Second, "the markers are written", func() bool { return rp.LastStableOffset() == rp.HighWatermark() })

	// The zombie can neither write nor commit.
	err := old.ProduceSync(ctx, &kgo.Record{Value: []byte("late")}).FirstErr()
	if err == nil {
		err = old.EndTransaction(ctx, kgo.TryCommit)
	}
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("zombie's write or commit: %v, want PRODUCER_FENCED or INVALID_PRODUCER_EPOCH", err)
	}

	// Raw EndTxn at the old epoch, v1 and v3: fenced, by the name each
	// version knows.
	md, err := tb.txns.Describe("z")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int16{1, 3} {
		req := kmsg.NewPtrEndTxnRequest()
		req.Version = v
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = "z", md.ProducerID, md.ProducerEpoch-2, true
		resp := rawRequest(t, tb.Addr(), req).(*kmsg.EndTxnResponse)
		want := kerr.ProducerFenced.Code
		if v < 2 {
			want = kerr.InvalidProducerEpoch.Code
		}
		if resp.ErrorCode != want {
			t.Fatalf("EndTxn v%d at an old epoch: %v, want %v", v, kerr.ErrorForCode(resp.ErrorCode), kerr.ErrorForCode(want))
		}
	}
}

// TestTransactionTimeoutAborts: a transaction left open past its timeout
// is aborted by the coordinator, and the producer is fenced.
func TestTransactionTimeoutAborts(t *testing.T) {
	settings := map[string]string{"transaction.state.log.num.partitions": "3",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}
	tb := startBroker(t, settings)
	adm := newAdmin(t, tb.Addr())
	createTopic(t, adm, "slow", 1, nil)
	ctx := testContext(t)
	cl := newClient(t, tb.Addr(), kgo.TransactionalID("slow"), kgo.DefaultProduceTopic("slow"),
		kgo.TransactionTimeout(1500*time.Millisecond))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("never")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rp, _ := tb.partition("slow", 0)
	poll.UntilStatus(t, 30*time.Second, "the coordinator aborts the timed-out transaction", func() (bool, string) {
		md, err := tb.txns.Describe("slow")
		return err == nil && md.State.String() == "CompleteAbort" && rp.LastStableOffset() == rp.HighWatermark(),
			fmt.Sprintf("%+v %v", md, err)
	})
	if md, _ := tb.txns.Describe("slow"); md.ProducerEpoch != 1 {
		t.Fatalf("aborted at epoch %d, want the bumped epoch 1", md.ProducerEpoch)
	}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.EndTransaction(ectx, kgo.TryCommit); err == nil {
		t.Fatal("committing a transaction the coordinator aborted succeeded")
	}
}

// runETL copies topic "a" to topic "b" with franz-go's GroupTransactSession
// (consume, produce and commit the input offsets in one transaction) until
// the group has consumed want records of "a" in total.
func runETL(t *testing.T, addr string, want int64) {
	t.Helper()
	ctx := testContext(t)
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(addr), kgo.TransactionalID("etl"),
		kgo.ConsumerGroup("etl"), kgo.ConsumeTopics("a"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	adm := newAdmin(t, addr)
	for {
		offsets, err := adm.FetchOffsets(ctx, "etl")
		if err == nil && offsets.Error() == nil {
			var total int64
			offsets.Each(func(o kadm.OffsetResponse) { total += o.At })
			if total >= want {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("ETL did not get to %d: %v", want, ctx.Err())
		}
		// The last commit's offsets show once its markers are in; the
		// poll must not wait for records that will never come.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := sess.PollFetches(pctx)
		cancel()
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Topic: "b", Key: r.Key, Value: r.Value}, nil)
		})
		if _, err := sess.End(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("ending the ETL transaction: %v", err)
		}
	}
}

// TestGroupTransactSessionCopiesExactlyOnce: a consume-transform-produce
// loop commits its output and its input offsets atomically
// (TxnOffsetCommit into the group coordinator, visible at the COMMIT
// marker), so a restarted copier neither loses nor repeats records.
func TestGroupTransactSessionCopiesExactlyOnce(t *testing.T) {
	tb := startBroker(t, map[string]string{"transaction.state.log.num.partitions": "3",
		"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"})
	adm := newAdmin(t, tb.Addr())
	createTopic(t, adm, "a", 3, nil)
	createTopic(t, adm, "b", 3, nil)
	ctx := testContext(t)
	in := newClient(t, tb.Addr(), kgo.DefaultProduceTopic("a"))
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			if err := in.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "%d", i), Value: fmt.Appendf(nil, "record-%d", i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 200)
	runETL(t, tb.Addr(), 200)
	// A second copier with the same transactional id and group starts
	// where the first committed.
	produce(200, 250)
	runETL(t, tb.Addr(), 250)

	out := consumeCommitted(t, tb.Addr(), 250, "b")
	seen := map[string]bool{}
	for _, r := range out {
		if seen[string(r.Value)] {
			t.Fatalf("%s copied twice", r.Value)
		}
		seen[string(r.Value)] = true
	}
}

// TestTransactionMetrics: the open transactions, the oldest one's age and
// the last stable offset's lag behind the high watermark are gauges.
func TestTransactionMetrics(t *testing.T) {
	tb := startBroker(t, map[string]string{"transaction.state.log.num.partitions": "3", "strata.admin.listener": "127.0.0.1:0"})
	base := "http://" + tb.AdminAddr()
	createTopic(t, newAdmin(t, tb.Addr()), "metered-txn", 1, nil)
	ctx := testContext(t)
	cl := newClient(t, tb.Addr(), kgo.TransactionalID("metered"), kgo.DefaultProduceTopic("metered-txn"))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	body := scrape(t, base+"/metrics")
	for _, want := range []string{
		`strata_transactions_open{state="Ongoing"} 1`,
		`strata_transaction_oldest_open_age_seconds`,
		`strata_last_stable_offset_lag{partition="0",topic="metered-txn"} 5`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the transaction ends in the metrics", func() bool {
		body := scrape(t, base+"/metrics")
		return strings.Contains(body, `strata_transactions_open{state="Ongoing"} 0`) &&
			strings.Contains(body, `strata_transactions_open{state="PrepareAbort"} 0`) &&
			strings.Contains(body, `strata_last_stable_offset_lag{partition="0",topic="metered-txn"} 0`)
	})
}

// txnBatch is idempotentBatch at epoch, transactional.
func txnBatch(n int, id int64, epoch int16, seq int32) []byte {
	b := idempotentBatch(n, id, seq, time.Now().UnixMilli())
	binary.BigEndian.PutUint16(b[51:], uint16(epoch))
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|record.AttrTransactional)
	binary.BigEndian.PutUint32(b[17:], record.Checksum(b))
	return b
}

// TestLateProduceIsRefused is KAFKA-17754's late produce: a transactional
// batch that arrives after its transaction was aborted would open a
// transaction on the partition that no marker ends, holding the last
// stable offset back for good. The leader verifies it with the
// coordinator first (KIP-890 part 1) and refuses it.
func TestLateProduceIsRefused(t *testing.T) {
	tb := startBroker(t, txnSettings)
	createTopic(t, newAdmin(t, tb.Addr()), "late", 1, nil)
	cl := newClient(t, tb.Addr(), kgo.TransactionalID("late"), kgo.DefaultProduceTopic("late"))
	produceTxn(t, cl, "late", "aborted", 3, false)
	rp, _ := tb.partition("late", 0)
	poll.Until(t, 30*time.Second, "the abort marker is written", func() bool { return rp.LastStableOffset() == rp.HighWatermark() })
	md, err := tb.txns.Describe("late")
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 10_000
	req.TransactionID = kmsg.StringPtr("late")
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "late"
	part := kmsg.NewProduceRequestTopicPartition()
	part.Records = txnBatch(1, md.ProducerID, md.ProducerEpoch, 3)
	rt.Partitions = append(rt.Partitions, part)
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(t, tb.Addr(), req).(*kmsg.ProduceResponse)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidTxnState.Code {
		t.Fatalf("late transactional produce: %v, want INVALID_TXN_STATE", kerr.ErrorForCode(code))
	}
	if lso, hw := rp.LastStableOffset(), rp.HighWatermark(); lso != hw {
		t.Fatalf("last stable offset %d held back below the high watermark %d", lso, hw)
	}
	// The producer's next transaction works.
	produceTxn(t, cl, "late", "committed", 2, true)
	consumeCommitted(t, tb.Addr(), 2, "late")
}
