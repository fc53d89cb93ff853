package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The transactional workload. Each producer is a transactional client of
// its own (ProducerTransactionalID) that sends one to
// TxnRecords records per transaction and then commits it or, with
// probability AbortRate, aborts it; the consumers read committed records
// only. The group consumers are the copy stage: a GroupTransactSession
// each (CopierTransactionalID), reading the topic and
// writing every record read to the same partition of the output topic in
// one transaction with the group's offset commit, as Kafka Streams'
// exactly-once consume-transform-produce does.

// ProducerTransactionalID is the transactional id of producer n of a run
// on topic (which is the run's own, so the ids are too).
func ProducerTransactionalID(topic string, n int) string { return fmt.Sprintf("%s-p%d", topic, n) }

// CopierTransactionalID is the transactional id of member n of the copy
// stage of a run on topic.
func CopierTransactionalID(topic string, n int) string { return fmt.Sprintf("%s-c%d", topic, n) }

// txnLog is one transactional producer's sends and transactions; mu
// guards both (franz-go's promises fill in the sends).
type txnLog struct {
	producerLog
	txns []Txn
}

// isolation are the options of every consumer of a transactional run:
// read committed, and keep the control records, whose offsets tell a
// reader it got to a partition's end (the last offset is a marker).
func (r *runner) isolation() []kgo.Opt {
	if !r.cfg.Transactional {
		return nil
	}
	return []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}
}

func (r *runner) txnClient(id int) (*kgo.Client, error) {
	return r.client(
		kgo.ClientID(fmt.Sprintf("strata-verify-producer-%d", id)),
		kgo.TransactionalID(ProducerTransactionalID(r.topic, id)),
		kgo.DefaultProduceTopic(r.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(r.cfg.DeliveryTimeout),
		kgo.MaxBufferedRecords(1000),
	)
}

// produceTxnAll runs the transactional producers until ctx ends or the
// records are all sent; each ends its open transaction before it stops.
func (r *runner) produceTxnAll(ctx context.Context) ([]*txnLog, error) {
	clients := make([]*kgo.Client, r.cfg.Producers)
	for i := range clients {
		cl, err := r.txnClient(i)
		if err != nil {
			for _, cl := range clients[:i] {
				cl.Close()
			}
			return nil, fmt.Errorf("verify: starting producer %d: %w", i, err)
		}
		clients[i] = cl
	}
	logs := make([]*txnLog, len(clients))
	var claimed atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		logs[i] = &txnLog{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produceTxns(ctx, i, clients[i], logs[i], &claimed)
		}()
	}
	wg.Wait()
	for i, l := range logs {
		l.mu.Lock()
		logs[i] = &txnLog{producerLog: producerLog{sends: slices.Clone(l.sends)}, txns: slices.Clone(l.txns)}
		l.mu.Unlock()
	}
	return logs, nil
}

