package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"sync"
)

// Status is where a shard is in its life; see the package doc.
type Status uint8

const (
	Loading  Status = iota // replaying; requests get COORDINATOR_LOAD_IN_PROGRESS
	Active                 // serving
	Unloaded               // leadership lost or runtime closed; NOT_COORDINATOR
	Failed                 // replay failed; NOT_COORDINATOR
)

// Shard is one partition served by a Runtime: its Machine and the edges
// that drive it. Methods documented "mutex held" may only be called
// inside an event (between Acquire and Release, or from a Write's Done, a
// deadline, or a hook).
type Shard[M Machine] struct {
	rt          *Runtime[M]
	partition   int32
	leaderEpoch int32
	log         Partition
	ctx         context.Context // canceled by unload; bounds appends and replay
	cancel      context.CancelFunc
	loaded      chan struct{} // closed when replay ends, however it ends

	mu      sync.Mutex
	status  Status
	machine M
	now     time.Time // the time of the event being handled
	queue   []Write
	wake    chan struct{}
	armed   Timer
	armedAt time.Time
	armSeq  uint64
}

// Partition is the shard's partition.
func (s *Shard[M]) Partition() int32 { return s.partition }

// Loaded is closed once the shard's replay ended, however it ended.
func (s *Shard[M]) Loaded() <-chan struct{} { return s.loaded }

// Machine is the shard's machine; mutex held.
func (s *Shard[M]) Machine() M { return s.machine }

// Now is the time of the event being handled; mutex held.
func (s *Shard[M]) Now() time.Time { return s.now }

// Queued is how many writes wait for the writer; mutex held.
func (s *Shard[M]) Queued() int { return len(s.queue) }

// Logger is the runtime's logger with the partition.
func (s *Shard[M]) Logger() *slog.Logger { return s.rt.opts.Logger.With("partition", s.partition) }

// Acquire locks the shard for one event if it is Active and fixes the
// event's time; otherwise it returns the error Kafka answers for its
// status, unlocked.
func (s *Shard[M]) Acquire() error {
	s.mu.Lock()
	switch s.status {
	case Active:
		s.setNow()
		return nil
	case Loading:
		s.mu.Unlock()
		return kerr.CoordinatorLoadInProgress
	default:
		s.mu.Unlock()
		return kerr.NotCoordinator
	}
}

// Release ends an event: the machine's writes are queued (or, if the
// shard stopped serving, completed with ErrUnloaded), the clock is armed
// for the earliest deadline, the writer woken, and the mutex unlocked.
func (s *Shard[M]) Release() {
	s.takeWrites()
	s.rearm()
	if len(s.queue) > 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

// Append queues w after the machine's pending writes; mutex held.
func (s *Shard[M]) Append(w Write) {
	s.takeWrites()
	s.enqueue(w)
}

// Go runs fn in a goroutine whose ctx ends when the shard stops serving,
// or does nothing if it already has; mutex held (or not). fn takes the
// mutex, if it needs it, with Acquire.
func (s *Shard[M]) Go(fn func(ctx context.Context)) {
	if s.ctx.Err() != nil {
		return
	}
	go fn(s.ctx)
}

// setNow fixes the time of the event about to run.
func (s *Shard[M]) setNow() {
	s.now = s.rt.opts.Clock.Now()
	s.machine.SetTime(s.now)
}

func (s *Shard[M]) takeWrites() {
	for {
		ws := s.machine.TakeWrites()
		if len(ws) == 0 {
			return
		}
		for _, w := range ws {
			s.enqueue(w)
		}
	}
}

func (s *Shard[M]) enqueue(w Write) {
	if len(w.Records) == 0 && w.Done == nil {
		return
	}
	if s.status != Active {
		if w.Done != nil {
			w.Done(ErrUnloaded)
		}
		return
	}
	s.queue = append(s.queue, w)
}

// load replays the partition into a new machine and, unless the shard was
// unloaded meanwhile, starts serving it.
func (s *Shard[M]) load() {
	defer close(s.loaded)
	m := s.rt.opts.New(s.partition, s.leaderEpoch)
	now := s.rt.opts.Clock.Now()
	var replayErr error
	err := s.log.ReadBatches(0, func(batch []byte) bool {
		if s.ctx.Err() != nil {
			return false
		}
		replayErr = m.Replay(batch, now)
		return replayErr == nil
	})
	if err == nil {
		err = replayErr
	}
	s.mu.Lock()
	defer s.Release()
	if s.status != Loading {
		return
	}
	if err != nil {
		s.status = Failed
		s.Logger().Error("loading "+s.rt.opts.Name+" partition failed", "err", err)
		return
	}
	s.machine = m
	s.status = Active
	s.setNow()
	if s.rt.opts.Loaded != nil {
		s.rt.opts.Loaded(s)
	}
	go s.writeLoop()
}

// unload stops serving: queued writes complete with ErrUnloaded, in-flight
// appends are canceled, the hook runs and the timer stops.
func (s *Shard[M]) unload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == Unloaded {
		return
	}
	s.status = Unloaded
	s.cancel()
	queued := s.queue
	s.queue = nil
	for _, w := range queued {
		if w.Done != nil {
			w.Done(ErrUnloaded)
		}
	}
	if s.rt.opts.Unloaded != nil {
		s.rt.opts.Unloaded(s)
	}
	s.takeWrites()
	if s.armed != nil {
		s.armed.Stop()
		s.armed = nil
	}
}

