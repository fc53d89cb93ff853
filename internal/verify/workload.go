package verify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a run. Zero fields take the defaults in their
// comments.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// ClientOpts are added to every client the run opens (dial timeout,
	// TLS, SASL, logger, ...).
	ClientOpts []kgo.Opt
	// Topic is created by the run and must not exist; default
	// strata-verify-<run id>.
	Topic string
	// Partitions of the topic; default 6.
	Partitions int32
	// ReplicationFactor of the topic; default 3, or the number of brokers
	// when there are fewer. With 3 or more the topic gets
	// min.insync.replicas=2.
	ReplicationFactor int16
	// Producers (default 3), AssignedConsumers and GroupConsumers (none
	// by default) are how many of each run. Each producer is a client of
	// its own (its own producer id); each assigned consumer reads every
	// partition from the start; the group consumers share the topic in
	// one group. The final read runs in any case.
	Producers         int
	AssignedConsumers int
	GroupConsumers    int
	// Records stops producing after this many records in all; when 0,
	// producing stops after Duration (default 30 s).
	Records  int64
	Duration time.Duration
	// Rate is the records per second over all producers; 0 produces as
	// fast as the cluster takes them.
	Rate int
	// Acks are the producers' acks (default all). Idempotent turns on the
	// idempotent producer, which needs acks=all.
	Acks       kgo.Acks
	Idempotent bool
	// Transactional makes the run transactional (see txn.go): the
	// producers send in transactions and commit or abort them, every
	// consumer reads committed records only, and the group consumers are
	// a copy stage into the output topic <topic>-out. It needs acks=all.
	Transactional bool
	// AbortRate is the fraction of transactions the producers abort on
	// purpose; default 0.2 (1 aborts them all, a negative rate none).
	AbortRate float64
	// TxnRecords is the most records a producer's transaction holds (each
	// holds 1 to TxnRecords); default 10.
	TxnRecords int
	// DeliveryTimeout is how long a record may wait for its
	// acknowledgement before the producer fails it; default 30 s.
	DeliveryTimeout time.Duration
	// RequestTimeout bounds each admin request; default 10 s.
	RequestTimeout time.Duration
	// DrainTimeout bounds the end of the run: the wait for outstanding
	// acknowledgements, for the consumers to catch up, and each stretch
	// of the final read without progress; default 10 s.
	DrainTimeout time.Duration
	// KeepTopic keeps the topic after a valid run (an invalid one always
	// keeps it, for a post-mortem).
	KeepTopic bool
	// Progress, when set, receives a progress line every second and a
	// line at each phase of the run.
	Progress io.Writer
}

// ErrConfig is returned (wrapped) for a Config that cannot run.
var ErrConfig = errors.New("verify: bad configuration")

func (c *Config) setDefaults() error {
	if len(c.Brokers) == 0 {
		return fmt.Errorf("%w: no brokers", ErrConfig)
	}
	if c.Partitions == 0 {
		c.Partitions = 6
	}
	if c.Producers == 0 {
		c.Producers = 3
	}
	if c.Records == 0 && c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.Acks == (kgo.Acks{}) {
		c.Acks = kgo.AllISRAcks()
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = 30 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 10 * time.Second
	}
	switch {
	case c.Transactional && c.AbortRate == 0:
		c.AbortRate = 0.2
	case c.AbortRate < 0:
		c.AbortRate = 0
	}
	if c.TxnRecords == 0 {
		c.TxnRecords = 10
	}
	switch {
	case c.Partitions < 1:
		return fmt.Errorf("%w: partitions must be at least 1, not %d", ErrConfig, c.Partitions)
	case c.Producers < 1:
		return fmt.Errorf("%w: producers must be at least 1, not %d", ErrConfig, c.Producers)
	case c.AssignedConsumers < 0 || c.GroupConsumers < 0:
		return fmt.Errorf("%w: consumer counts must not be negative", ErrConfig)
	case c.Records < 0 || c.Duration < 0 || c.Rate < 0 || c.ReplicationFactor < 0:
		return fmt.Errorf("%w: records, duration, rate and replication factor must not be negative", ErrConfig)
	case c.Idempotent && c.Acks != kgo.AllISRAcks():
		return fmt.Errorf("%w: the idempotent producer needs acks=all", ErrConfig)
	case c.Transactional && c.Acks != kgo.AllISRAcks():
		return fmt.Errorf("%w: the transactional producer needs acks=all", ErrConfig)
	case c.AbortRate < 0 || c.AbortRate > 1 || c.TxnRecords < 1:
		return fmt.Errorf("%w: the abort rate must be within 0 to 1, and a transaction hold at least 1 record", ErrConfig)
	}
	return nil
}

