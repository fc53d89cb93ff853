package txn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

// StatePartition is the seam to one __transaction_state partition this
// broker leads; the broker implements it over the partition's replica.
// Append and ReadBatches are called from one goroutine per loaded partition
// at a time, never with a lock of this package held.
type StatePartition interface {
	// Append appends one record batch built by this package and returns
	// once it is committed (acks=all) or failed, or when ctx ends. Errors
	// should wrap the *kerr.Error a produce would get.
	Append(ctx context.Context, batch []byte) error
	// ReadBatches calls fn with each batch from offset from, in order,
	// until fn returns false or the log ends.
	ReadBatches(from int64, fn func(batch []byte) bool) error
}

// MarkerWriter writes a transaction's markers: WriteTxnMarkers to the
// leader of each partition. It returns nil once every partition has its
// marker (or no longer exists); any error makes the coordinator retry the
// whole set after a backoff, which partitions tolerate (a marker for a
// producer with no open transaction is a no-op there). It may be called
// from many goroutines at once.
type MarkerWriter interface {
	WriteMarkers(ctx context.Context, mk Markers) error
}

// Deps is what the coordinator needs from the broker.
type Deps struct {
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// NewProducerID hands out a never used producer id.
	NewProducerID func() (int64, error)
	Markers       MarkerWriter
	// MarkerBackoff is how long a failed marker write waits before the
	// retry; 0 means 100 ms.
	MarkerBackoff time.Duration
}

// errUnloaded completes writes of a shard that stopped being loaded.
var errUnloaded = errors.New("txn: __transaction_state partition unloaded")

// Coordinator is the transaction coordinator of one broker: one shard per
// __transaction_state partition it leads. Its methods are safe for
// concurrent use.
//
// Lock order: Coordinator.mu, then shard.mu; neither is held across I/O.
type Coordinator struct {
	cfg  Config
	deps Deps

	mu     sync.RWMutex
	shards map[int32]*shard
	closed bool
}

// NewCoordinator returns a coordinator with no partition loaded. cfg must
// pass Validate.
func NewCoordinator(cfg Config, deps Deps) *Coordinator {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.MarkerBackoff <= 0 {
		deps.MarkerBackoff = 100 * time.Millisecond
	}
	return &Coordinator{cfg: cfg, deps: deps, shards: make(map[int32]*shard)}
}

// Config returns the coordinator's configuration.
func (c *Coordinator) Config() Config { return c.cfg }

// PartitionFor is the __transaction_state partition of a transactional id.
func (c *Coordinator) PartitionFor(id string) int32 { return PartitionFor(id, c.cfg.NumPartitions) }

type shardStatus uint8

const (
	shardLoading shardStatus = iota
	shardActive
	shardUnloaded
	shardFailed
)

// shard is one loaded __transaction_state partition: the Machine and its
// edges (one writer goroutine, one ticker, a goroutine per marker set).
type shard struct {
	c         *Coordinator
	partition int32
	log       StatePartition
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu     sync.Mutex
	status shardStatus
	m      *Machine
	queue  []queued
	wake   chan struct{}
	// completions are EndTxn requests waiting for their transaction to
	// complete, by transactional id; closed once it no longer is
	// PrepareCommit or PrepareAbort, or the shard unloads.
	completions map[string][]chan struct{}
}

type queued struct {
	w    *Write
	done chan error // nil when no one waits
}

// Load starts serving partition, led here at leaderEpoch (the coordinator
// epoch markers carry). A shard already loaded for it is unloaded first.
func (c *Coordinator) Load(partition int32, leaderEpoch int32, p StatePartition) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	old := c.shards[partition]
	ctx, cancel := context.WithCancel(context.Background())
	s := &shard{c: c, partition: partition, log: p, ctx: ctx, cancel: cancel,
		m: NewMachine(c.cfg, leaderEpoch), wake: make(chan struct{}, 1), completions: map[string][]chan struct{}{}}
	c.shards[partition] = s
	c.mu.Unlock()
	if old != nil {
		old.unload()
	}
	s.wg.Add(1)
	go s.load()
}

// Unload stops serving partition: waiters get NOT_COORDINATOR.
func (c *Coordinator) Unload(partition int32) {
	c.mu.Lock()
	s := c.shards[partition]
	delete(c.shards, partition)
	c.mu.Unlock()
	if s != nil {
		s.unload()
	}
}