// writeLoop appends queued writes one batch at a time, coalescing what
// queued up while the previous append was in flight (group commit).
func (s *Shard[M]) writeLoop() {
	for {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return
		}
		for s.writeOnce() {
		}
	}
}

func (s *Shard[M]) writeOnce() bool {
	s.mu.Lock()
	if s.status != Active || len(s.queue) == 0 {
		s.mu.Unlock()
		return false
	}
	var records []Record
	n, size := 0, 0
	producer := s.queue[0].Producer
	for n < len(s.queue) {
		w := &s.queue[n]
		if n > 0 && (size+w.size() > s.rt.opts.MaxAppendBytes || !sameProducer(w.Producer, producer)) {
			break
		}
		size += w.size()
		records = append(records, w.Records...)
		n++
	}
	ws := append([]Write(nil), s.queue[:n]...)
	s.queue = s.queue[n:]
	now := s.rt.opts.Clock.Now()
	s.mu.Unlock()

	var err error
	if len(records) > 0 {
		ctx, cancel := s.ctx, context.CancelFunc(func() {})
		if s.rt.opts.AppendTimeout > 0 {
			ctx, cancel = context.WithTimeout(s.ctx, s.rt.opts.AppendTimeout)
		}
		err = s.log.Append(ctx, buildBatch(records, producer, now.UnixMilli()))
		cancel()
	}

	s.mu.Lock()
	if s.status != Active {
		err = ErrUnloaded
	} else {
		s.setNow()
	}
	if err != nil && !errors.Is(err, ErrUnloaded) {
		s.Logger().Warn("appending "+s.rt.opts.Name+" records failed", "records", len(records), "err", err)
	}
	for _, w := range ws {
		if w.Done != nil {
			w.Done(err)
		}
	}
	s.Release()
	return true
}

// rearm points the clock timer at the machine's earliest deadline.
func (s *Shard[M]) rearm() {
	var at time.Time
	ok := false
	if t := s.machine.Deadlines(); t != nil && s.status == Active {
		at, ok = t.Next()
	}
	if !ok {
		if s.armed != nil {
			s.armed.Stop()
			s.armed = nil
		}
		return
	}
	if s.armed != nil && s.armedAt.Equal(at) {
		return
	}
	if s.armed != nil {
		s.armed.Stop()
	}
	s.armSeq++
	seq := s.armSeq
	d := max(at.Sub(s.rt.opts.Clock.Now()), 0)
	s.armedAt = at
	s.armed = s.rt.opts.Clock.AfterFunc(d, func() { s.fire(seq) })
}

// fire runs every deadline due now.
func (s *Shard[M]) fire(seq uint64) {
	s.mu.Lock()
	if s.status != Active || seq != s.armSeq {
		s.mu.Unlock()
		return
	}
	s.armed = nil
	s.setNow()
	s.machine.Deadlines().RunDue(s.now)
	s.Release()
}
