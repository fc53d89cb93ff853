package strata_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/strata-io/strata"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// The long mode of TestConcurrentTransactionalCopies: ten times the
// records, more copiers, a longer deadline.
var (
	eosLong        = flag.Bool("eos-long", false, "run TestConcurrentTransactionalCopies in its long mode")
	eosMarkerDelay = flag.Duration("eos-marker-delay", 6*time.Second, "how long TestConcurrentTransactionalCopies's spells of slow markers delay each; 0 for none")
)

// copySettings spread the transaction and group coordinators over the
// three nodes, so that coordinators and partition leaders differ.
var copySettings = map[string]string{
	"transaction.state.log.num.partitions": "6",
	"offsets.topic.num.partitions":         "6",
}

// TestConcurrentTransactionalCopies is exactly-once under concurrency:
// two chained stages of transactional copiers (Kafka's read-process-write
// loop, franz-go's GroupTransactSession) copy every record of a topic
// into a second and then a third, on three nodes with replication factor
// 3. The copiers of a stage share a consumer group (the first stage
// classic, with the range, sticky and cooperative-sticky balancers; the
// second KIP-848); each copier leaves and rejoins every few transactions,
// so the groups rebalance all along, and aborts some of its transactions
// on purpose. Half the transactional ids run transactions version 2
// (Produce v12, EndTxn v5: the epoch is bumped at every end, the broker
// adds the partitions), half version 1 (older request versions pinned).
// Goroutines spin on every core meanwhile, so that markers, produces and
// offset commits interleave as they do on a loaded machine.
//
// The check compares each stage's output with its input partition by
// partition (the copiers keep keys, so a record stays in its partition
// number): every record exactly once and in order. Each copied record
// names the transaction that wrote it, so the anomalies are told apart:
// an aborted read (a record of an aborted transaction is visible to
// read_committed), an intermediate read (a committed transaction is
// visible only in part), a lost write and a duplicate.
func TestConcurrentTransactionalCopies(t *testing.T) {
	records, copiers, deadline := 2000, 4, 45*time.Second
	if *eosLong {
		records, copiers, deadline = 30000, 6, 10*time.Minute
	}
	c := startCluster(t, copySettings)
	ctx, cancel := context.WithTimeout(context.Background(), deadline+2*time.Minute)
	defer cancel()

	admin, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	const partitions = 6
	topics := []string{"eos-in", "eos-mid", "eos-out"}
	poll.UntilStatus(t, time.Minute, "the topics are created", func() (bool, string) {
		resp, err := adm.CreateTopics(ctx, partitions, 3, nil, topics...)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range resp {
			if r.Err != nil && !strings.Contains(r.Err.Error(), "TOPIC_ALREADY_EXISTS") {
				return false, r.Err.Error()
			}
		}
		return true, ""
	})

	input := produceCopyInput(t, ctx, c, "eos-in", records)

	stop := make(chan struct{})
	var burners sync.WaitGroup
	for range runtime.NumCPU() {
		burners.Add(1)
		go func() {
			defer burners.Done()
			for n := 0; ; n++ {
				if n%(1<<16) == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		}()
	}
	stopBurners := sync.OnceFunc(func() { close(stop); burners.Wait() })
	defer stopBurners()

	// Spells of markers slower than the coordinator waits for them
	// before it answers EndTxn (5 s), as on a loaded machine: a copier's
	// next transaction starts while its last one's markers are on their
	// way.
	go func() {
		slow := true
		for {
			d := time.Duration(0)
			if slow {
				d = *eosMarkerDelay
			}
			c.DelayRequests(kmsg.WriteTxnMarkers.Int16(), d)
			select {
			case <-stop:
				c.DelayRequests(kmsg.WriteTxnMarkers.Int16(), 0)
				return
			case <-time.After(8 * time.Second):
			}
			slow = !slow
		}
	}()

	stages := []*copyStage{
		newCopyStage("eos-a", "eos-in", "eos-mid", records, false),
		newCopyStage("eos-b", "eos-mid", "eos-out", records, true),
	}
	runCtx, runCancel := context.WithTimeout(ctx, deadline)
	defer runCancel()
	var wg sync.WaitGroup
	for _, s := range stages {
		for i := range copiers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.run(ctx, runCtx, t, c, i)
			}()
		}
	}
	wg.Wait()
	stopBurners()

	failed := false
	want := input
	for _, s := range stages {
		committed := groupOffsets(t, ctx, admin, s.group, s.from)
		got := readCommitted(t, ctx, c, s.to)
		rep := s.check(want, committed, got)
		t.Logf("%s (%s → %s): %s", s.group, s.from, s.to, rep)
		if !rep.ok() {
			failed = true
		}
		want = got
	}
	if failed {
		t.Fatal("the transactional copies are not exactly once")
	}
}