// Close unloads every partition.
func (c *Coordinator) Close() {
	c.mu.Lock()
	c.closed = true
	shards := c.shards
	c.shards = make(map[int32]*shard)
	c.mu.Unlock()
	for _, s := range shards {
		s.unload()
	}
}

func (s *shard) logger() *slog.Logger { return s.c.deps.Logger.With("partition", s.partition) }

func (s *shard) load() {
	defer s.wg.Done()
	m := NewMachine(s.c.cfg, s.m.coordinatorEpoch)
	var replayErr error
	err := s.log.ReadBatches(0, func(batch []byte) bool {
		if s.ctx.Err() != nil {
			return false
		}
		h, err := record.ParseHeader(batch)
		if err != nil {
			replayErr = err
			return false
		}
		if h.IsControl() {
			return true
		}
		replayErr = record.Records(batch, func(_, _ int64, r *kmsg.Record) error { return m.Replay(r.Key, r.Value) })
		return replayErr == nil
	})
	if err == nil {
		err = replayErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != shardLoading {
		return
	}
	if err != nil {
		s.status = shardFailed
		s.logger().Error("loading transaction coordinator partition failed", "err", err)
		return
	}
	s.m = m
	s.status = shardActive
	s.logger().Info("loaded transaction coordinator partition", "transactional.ids", len(m.txns))
	for _, mk := range m.Loaded() {
		s.sendMarkersLocked(mk)
	}
	s.wg.Add(2)
	go s.writeLoop()
	go s.tickLoop()
}

func (s *shard) unload() {
	s.mu.Lock()
	if s.status == shardUnloaded {
		s.mu.Unlock()
		return
	}
	s.status = shardUnloaded
	queue := s.queue
	s.queue = nil
	for id, chs := range s.completions {
		for _, ch := range chs {
			close(ch)
		}
		delete(s.completions, id)
	}
	s.mu.Unlock()
	s.cancel()
	for _, q := range queue {
		if q.done != nil {
			q.done <- errUnloaded
		}
	}
}

// enqueueLocked queues w for the writer; s.mu must be held.
func (s *shard) enqueueLocked(w *Write, done chan error) {
	s.queue = append(s.queue, queued{w, done})
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// writeLoop appends queued records in order and completes their
// transitions.
func (s *shard) writeLoop() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		if s.status != shardActive {
			s.mu.Unlock()
			return
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-s.wake:
				continue
			case <-s.ctx.Done():
				return
			}
		}
		q := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()

		batch := record.Build(nil, []record.Rec{{Key: q.w.Key, Value: q.w.Value, Timestamp: s.c.deps.Now().UnixMilli()}})
		err := s.log.Append(s.ctx, batch)
		s.mu.Lock()
		if s.status != shardActive {
			err = errUnloaded
		}
		for _, mk := range s.m.Written(q.w, err) {
			s.sendMarkersLocked(mk)
		}
		if t := s.m.txns[q.w.TransactionalID]; t == nil || t.State != PrepareCommit && t.State != PrepareAbort {
			for _, ch := range s.completions[q.w.TransactionalID] {
				close(ch)
			}
			delete(s.completions, q.w.TransactionalID)
		}
		s.mu.Unlock()
		if err != nil {
			s.logger().Warn("writing transaction state", "transactional.id", q.w.TransactionalID, "err", err)
		}
		if q.done != nil {
			q.done <- err
		}
	}
}

// sendMarkersLocked starts writing a transaction's markers; s.mu must be
// held.
func (s *shard) sendMarkersLocked(mk Markers) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			err := s.c.deps.Markers.WriteMarkers(s.ctx, mk)
			if err == nil {
				break
			}
			s.logger().Debug("writing transaction markers", "transactional.id", mk.TransactionalID, "err", err)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(s.c.deps.MarkerBackoff):
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.status != shardActive {
			return
		}
		if w := s.m.MarkersWritten(mk, s.c.deps.Now().UnixMilli()); w != nil {
			s.enqueueLocked(w, nil)
		}
	}()
}

