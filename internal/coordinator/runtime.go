package coordinator

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Machine is one partition's coordinator state; see the package doc for
// the contract. Every method is called with the shard's mutex held.
type Machine interface {
	// Replay applies one committed batch while loading, in offset order;
	// now is the time the load started. An error fails the load.
	Replay(batch []byte, now time.Time) error
	// SetTime gives the time of the event about to run: a request
	// (Acquire), a due deadline, a completed write, the end of the load.
	SetTime(now time.Time)
	// TakeWrites returns the writes queued since the last call, in order,
	// and forgets them.
	TakeWrites() []Write
	// Deadlines is the machine's deadline set; nil if it has none.
	Deadlines() *Timers
}

// Options configure a Runtime.
type Options[M Machine] struct {
	// Name names the coordinator in logs ("group coordinator").
	Name string
	// Clock supplies time and timers; nil means SystemClock.
	Clock Clock
	// Logger receives the runtime's log; nil discards it.
	Logger *slog.Logger
	// New returns an empty machine for a partition led at leaderEpoch.
	New func(partition, leaderEpoch int32) M
	// Loaded, if set, runs once a shard's replay ended and it serves.
	Loaded func(s *Shard[M])
	// Unloaded, if set, runs when a shard stops serving, after its queued
	// writes got ErrUnloaded. The machine may be one still loading.
	Unloaded func(s *Shard[M])
	// MaxAppendBytes bounds how many bytes of records the writer
	// coalesces into one batch (a single write may exceed it); 0 means
	// one write per batch.
	MaxAppendBytes int
	// AppendTimeout bounds each append; 0 means none (until unload).
	AppendTimeout time.Duration
}

// Runtime runs one coordinator's shards. Its methods are safe for
// concurrent use.
type Runtime[M Machine] struct {
	opts Options[M]

	mu     sync.RWMutex
	shards map[int32]*Shard[M]
	closed bool
}

// New returns a runtime with no partition loaded.
func New[M Machine](opts Options[M]) *Runtime[M] {
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Runtime[M]{opts: opts, shards: make(map[int32]*Shard[M])}
}

// Clock is the runtime's clock.
func (r *Runtime[M]) Clock() Clock { return r.opts.Clock }

// Load starts serving partition, which this broker now leads at
// leaderEpoch: it is replayed in the background into a new machine. A
// shard already loaded for partition is unloaded first. Load and Unload
// must be called in the order leadership changes happen.
func (r *Runtime[M]) Load(partition, leaderEpoch int32, log Partition) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	old := r.shards[partition]
	ctx, cancel := context.WithCancel(context.Background())
	s := &Shard[M]{
		rt:          r,
		partition:   partition,
		leaderEpoch: leaderEpoch,
		log:         log,
		ctx:         ctx,
		cancel:      cancel,
		loaded:      make(chan struct{}),
		status:      Loading,
		machine:     r.opts.New(partition, leaderEpoch),
		wake:        make(chan struct{}, 1),
	}
	r.shards[partition] = s
	r.mu.Unlock()
	if old != nil {
		old.unload()
	}
	go s.load()
}

// Unload stops serving partition, whose leadership this broker lost.
func (r *Runtime[M]) Unload(partition int32) {
	r.mu.Lock()
	s := r.shards[partition]
	delete(r.shards, partition)
	r.mu.Unlock()
	if s != nil {
		s.unload()
	}
}

// Close unloads every partition; afterwards Acquire answers
// COORDINATOR_NOT_AVAILABLE.
func (r *Runtime[M]) Close() {
	r.mu.Lock()
	r.closed = true
	shards := r.shards
	r.shards = make(map[int32]*Shard[M])
	r.mu.Unlock()
	for _, s := range shards {
		s.unload()
	}
}

// Acquire locks the Active shard of partition for one event, which must
// end with Shard.Release. Otherwise it returns the error Kafka answers
// (Shard, Shard.Acquire).
func (r *Runtime[M]) Acquire(partition int32) (*Shard[M], error) {
	s, err := r.Shard(partition)
	if err != nil {
		return nil, err
	}
	if err := s.Acquire(); err != nil {
		return nil, err
	}
	return s, nil
}

// Shard returns partition's shard, loaded or loading, without locking it;
// or kerr.CoordinatorNotAvailable once the runtime is closed,
// kerr.NotCoordinator for a partition not served here.
func (r *Runtime[M]) Shard(partition int32) (*Shard[M], error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	switch s := r.shards[partition]; {
	case r.closed:
		return nil, kerr.CoordinatorNotAvailable
	case s == nil:
		return nil, kerr.NotCoordinator
	default:
		return s, nil
	}
}

// Shards returns the shards loaded or loading here, in partition order,
// and whether the runtime is closed.
func (r *Runtime[M]) Shards() ([]*Shard[M], bool) {
	r.mu.RLock()
	out := make([]*Shard[M], 0, len(r.shards))
	for _, s := range r.shards {
		out = append(out, s)
	}
	closed := r.closed
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].partition < out[j].partition })
	return out, closed
}