// groupOffsets returns the offsets the group committed on topic's
// partitions (0 for none), once stable: the transactions that commit
// them have completed.
func groupOffsets(t *testing.T, ctx context.Context, cl *kgo.Client, group, topic string) map[int32]int64 {
	out := map[int32]int64{}
	poll.UntilStatus(t, time.Minute, "the stable offsets of "+group, func() (bool, string) {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group, req.RequireStable = 7, group, true
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = topic, []int32{0, 1, 2, 3, 4, 5}
		req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return false, err.Error()
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return false, err.Error()
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return false, fmt.Sprintf("partition %d: %v", p.Partition, err)
				}
				out[p.Partition] = max(p.Offset, 0)
			}
		}
		return true, ""
	})
	return out
}

// produceCopyInput writes n records keyed k000000… to topic with an
// idempotent producer and returns each partition's records.
func produceCopyInput(t *testing.T, ctx context.Context, c *strata.Cluster, topic string, n int) copyRead {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var mu sync.Mutex
	out := copyRead{}
	for i := range n {
		v := fmt.Sprintf("%06d", i)
		cl.Produce(ctx, &kgo.Record{Key: []byte("k" + v), Value: []byte(v)}, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("producing the input: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			out[r.Partition] = append(out[r.Partition], copyRecord{value: string(r.Value), offset: r.Offset})
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, recs := range out {
		slices.SortFunc(recs, func(a, b copyRecord) int { return int(a.offset - b.offset) })
	}
	return out
}

// copyStage is one stage of the chain: its group, the topics it copies
// between, and what each of its transactions did, by the tag its records
// carry.
type copyStage struct {
	group, from, to string
	records         int
	kip848          bool

	committedRecords atomic.Int64
	mu               sync.Mutex
	txns             map[string]*copyTxn
	committed        int
	aborted          int
	unknown          int
	produceErrors    map[string]int
	endTimes         []time.Duration // how long each End took
}

// copyTxn is what one transaction of a copier wrote, and how it ended.
type copyTxn struct {
	perPartition map[int32]int
	outcome      txnOutcome
}

type txnOutcome int

const (
	txnOpen txnOutcome = iota
	txnCommitted
	txnAborted
	txnUnknown // End failed: the client cannot tell
)

func newCopyStage(group, from, to string, records int, kip848 bool) *copyStage {
	return &copyStage{group: group, from: from, to: to, records: records, kip848: kip848, txns: map[string]*copyTxn{}, produceErrors: map[string]int{}}
}

func (s *copyStage) done() bool { return s.committedRecords.Load() >= int64(s.records) }

// run is copier i of the stage: sessions of a few transactions each, until
// the stage has copied every record (by the committed transactions'
// count) or runCtx ends; a transaction begun then is ended under ctx.
func (s *copyStage) run(ctx, runCtx context.Context, t *testing.T, c *strata.Cluster, i int) {
	txnID := fmt.Sprintf("%s-%d", s.group, i)
	rng := rand.New(rand.NewPCG(uint64(i), uint64(len(s.group))))
	balancers := []kgo.GroupBalancer{kgo.RangeBalancer(), kgo.CooperativeStickyBalancer(), kgo.StickyBalancer()}
	n := 0 // the copier's transactions, over its sessions
	for session := 0; runCtx.Err() == nil && !s.done(); session++ {
		opts := []kgo.Opt{
			kgo.SeedBrokers(c.Addrs()...),
			kgo.TransactionalID(txnID),
			kgo.TransactionTimeout(time.Minute),
			kgo.SessionTimeout(10 * time.Second),
			kgo.ConsumerGroup(s.group),
			kgo.ConsumeTopics(s.from),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.UnknownTopicRetries(-1),
		}
		if s.kip848 {
			opts = append(opts, kgo.ServerSideBalancer())
		} else {
			opts = append(opts, kgo.Balancers(balancers[(i+session)%len(balancers)]))
		}
		if i%2 == 1 {
			// Transactions version 1: the requests before KIP-890 part 2.
			v := kversion.Stable()
			v.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
			v.SetMaxKeyVersion(kmsg.EndTxn.Int16(), 4)
			v.SetMaxKeyVersion(kmsg.TxnOffsetCommit.Int16(), 4)
			opts = append(opts, kgo.MaxVersions(v))
		}
		if os.Getenv("STRATA_TEST_KGO_LOG") != "" {
			opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string {
				return time.Now().Format("15:04:05.000 ") + txnID + " "
			})))
		}
		sess, err := kgo.NewGroupTransactSession(opts...)
		if err != nil {
			t.Errorf("%s: %v", txnID, err)
			return
		}
		// A few transactions that copy something, then leave the
		// group: the others rebalance.
		until := time.Now().Add(20 * time.Second)
		for k := 2 + rng.IntN(5); k > 0 && runCtx.Err() == nil && !s.done() && time.Now().Before(until); {
			copied, ok := s.transact(ctx, t, sess, txnID, n, rng)
			if !ok {
				break
			}
			if copied {
				n++
				k--
			}
		}
		sess.Close()
	}
}