// tickLoop aborts timed-out transactions and removes expired ids.
func (s *shard) tickLoop() {
	defer s.wg.Done()
	abort := time.NewTicker(time.Duration(s.c.cfg.AbortTimedOutIntervalMs) * time.Millisecond)
	defer abort.Stop()
	remove := time.NewTicker(time.Duration(s.c.cfg.RemoveExpiredIntervalMs) * time.Millisecond)
	defer remove.Stop()
	for {
		var a, r bool
		select {
		case <-s.ctx.Done():
			return
		case <-abort.C:
			a = true
		case <-remove.C:
			r = true
		}
		s.mu.Lock()
		if s.status == shardActive {
			for _, w := range s.m.Tick(s.c.deps.Now().UnixMilli(), a, r) {
				if w.next.State == PrepareAbort {
					s.logger().Info("aborting timed-out transaction", "transactional.id", w.TransactionalID)
				}
				s.enqueueLocked(w, nil)
			}
		}
		s.mu.Unlock()
	}
}

// shardFor returns the shard of a transactional id, or the error Kafka
// answers when it is not served here.
func (c *Coordinator) shardFor(id string) (*shard, error) {
	c.mu.RLock()
	closed := c.closed
	s := c.shards[c.PartitionFor(id)]
	c.mu.RUnlock()
	switch {
	case closed:
		return nil, kerr.CoordinatorNotAvailable
	case s == nil:
		return nil, fmt.Errorf("%w: %q is not coordinated here", kerr.NotCoordinator, id)
	}
	return s, nil
}

// do runs fn on the shard's machine and waits for the write its result
// asks for.
func (c *Coordinator) do(ctx context.Context, id string, fn func(m *Machine, nowMs int64) Result) Result {
	return c.doShard(ctx, id, func(_ *shard, m *Machine, nowMs int64) Result { return fn(m, nowMs) })
}

// doShard is do for a fn that also needs the shard (locked).
func (c *Coordinator) doShard(ctx context.Context, id string, fn func(s *shard, m *Machine, nowMs int64) Result) Result {
	s, err := c.shardFor(id)
	if err != nil {
		return Result{Err: err, ProducerID: -1, ProducerEpoch: -1}
	}
	s.mu.Lock()
	switch s.status {
	case shardLoading:
		s.mu.Unlock()
		return Result{Err: kerr.CoordinatorLoadInProgress, ProducerID: -1, ProducerEpoch: -1}
	case shardActive:
	default:
		s.mu.Unlock()
		return Result{Err: kerr.NotCoordinator, ProducerID: -1, ProducerEpoch: -1}
	}
	res := fn(s, s.m, c.deps.Now().UnixMilli())
	if res.Write == nil {
		s.mu.Unlock()
		return res
	}
	done := make(chan error, 1)
	s.enqueueLocked(res.Write, done)
	s.mu.Unlock()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return Result{Err: appendError(err), ProducerID: -1, ProducerEpoch: -1}
	}
	return res
}

// appendError is the error a request gets when its write failed, as
// Kafka's TransactionStateManager maps them.
func appendError(err error) error {
	if errors.Is(err, errUnloaded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %v", kerr.NotCoordinator, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %v", kerr.CoordinatorNotAvailable, err)
	}
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return fmt.Errorf("%w: %v", kerr.UnknownServerError, err)
	}
	switch ke {
	case kerr.UnknownTopicOrPartition, kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend, kerr.RequestTimedOut:
		return fmt.Errorf("%w: %v", kerr.CoordinatorNotAvailable, err)
	case kerr.NotLeaderForPartition, kerr.KafkaStorageError:
		return fmt.Errorf("%w: %v", kerr.NotCoordinator, err)
	case kerr.MessageTooLarge, kerr.RecordListTooLarge:
		return fmt.Errorf("%w: %v", kerr.UnknownServerError, err)
	}
	return err
}

// InitProducerID answers InitProducerId for a transactional id.
func (c *Coordinator) InitProducerID(ctx context.Context, r InitProducerIDRequest) (int64, int16, error) {
	r.FreshProducerID = -1
	for range 2 {
		res := c.do(ctx, r.TransactionalID, func(m *Machine, nowMs int64) Result {
			r.NowMs = nowMs
			return m.InitProducerID(r)
		})
		if !res.NeedProducerID {
			return res.ProducerID, res.ProducerEpoch, res.Err
		}
		id, err := c.deps.NewProducerID()
		if err != nil {
			return -1, -1, err
		}
		r.FreshProducerID = id
	}
	return -1, -1, fmt.Errorf("%w: no producer id", kerr.ConcurrentTransactions)
}