// produceTxns is one producer's transactions. A transaction whose end
// fails is aborted again, and if that fails too the client is replaced
// by a new one with the same transactional id, which fences the old one
// and aborts what it left open.
func (r *runner) produceTxns(ctx context.Context, id int, cl *kgo.Client, log *txnLog, claimed *atomic.Int64) {
	defer func() { cl.Close() }()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id)))
	rate := float64(r.cfg.Rate) / float64(r.cfg.Producers)
	t0 := time.Now()
	seq := int64(0)
	for txnID := int64(1); ctx.Err() == nil; txnID++ {
		if err := cl.BeginTransaction(); err != nil {
			r.say("producer %d: beginning transaction %d: %v; starting a new client", id, txnID, err)
			cl = r.replaceTxnClient(ctx, id, cl)
			if cl == nil {
				return
			}
			continue
		}
		n := 1 + rng.IntN(r.cfg.TxnRecords)
		var failures atomic.Int64
		sent := 0
		for range n {
			if r.cfg.Records > 0 && claimed.Add(1) > r.cfg.Records {
				break
			}
			if !pace(ctx, t0, seq, rate) {
				break
			}
			r.sendTxn(cl, id, seq, txnID, log, &failures)
			seq++
			sent++
		}
		commit := rng.Float64() >= r.cfg.AbortRate
		if sent == 0 {
			commit = false
		}
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DeliveryTimeout)
		if err := cl.Flush(flushCtx); err != nil || failures.Load() > 0 {
			commit = false
		}
		cancel()
		t := Txn{Producer: id, ID: txnID, EndNanos: r.since()}
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DeliveryTimeout)
		err := cl.EndTransaction(endCtx, kgo.TransactionEndTry(commit))
		cancel()
		t.DoneNanos = r.since()
		switch {
		case err == nil && commit:
			t.Outcome = OutcomeCommitted
		case !commit:
			// Never asked to commit: aborted, whether or not the abort
			// was confirmed (the coordinator aborts it by its timeout or
			// when the next client with this id fences this one).
			t.Outcome = OutcomeAborted
		default:
			t.Outcome = OutcomeUnknown
		}
		if err != nil {
			t.Error = strings.Join(strings.Fields(err.Error()), " ")
		}
		if sent > 0 {
			log.mu.Lock()
			log.txns = append(log.txns, t)
			log.mu.Unlock()
		}
		if err != nil {
			abortCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DeliveryTimeout)
			aerr := cl.EndTransaction(abortCtx, kgo.TryAbort)
			cancel()
			if aerr != nil {
				cl = r.replaceTxnClient(ctx, id, cl)
				if cl == nil {
					return
				}
			}
		}
		if r.cfg.Records > 0 && claimed.Load() >= r.cfg.Records {
			return
		}
	}
}