// transact runs one transaction of a copier, if a poll returns records:
// copied tells whether it did, ok false when the session cannot go on.
func (s *copyStage) transact(ctx context.Context, t *testing.T, sess *kgo.GroupTransactSession, txnID string, n int, rng *rand.Rand) (copied, ok bool) {
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	fetches := sess.PollRecords(pctx, 1+rng.IntN(200))
	cancel()
	if ctx.Err() != nil || fetches.IsClientClosed() {
		return false, false
	}
	if fetches.NumRecords() == 0 {
		return false, true
	}
	if err := sess.Begin(); err != nil {
		t.Logf("%s: Begin: %v", txnID, err)
		return false, false
	}
	tag := fmt.Sprintf("%s/%d", txnID, n)
	txn := &copyTxn{perPartition: map[int32]int{}}
	s.mu.Lock()
	s.txns[tag] = txn
	s.mu.Unlock()
	records := 0
	fetches.EachRecord(func(r *kgo.Record) {
		records++
		out := &kgo.Record{Topic: s.to, Key: slices.Clone(r.Key), Value: slices.Clone(r.Value),
			Headers: []kgo.RecordHeader{{Key: "txn", Value: []byte(tag)}}}
		sess.Produce(ctx, out, func(r *kgo.Record, err error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if err != nil {
				if !errors.Is(err, kgo.ErrAborting) {
					s.produceErrors[err.Error()]++
				}
				return
			}
			txn.perPartition[r.Partition]++
		})
	})
	commit := rng.IntN(5) != 0
	start := time.Now()
	committed, err := sess.End(ctx, kgo.TransactionEndTry(commit))
	took := time.Since(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endTimes = append(s.endTimes, took)
	switch {
	case err != nil:
		txn.outcome = txnUnknown
		s.unknown++
		t.Logf("%s: End: %v", tag, err)
		return true, false
	case committed:
		txn.outcome = txnCommitted
		s.committed++
		s.committedRecords.Add(int64(records))
	default:
		txn.outcome = txnAborted
		s.aborted++
	}
	return true, true
}

// copyRead is a topic as read_committed reads it: per partition, the
// values in offset order and the transaction tag of each.
type copyRead map[int32][]copyRecord

type copyRecord struct {
	value, tag string
	offset     int64
}

// readCommitted reads topic whole with read_committed, up to each
// partition's high watermark (markers included, so that the end is
// reached exactly).
func readCommitted(t *testing.T, ctx context.Context, c *strata.Cluster, topic string) copyRead {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var ends kadm.ListedOffsets
	poll.UntilStatus(t, time.Minute, "the end offsets of "+topic, func() (bool, string) {
		ends, err = kadm.NewClient(cl).ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		return err == nil, fmt.Sprint(err)
	})
	out := copyRead{}
	next := map[int32]int64{}
	remaining := func() bool {
		left := false
		ends.Each(func(o kadm.ListedOffset) {
			if next[o.Partition] < o.Offset {
				left = true
			}
		})
		return left
	}
	poll.UntilStatus(t, 2*time.Minute, "reading "+topic+" to its end", func() (bool, string) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		fetches.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			var tag string
			for _, h := range r.Headers {
				if h.Key == "txn" {
					tag = string(h.Value)
				}
			}
			out[r.Partition] = append(out[r.Partition], copyRecord{value: string(r.Value), tag: tag, offset: r.Offset})
		})
		return !remaining(), fmt.Sprint(next)
	})
	return out
}