// AddPartitions answers AddPartitionsToTxn for one transaction (and
// AddOffsetsToTxn). A non-nil error applies to every partition; otherwise
// the map holds the partitions that failed verification.
func (c *Coordinator) AddPartitions(ctx context.Context, id string, producerID int64, epoch int16, tps []TopicPartition, verifyOnly bool) (map[TopicPartition]error, error) {
	var errs map[TopicPartition]error
	res := c.do(ctx, id, func(m *Machine, nowMs int64) Result {
		var r Result
		r, errs = m.AddPartitions(id, producerID, epoch, tps, verifyOnly, nowMs)
		return r
	})
	return errs, res.Err
}

// AddPartitionsImplicitly adds partitions to a transactions-v2
// transaction for a partition leader (Machine.AddPartitionsImplicitly).
func (c *Coordinator) AddPartitionsImplicitly(ctx context.Context, id string, producerID int64, epoch int16, tps []TopicPartition) error {
	return c.do(ctx, id, func(m *Machine, nowMs int64) Result {
		return m.AddPartitionsImplicitly(id, producerID, epoch, tps, nowMs)
	}).Err
}

// completionWait bounds how long EndTxn waits for the markers after the
// decision is written.
const completionWait = 5 * time.Second

// EndTxn answers EndTxn with the producer id and epoch the producer goes
// on with (the request's with transactions v1; with v2, r.V2, the bumped
// epoch or a new id). The transaction is decided once its PrepareCommit
// or PrepareAbort is written; the answer then also waits (up to
// completionWait) for the markers and the Complete record, so that the
// producer's next transaction does not start with CONCURRENT_TRANSACTIONS
// and a retry backoff (Kafka answers at once).
func (c *Coordinator) EndTxn(ctx context.Context, r EndTxnRequest) (int64, int16, error) {
	r.FreshProducerID = -1
	var done chan struct{}
	var res Result
	for range 2 {
		res = c.doShard(ctx, r.TransactionalID, func(s *shard, m *Machine, nowMs int64) Result {
			r.NowMs = nowMs
			res := m.EndTxn(r)
			if res.Err == nil && res.Write != nil {
				done = make(chan struct{})
				s.completions[r.TransactionalID] = append(s.completions[r.TransactionalID], done)
			}
			return res
		})
		if !res.NeedProducerID {
			break
		}
		id, err := c.deps.NewProducerID()
		if err != nil {
			return -1, -1, err
		}
		r.FreshProducerID = id
	}
	if res.NeedProducerID {
		return -1, -1, fmt.Errorf("%w: no producer id", kerr.ConcurrentTransactions)
	}
	if res.Err == nil && done != nil {
		t := time.NewTimer(completionWait)
		defer t.Stop()
		select {
		case <-done:
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return res.ProducerID, res.ProducerEpoch, res.Err
}

// Describe returns a transactional id's metadata for DescribeTransactions.
func (c *Coordinator) Describe(id string) (Metadata, error) {
	s, err := c.shardFor(id)
	if err != nil {
		return Metadata{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.status {
	case shardLoading:
		return Metadata{}, kerr.CoordinatorLoadInProgress
	case shardActive:
	default:
		return Metadata{}, kerr.NotCoordinator
	}
	md, ok := s.m.Get(id)
	if !ok {
		return Metadata{}, fmt.Errorf("%w: %q", kerr.TransactionalIDNotFound, id)
	}
	return md, nil
}

// List returns the metadata of every transactional id of the loaded
// partitions, for ListTransactions; loading is true when a partition is
// still loading.
func (c *Coordinator) List() (all []Metadata, loading bool) {
	c.mu.RLock()
	shards := make([]*shard, 0, len(c.shards))
	for _, s := range c.shards {
		shards = append(shards, s)
	}
	c.mu.RUnlock()
	for _, s := range shards {
		s.mu.Lock()
		switch s.status {
		case shardActive:
			all = append(all, s.m.All()...)
		case shardLoading:
			loading = true
		}
		s.mu.Unlock()
	}
	return all, loading
}
