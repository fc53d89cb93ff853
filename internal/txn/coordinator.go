package txn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/coordinator"
	"github.com/strata-io/strata/internal/record"
)

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

// Coordinator is the transaction coordinator of one broker: one shard per
// __transaction_state partition it leads, run by a coordinator.Runtime.
// Its methods are safe for concurrent use.
type Coordinator struct {
	cfg  Config
	deps Deps
	rt   *coordinator.Runtime[*shardState]
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
	c := &Coordinator{cfg: cfg, deps: deps}
	c.rt = coordinator.New(coordinator.Options[*shardState]{
		Name:   "transaction coordinator",
		Clock:  clock{deps.Now},
		Logger: deps.Logger,
		New: func(_, leaderEpoch int32) *shardState {
			return &shardState{m: NewMachine(cfg, leaderEpoch), timers: coordinator.NewTimers(),
				completions: map[string][]chan struct{}{}}
		},
		Loaded:   c.loaded,
		Unloaded: unloaded,
	})
	return c
}

// Config returns the coordinator's configuration.
func (c *Coordinator) Config() Config { return c.cfg }

// PartitionFor is the __transaction_state partition of a transactional id.
func (c *Coordinator) PartitionFor(id string) int32 { return PartitionFor(id, c.cfg.NumPartitions) }

// clock is the runtime's clock over Deps.Now.
type clock struct{ now func() time.Time }

func (c clock) Now() time.Time { return c.now() }

func (clock) AfterFunc(d time.Duration, f func()) coordinator.Timer { return time.AfterFunc(d, f) }

// shardState is what the runtime runs for one __transaction_state
// partition: the Machine, the ticks driving its timeouts, and the EndTxn
// requests waiting for their transaction to complete.
type shardState struct {
	m      *Machine
	timers *coordinator.Timers
	// completions are EndTxn requests waiting for their transaction to
	// complete, by transactional id; closed once it no longer is
	// PrepareCommit or PrepareAbort, or the shard unloads.
	completions map[string][]chan struct{}
}

type shard = coordinator.Shard[*shardState]

// Replay applies a batch of the partition; markers are skipped.
func (st *shardState) Replay(batch []byte, _ time.Time) error {
	h, err := record.ParseHeader(batch)
	if err != nil {
		return err
	}
	if h.IsControl() {
		return nil
	}
	return record.Records(batch, func(_, _ int64, r *kmsg.Record) error { return st.m.Replay(r.Key, r.Value) })
}

// SetTime does nothing: the edges read the time from the shard.
func (st *shardState) SetTime(time.Time) {}

// TakeWrites is empty: the edges below append the Machine's writes
// themselves, each with its completion.
func (st *shardState) TakeWrites() []coordinator.Write { return nil }

// Deadlines are the shard's two periodic ticks.
func (st *shardState) Deadlines() *coordinator.Timers { return st.timers }

// Tick keys.
type tickKey uint8

const (
	tickAbortTimedOut tickKey = iota
	tickRemoveExpired
)

// loaded resends the markers of the transactions the load found prepared
// and starts the ticks.
func (c *Coordinator) loaded(s *shard) {
	st := s.Machine()
	s.Logger().Info("loaded transaction coordinator partition", "transactional.ids", len(st.m.txns))
	for _, mk := range st.m.Loaded() {
		c.sendMarkers(s, mk)
	}
	c.scheduleTick(s, tickAbortTimedOut, s.Now())
	c.scheduleTick(s, tickRemoveExpired, s.Now())
}

// unloaded releases the EndTxn requests waiting for completions.
func unloaded(s *shard) {
	st := s.Machine()
	for id, chs := range st.completions {
		for _, ch := range chs {
			close(ch)
		}
		delete(st.completions, id)
	}
}

// scheduleTick schedules the next tick of kind after from: it aborts
// timed-out transactions or removes expired ids.
func (c *Coordinator) scheduleTick(s *shard, kind tickKey, from time.Time) {
	interval := c.cfg.AbortTimedOutIntervalMs
	if kind == tickRemoveExpired {
		interval = c.cfg.RemoveExpiredIntervalMs
	}
	s.Machine().timers.Schedule(kind, from.Add(time.Duration(interval)*time.Millisecond), func(now time.Time) {
		for _, w := range s.Machine().m.Tick(now.UnixMilli(), kind == tickAbortTimedOut, kind == tickRemoveExpired) {
			if w.next.State == PrepareAbort {
				s.Logger().Info("aborting timed-out transaction", "transactional.id", w.TransactionalID)
			}
			c.write(s, w, nil)
		}
		c.scheduleTick(s, kind, now)
	})
}