// copyReport is one stage's result.
type copyReport struct {
	committed, aborted, unknown int
	records, want               int
	lost, duplicates            int
	mismatched                  []int32 // partitions whose copy is not their input's, once each, in order
	abortedReads                int
	intermediateReads           []string
	produceErrors               map[string]int
	diffs                       []string
	endMedian, endMax           time.Duration
}

func (r copyReport) ok() bool {
	return r.lost == 0 && r.duplicates == 0 && len(r.mismatched) == 0 && r.abortedReads == 0 && len(r.intermediateReads) == 0
}

func (r copyReport) String() string {
	return fmt.Sprintf("transactions committed %d, aborted %d, unknown %d (End: median %v, max %v); records read %d of %d; lost %d, duplicated %d, partitions not copied exactly %v, aborted reads %d, intermediate reads %d %v; produce errors %v; %v",
		r.committed, r.aborted, r.unknown, r.endMedian.Round(time.Millisecond), r.endMax.Round(time.Millisecond), r.records, r.want, r.lost, r.duplicates, r.mismatched, r.abortedReads, len(r.intermediateReads), head(r.intermediateReads), r.produceErrors, r.diffs)
}

func head[T any](s []T) []T { return s[:min(len(s), 5)] }

// check compares what the stage wrote (got) with the records of its
// input below the offsets its group committed (want), which the
// committed transactions copied: they must be there exactly once, in
// order, and nothing else.
func (s *copyStage) check(input copyRead, committed map[int32]int64, got copyRead) copyReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := copyReport{committed: s.committed, aborted: s.aborted, unknown: s.unknown, produceErrors: s.produceErrors}
	if n := len(s.endTimes); n > 0 {
		ends := slices.Sorted(slices.Values(s.endTimes))
		rep.endMedian, rep.endMax = ends[n/2], ends[n-1]
	}
	seen := map[string]map[int32]int{} // tag → partition → records read
	for p := range int32(6) {
		var w []string
		for _, rec := range input[p] {
			if rec.offset < committed[p] {
				w = append(w, rec.value)
			}
		}
		rep.want += len(w)
		rep.records += len(got[p])
		count := map[string]int{}
		var dedup []string
		for _, rec := range got[p] {
			count[rec.value]++
			if count[rec.value] == 1 {
				dedup = append(dedup, rec.value)
			} else {
				rep.duplicates++
			}
			if seen[rec.tag] == nil {
				seen[rec.tag] = map[int32]int{}
			}
			seen[rec.tag][p]++
		}
		for _, v := range w {
			if count[v] == 0 {
				rep.lost++
			}
		}
		if !slices.Equal(dedup, w) {
			rep.mismatched = append(rep.mismatched, p)
			i := 0
			for i < min(len(dedup), len(w)) && dedup[i] == w[i] {
				i++
			}
			var tags []string
			for _, rec := range got[p] {
				if rec.value >= dedup[min(i, len(dedup)-1)] && len(tags) < 5 {
					tags = append(tags, rec.tag+"@"+strconv.FormatInt(rec.offset, 10))
				}
			}
			rep.diffs = append(rep.diffs, fmt.Sprintf("p%d committed %d: the copy (%d) and the input (%d) differ from %d, records of %v",
				p, committed[p], len(dedup), len(w), i, tags))
		}
	}
	for tag, parts := range seen {
		txn := s.txns[tag]
		if txn == nil {
			continue
		}
		if txn.outcome == txnAborted {
			for _, n := range parts {
				rep.abortedReads += n
			}
			continue
		}
		if txn.outcome == txnCommitted {
			for p, n := range txn.perPartition {
				if parts[p] != n {
					rep.intermediateReads = append(rep.intermediateReads, tag+" p"+strconv.Itoa(int(p)))
				}
			}
		}
	}
	// A committed transaction none of whose records is visible.
	for tag, txn := range s.txns {
		if txn.outcome == txnCommitted && seen[tag] == nil && len(txn.perPartition) > 0 {
			rep.intermediateReads = append(rep.intermediateReads, tag+" (none visible)")
		}
	}
	return rep
}