// replaceTxnClient closes cl and starts a new client with its
// transactional id; nil when ctx ended first.
func (r *runner) replaceTxnClient(ctx context.Context, id int, cl *kgo.Client) *kgo.Client {
	cl.Close()
	for ctx.Err() == nil {
		next, err := r.txnClient(id)
		if err == nil {
			return next
		}
		r.say("producer %d: starting a new client: %v", id, err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

func (r *runner) sendTxn(cl *kgo.Client, id int, seq, txnID int64, log *txnLog, failures *atomic.Int64) {
	p := int32((seq + int64(id)) % int64(r.cfg.Partitions))
	value := Value(r.run, id, seq)
	log.mu.Lock()
	i := len(log.sends)
	log.sends = append(log.sends, Send{Producer: id, Seq: seq, Partition: p, Value: value, Offset: -1, SentNanos: r.since(), Txn: txnID})
	log.mu.Unlock()
	r.counters.sent.Add(1)
	rec := &kgo.Record{Topic: r.topic, Partition: p, Key: []byte("k" + strconv.Itoa(int(p))), Value: []byte(value)}
	cl.Produce(context.Background(), rec, func(rec *kgo.Record, err error) {
		at := r.since()
		log.mu.Lock()
		s := &log.sends[i]
		s.AnswerNanos = at
		if err != nil {
			s.Error = strings.Join(strings.Fields(err.Error()), " ")
		} else {
			s.Acked, s.Offset = true, rec.Offset
			s.ProducerID, s.ProducerEpoch = rec.ProducerID, rec.ProducerEpoch
		}
		log.mu.Unlock()
		if err != nil {
			failures.Add(1)
			r.counters.failed.Add(1)
		} else {
			r.counters.acked.Add(1)
		}
	})
}

// pace waits until record seq's time on a schedule of rate records a
// second from t0 (not from the previous send, so that a slow
// acknowledgement does not lower the rate); false when ctx ended first.
func pace(ctx context.Context, t0 time.Time, seq int64, rate float64) bool {
	if rate <= 0 {
		return ctx.Err() == nil
	}
	wait := time.Until(t0.Add(time.Duration(float64(seq) / rate * float64(time.Second))))
	if wait <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// copyStage is the copy stage's transactions; mu guards them.
type copyStage struct {
	mu     sync.Mutex
	copies []CopyTxn
	// past is, per partition, the highest input offset a committed copy
	// transaction holds.
	past map[int32]int64
}

func (s *copyStage) add(ct CopyTxn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.copies = append(s.copies, ct)
	if ct.Outcome != OutcomeCommitted {
		return
	}
	for _, in := range ct.Inputs {
		if past, ok := s.past[in.Partition]; !ok || in.Offset > past {
			s.past[in.Partition] = in.Offset
		}
	}
}

// caughtUp says whether, in every partition, a committed copy holds an
// input at or past last's offset.
func (s *copyStage) caughtUp(last map[int32]int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, off := range last {
		if past, ok := s.past[p]; !ok || past < off {
			return false
		}
	}
	return true
}

func (s *copyStage) snapshot() []CopyTxn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.copies)
}

func (r *runner) copySession(id int, group string, log *consumerLog) (*kgo.GroupTransactSession, error) {
	changed := func(typ string, m map[string][]int32) {
		if ps := slices.Sorted(slices.Values(m[r.topic])); len(ps) > 0 {
			log.add(Event{Type: typ, Nanos: r.since(), Partitions: ps})
		}
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(r.cfg.Brokers...)}, r.cfg.ClientOpts...)
	opts = append(opts,
		kgo.ClientID(fmt.Sprintf("strata-verify-copier-%d", id)),
		kgo.TransactionalID(CopierTransactionalID(r.topic, id)),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(r.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(r.cfg.DeliveryTimeout),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { changed(EventAssigned, m) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { changed(EventRevoked, m) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { changed(EventRevoked, m) }),
	)
	return kgo.NewGroupTransactSession(opts...)
}

// startCopier starts a member of the copy stage.
func (r *runner) startCopier(ctx context.Context, wg *sync.WaitGroup, id int, group string, stage *copyStage) (*consumerLog, error) {
	log := newConsumerLog(fmt.Sprintf("copier-%d", id), KindCopier)
	s, err := r.copySession(id, group, log)
	if err != nil {
		return nil, fmt.Errorf("verify: starting copier %d: %w", id, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.copyLoop(ctx, id, group, s, log, stage)
	}()
	return log, nil
}

// copyLoop copies what each poll returns in one transaction. A session
// whose End fails is replaced by a new one with the same transactional
// id (franz-go: no error of End is retryable).
func (r *runner) copyLoop(ctx context.Context, id int, group string, s *kgo.GroupTransactSession, log *consumerLog, stage *copyStage) {
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	for txnID := int64(1); ; {
		fetches := s.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		r.logFetches(fetches, log)
		var inputs []Input
		fetches.EachRecord(func(rec *kgo.Record) {
			if !rec.Attrs.IsControl() {
				inputs = append(inputs, Input{Partition: rec.Partition, Offset: rec.Offset, Value: string(rec.Value)})
			}
		})
		if len(inputs) == 0 {
			continue
		}
		ct := CopyTxn{Copier: id, ID: txnID, Inputs: inputs}
		txnID++
		err := s.Begin()
		if err == nil {
			for _, in := range inputs {
				s.Produce(context.Background(), &kgo.Record{Topic: r.outputTopic, Partition: in.Partition, Value: []byte(CopyValue(in.Value, id, ct.ID))}, nil)
			}
			ct.EndNanos = r.since()
			endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DeliveryTimeout)
			var committed bool
			committed, err = s.End(endCtx, kgo.TryCommit)
			cancel()
			ct.DoneNanos = r.since()
			switch {
			case err != nil:
				ct.Outcome = OutcomeUnknown
			case committed:
				ct.Outcome = OutcomeCommitted
			default:
				ct.Outcome = OutcomeAborted
			}
		} else {
			ct.Outcome = OutcomeAborted
		}
		if err != nil {
			ct.Error = strings.Join(strings.Fields(err.Error()), " ")
		}
		stage.add(ct)
		if err == nil {
			continue
		}
		r.say("copier %d: transaction %d: %v; starting a new session", id, ct.ID, err)
		s.Close()
		for {
			if ctx.Err() != nil {
				s = nil
				return
			}
			if s, err = r.copySession(id, group, log); err == nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}