// write queues w's record; once the append is over the Machine completes
// the transition, markers go out, EndTxn waiters whose transaction
// completed are released, and done (if set) gets the append's error.
// The shard's mutex is held.
func (c *Coordinator) write(s *shard, w *Write, done chan<- error) {
	s.Append(coordinator.Write{
		Records: []coordinator.Record{{Key: w.Key, Value: w.Value}},
		Done: func(err error) {
			st := s.Machine()
			for _, mk := range st.m.Written(w, err) {
				c.sendMarkers(s, mk)
			}
			if t := st.m.txns[w.TransactionalID]; t == nil || t.State != PrepareCommit && t.State != PrepareAbort {
				for _, ch := range st.completions[w.TransactionalID] {
					close(ch)
				}
				delete(st.completions, w.TransactionalID)
			}
			if err != nil && !errors.Is(err, coordinator.ErrUnloaded) {
				s.Logger().Warn("writing transaction state", "transactional.id", w.TransactionalID, "err", err)
			}
			if done != nil {
				done <- err
			}
		},
	})
}

// sendMarkers starts writing a transaction's markers, retried until they
// are written or the shard unloads; the shard's mutex is held.
func (c *Coordinator) sendMarkers(s *shard, mk Markers) {
	s.Go(func(ctx context.Context) {
		for {
			err := c.deps.Markers.WriteMarkers(ctx, mk)
			if err == nil {
				break
			}
			s.Logger().Debug("writing transaction markers", "transactional.id", mk.TransactionalID, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(c.deps.MarkerBackoff):
			}
		}
		if s.Acquire() != nil {
			return
		}
		defer s.Release()
		if w := s.Machine().m.MarkersWritten(mk, s.Now().UnixMilli()); w != nil {
			c.write(s, w, nil)
		}
	})
}

// Load starts serving partition, led here at leaderEpoch (the coordinator
// epoch markers carry). A shard already loaded for it is unloaded first.
func (c *Coordinator) Load(partition int32, leaderEpoch int32, p coordinator.Partition) {
	c.rt.Load(partition, leaderEpoch, p)
}

// Unload stops serving partition: waiters get NOT_COORDINATOR.
func (c *Coordinator) Unload(partition int32) { c.rt.Unload(partition) }

// Close unloads every partition.
func (c *Coordinator) Close() { c.rt.Close() }

// acquire locks the shard of a transactional id for one event, or returns
// the error Kafka answers when it is not served here.
func (c *Coordinator) acquire(id string) (*shard, error) {
	s, err := c.rt.Acquire(c.PartitionFor(id))
	if errors.Is(err, kerr.NotCoordinator) {
		return nil, fmt.Errorf("%w: %q is not coordinated here", kerr.NotCoordinator, id)
	}
	return s, err
}

// do runs fn on the shard's machine and waits for the write its result
// asks for.
func (c *Coordinator) do(ctx context.Context, id string, fn func(m *Machine, nowMs int64) Result) Result {
	return c.doShard(ctx, id, func(_ *shard, m *Machine, nowMs int64) Result { return fn(m, nowMs) })
}

// doShard is do for a fn that also needs the shard (locked).
func (c *Coordinator) doShard(ctx context.Context, id string, fn func(s *shard, m *Machine, nowMs int64) Result) Result {
	s, err := c.acquire(id)
	if err != nil {
		return Result{Err: err, ProducerID: -1, ProducerEpoch: -1}
	}
	res := fn(s, s.Machine().m, s.Now().UnixMilli())
	if res.Write == nil {
		s.Release()
		return res
	}
	done := make(chan error, 1)
	c.write(s, res.Write, done)
	s.Release()
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

// appendError is the error a request gets when its write failed
// (coordinator.AppendError), with the append's error as context.
func appendError(err error) error {
	ke := coordinator.AppendError(err)
	if errors.Is(err, ke) {
		return err
	}
	return fmt.Errorf("%w: %v", ke, err)
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
				st := s.Machine()
				st.completions[r.TransactionalID] = append(st.completions[r.TransactionalID], done)
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
	s, err := c.acquire(id)
	if err != nil {
		return Metadata{}, err
	}
	defer s.Release()
	md, ok := s.Machine().m.Get(id)
	if !ok {
		return Metadata{}, fmt.Errorf("%w: %q", kerr.TransactionalIDNotFound, id)
	}
	return md, nil
}

// List returns the metadata of every transactional id of the loaded
// partitions, for ListTransactions; loading is true when a partition is
// still loading.
func (c *Coordinator) List() (all []Metadata, loading bool) {
	shards, _ := c.rt.Shards()
	for _, s := range shards {
		switch err := s.Acquire(); err {
		case nil:
			all = append(all, s.Machine().m.All()...)
			s.Release()
		case kerr.CoordinatorLoadInProgress:
			loading = true
		}
	}
	return all, loading
}