// Verify runs the workload, checks its history, and deletes the topic if
// the run was valid and KeepTopic is not set. The history is returned
// whenever the run got as far as creating its topic, even with an error.
func Verify(ctx context.Context, cfg Config) (*History, *Result, error) {
	h, err := Run(ctx, cfg)
	if err != nil {
		return h, nil, err
	}
	res := Check(h)
	if res.Valid && !cfg.KeepTopic {
		r := runner{cfg: cfg}
		for _, topic := range []string{h.Topic, h.OutputTopic} {
			if topic == "" {
				continue
			}
			if err := r.deleteTopic(context.WithoutCancel(ctx), topic); err != nil {
				res.Warnings = append(res.Warnings, err.Error())
			}
		}
	}
	return h, res, nil
}

// runner is one run's state.
type runner struct {
	cfg   Config
	run   string
	topic string
	// outputTopic is the copy stage's (transactional runs).
	outputTopic string
	start       time.Time
	counters    counters
	// progressMu serializes the writes to cfg.Progress: the progress
	// line's goroutine and say, from any goroutine.
	progressMu sync.Mutex
}

// counters feed the progress line; each is updated with atomics.
type counters struct {
	sent, acked, failed, polled, errors atomic.Int64
}

func (r *runner) since() int64 { return int64(time.Since(r.start)) }

func (r *runner) client(extra ...kgo.Opt) (*kgo.Client, error) {
	opts := append([]kgo.Opt{kgo.SeedBrokers(r.cfg.Brokers...)}, r.cfg.ClientOpts...)
	return kgo.NewClient(append(opts, extra...)...)
}

func (r *runner) say(format string, args ...any) {
	if r.cfg.Progress != nil {
		r.progressMu.Lock()
		defer r.progressMu.Unlock()
		fmt.Fprintf(r.cfg.Progress, "verify: "+format+"\n", args...)
	}
}

// Run creates the topic, runs the producers and consumers, then reads
// everything back, and returns the history. Canceling ctx ends the
// producing early; the acknowledgements still outstanding, the consumers'
// catching up and the final read then run, bounded by DrainTimeout.
func Run(ctx context.Context, cfg Config) (*History, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, run: newRunID()}
	r.topic = cfg.Topic
	if r.topic == "" {
		r.topic = "strata-verify-" + r.run
	}
	h := &History{Run: r.run, Topic: r.topic, Partitions: cfg.Partitions, Transactional: cfg.Transactional}
	if cfg.Transactional {
		r.outputTopic = r.topic + "-out"
		h.OutputTopic = r.outputTopic
		if _, err := r.createTopic(ctx, r.outputTopic); err != nil {
			return nil, err
		}
	}
	rf, err := r.createTopic(ctx, r.topic)
	if err != nil {
		return nil, err
	}
	r.cfg.ReplicationFactor = rf
	h.ReplicationFactor = rf
	r.say("topic %s: %d partitions, replication factor %d", r.topic, cfg.Partitions, rf)
	r.start = time.Now()

	stopProgress := r.progress()
	defer stopProgress()

	consumeCtx, stopConsumers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopConsumers()
	var consumers []*consumerLog
	var cwg sync.WaitGroup
	fail := func(err error) (*History, error) {
		stopConsumers()
		cwg.Wait()
		return h, err
	}
	for i := range cfg.AssignedConsumers {
		c, err := r.startAssigned(consumeCtx, &cwg, fmt.Sprintf("assigned-%d", i))
		if err != nil {
			return fail(err)
		}
		consumers = append(consumers, c)
	}
	group := "strata-verify-" + r.run
	stage := &copyStage{past: map[int32]int64{}}
	copyCtx, stopCopiers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCopiers()
	var copiers sync.WaitGroup
	for i := range cfg.GroupConsumers {
		var c *consumerLog
		var err error
		if cfg.Transactional {
			c, err = r.startCopier(copyCtx, &copiers, i, group, stage)
		} else {
			c, err = r.startGroup(consumeCtx, &cwg, fmt.Sprintf("group-%d", i), group)
		}
		if err != nil {
			stopCopiers()
			copiers.Wait()
			return fail(err)
		}
		consumers = append(consumers, c)
	}

	produceCtx := ctx
	if cfg.Records == 0 {
		var cancel context.CancelFunc
		produceCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	if cfg.Transactional {
		var logs []*txnLog
		logs, err = r.produceTxnAll(produceCtx)
		for _, l := range logs {
			h.Sends = append(h.Sends, l.sends...)
			h.Txns = append(h.Txns, l.txns...)
		}
	} else {
		var logs []*producerLog
		logs, err = r.produceAll(produceCtx)
		for _, l := range logs {
			h.Sends = append(h.Sends, l.sends...)
		}
	}
	if err != nil {
		stopCopiers()
		copiers.Wait()
		return fail(err)
	}

	post := context.WithoutCancel(ctx)
	starts, ends, err := r.offsets(post, r.topic)
	if err != nil {
		h.Warnings = append(h.Warnings, fmt.Sprintf("no final read: %v", err))
	} else {
		r.say("waiting up to %s for the consumers to catch up", cfg.DrainTimeout)
		r.drain(consumers, starts, ends)
		if cfg.Transactional && cfg.GroupConsumers > 0 {
			r.drainCopies(stage, h)
		}
	}
	stopCopiers()
	copiers.Wait()
	h.Copies = stage.snapshot()
	stopConsumers()
	cwg.Wait()
	for _, c := range consumers {
		h.Consumers = append(h.Consumers, c.consumer())
	}
	if err == nil {
		r.say("reading every partition from its start to its end")
		r.readFinal(post, h, r.topic, starts, ends)
	}
	if err == nil && cfg.Transactional {
		if starts, ends, err := r.offsets(post, r.outputTopic); err != nil {
			h.Warnings = append(h.Warnings, fmt.Sprintf("no final read of %s: %v", r.outputTopic, err))
		} else {
			r.readFinal(post, h, r.outputTopic, starts, ends)
		}
	}
	return h, nil
}

// readFinal reads topic from starts to ends into h.
func (r *runner) readFinal(ctx context.Context, h *History, topic string, starts, ends map[int32]int64) {
	final, reads, err := r.finalRead(ctx, topic, starts, ends)
	if err != nil {
		h.Warnings = append(h.Warnings, fmt.Sprintf("final read of %s: %v", topic, err))
	}
	if final != nil {
		h.Consumers = append(h.Consumers, final.consumer())
	}
	h.Final = append(h.Final, reads...)
}

// drainCopies waits, up to DrainTimeout, until the copy stage has
// committed copies up to every partition's last record of a committed
// transaction.
func (r *runner) drainCopies(stage *copyStage, h *History) {
	committed := map[txnKey]bool{}
	for _, t := range h.Txns {
		if t.Outcome == OutcomeCommitted {
			committed[txnKey{t.Producer, t.ID}] = true
		}
	}
	last := map[int32]int64{}
	for _, s := range h.Sends {
		if s.Acked && committed[txnKey{s.Producer, s.Txn}] {
			last[s.Partition] = max(last[s.Partition], s.Offset)
		}
	}
	r.say("waiting up to %s for the copy stage to catch up", r.cfg.DrainTimeout)
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	for !stage.caughtUp(last) {
		if time.Now().After(deadline) {
			r.say("the copy stage had not caught up after %s", r.cfg.DrainTimeout)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// createTopic creates the run's topic and waits until every partition has
// a leader; it returns the replication factor used.
func (r *runner) createTopic(ctx context.Context, topic string) (int16, error) {
	cl, err := r.client()
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(int32(r.cfg.RequestTimeout / time.Millisecond))
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	rf := r.cfg.ReplicationFactor
	if rf == 0 {
		md, err := adm.BrokerMetadata(rctx)
		if err != nil {
			return 0, fmt.Errorf("verify: asking for the brokers: %w", err)
		}
		rf = int16(min(3, len(md.Brokers)))
	}
	configs := map[string]*string{}
	if rf >= 3 {
		two := "2"
		configs["min.insync.replicas"] = &two
	}
	resp, err := adm.CreateTopic(rctx, r.cfg.Partitions, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return 0, fmt.Errorf("verify: topic %s exists; verify needs a topic of its own", topic)
	}
	if err != nil {
		msg := ""
		if resp.ErrMessage != "" {
			msg = " (" + resp.ErrMessage + ")"
		}
		return 0, fmt.Errorf("verify: creating topic %s: %w%s", topic, err, msg)
	}
	for {
		md, err := adm.ListTopics(rctx, topic)
		if err == nil {
			if d, ok := md[topic]; ok && d.Err == nil && len(d.Partitions) == int(r.cfg.Partitions) && allLed(d) {
				return rf, nil
			}
		}
		select {
		case <-rctx.Done():
			return 0, fmt.Errorf("verify: topic %s created, but its partitions have no leaders after %s", topic, r.cfg.RequestTimeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func allLed(d kadm.TopicDetail) bool {
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

func (r *runner) deleteTopic(ctx context.Context, topic string) error {
	cl, err := r.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	resp, err := kadm.NewClient(cl).DeleteTopic(rctx, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("deleting topic %s: %v", topic, err)
	}
	return nil
}

// offsets lists every partition's start and end offsets.
func (r *runner) offsets(ctx context.Context, topic string) (starts, ends map[int32]int64, err error) {
	cl, err := r.client()
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	collect := func(list func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[int32]int64, error) {
		lo, err := list(rctx, topic)
		if err == nil {
			err = lo.Error()
		}
		if err != nil {
			return nil, err
		}
		out := map[int32]int64{}
		lo.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		if len(out) != int(r.cfg.Partitions) {
			return nil, fmt.Errorf("listed offsets of %d partitions, want %d", len(out), r.cfg.Partitions)
		}
		return out, nil
	}
	if starts, err = collect(adm.ListStartOffsets); err != nil {
		return nil, nil, fmt.Errorf("listing start offsets: %w", err)
	}
	if ends, err = collect(adm.ListEndOffsets); err != nil {
		return nil, nil, fmt.Errorf("listing end offsets: %w", err)
	}
	return starts, ends, nil
}

// progress prints a line a second until the returned func is called.
func (r *runner) progress() func() {
	if r.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last [5]int64
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			c := &r.counters
			now := [5]int64{c.sent.Load(), c.acked.Load(), c.failed.Load(), c.polled.Load(), c.errors.Load()}
			r.progressMu.Lock()
			fmt.Fprintf(r.cfg.Progress, "verify %3ds: sent %d/s, acked %d/s, read %d/s, errors %d/s (total: sent %d, acked %d, failed %d, read %d, errors %d)\n",
				int(time.Since(r.start).Seconds()), now[0]-last[0], now[1]-last[1], now[3]-last[3], now[2]-last[2]+now[4]-last[4],
				now[0], now[1], now[2], now[3], now[4])
			r.progressMu.Unlock()
			last = now
		}
	}()
	return func() { close(done); wg.Wait() }
}

// partitionsOf lists partitions 0..n-1.
func partitionsOf(n int32) []int32 {
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(i)
	}
	return ps
}

// sortedPartitions returns m's keys in order.
func sortedPartitions[V any](m map[int32]V) []int32 {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}
