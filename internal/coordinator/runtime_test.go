package coordinator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// memLog is a Partition over an in-memory log of real batches; Append can
// be held at a gate to let writes queue up behind it.
type memLog struct {
	mu      sync.Mutex
	batches [][]byte
	gate    chan struct{}
}

func (l *memLog) Append(ctx context.Context, batch []byte) error {
	if _, err := record.Validate(batch, 0); err != nil {
		return err
	}
	if l.gate != nil {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches = append(l.batches, append([]byte(nil), batch...))
	return nil
}

func (l *memLog) ReadBatches(_ int64, fn func([]byte) bool) error {
	l.mu.Lock()
	bs := append([][]byte(nil), l.batches...)
	l.mu.Unlock()
	for _, b := range bs {
		if !fn(b) {
			break
		}
	}
	return nil
}

func (l *memLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.batches)
}

// kvMachine is a last-value-wins map: the smallest machine a coordinator
// could run.
type kvMachine struct {
	values map[string]string
	out    []Write
	timers *Timers
}

func (m *kvMachine) Replay(batch []byte, _ time.Time) error {
	return record.Records(batch, func(_, _ int64, r *kmsg.Record) error {
		m.values[string(r.Key)] = string(r.Value)
		return nil
	})
}

func (m *kvMachine) SetTime(time.Time) {}

func (m *kvMachine) TakeWrites() []Write { w := m.out; m.out = nil; return w }

func (m *kvMachine) Deadlines() *Timers { return m.timers }

// set queues k=v, recorded in the map once committed.
func (m *kvMachine) set(k, v string, done chan<- error) {
	m.out = append(m.out, Write{Records: []Record{{Key: []byte(k), Value: []byte(v)}}, Done: func(err error) {
		if err == nil {
			m.values[k] = v
		}
		done <- err
	}})
}

func newKV(t *testing.T, clock Clock, maxBytes int) *Runtime[*kvMachine] {
	rt := New(Options[*kvMachine]{
		Name:  "test",
		Clock: clock,
		New: func(int32, int32) *kvMachine {
			return &kvMachine{values: map[string]string{}, timers: NewTimers()}
		},
		MaxAppendBytes: maxBytes,
	})
	t.Cleanup(rt.Close)
	return rt
}

func loadAndWait(t *testing.T, rt *Runtime[*kvMachine], p int32, log Partition) {
	t.Helper()
	rt.Load(p, 1, log)
	select {
	case <-mustShard(t, rt, p).Loaded():
	case <-time.After(5 * time.Second):
		t.Fatal("partition did not load")
	}
}

func mustShard(t *testing.T, rt *Runtime[*kvMachine], p int32) *Shard[*kvMachine] {
	t.Helper()
	s, err := rt.Shard(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRuntimeStatusErrors(t *testing.T) {
	rt := newKV(t, nil, 0)
	if _, err := rt.Acquire(0); err != kerr.NotCoordinator {
		t.Fatalf("no shard: %v, want NOT_COORDINATOR", err)
	}
	gate := &gatedRead{memLog: &memLog{}, release: make(chan struct{})}
	rt.Load(0, 1, gate)
	if _, err := rt.Acquire(0); err != kerr.CoordinatorLoadInProgress {
		t.Fatalf("loading: %v, want COORDINATOR_LOAD_IN_PROGRESS", err)
	}
	close(gate.release)
	<-mustShard(t, rt, 0).Loaded()
	s, err := rt.Acquire(0)
	if err != nil {
		t.Fatalf("loaded: %v", err)
	}
	s.Release()
	rt.Unload(0)
	if _, err := rt.Acquire(0); err != kerr.NotCoordinator {
		t.Fatalf("unloaded: %v, want NOT_COORDINATOR", err)
	}
	rt.Close()
	if _, err := rt.Acquire(0); err != kerr.CoordinatorNotAvailable {
		t.Fatalf("closed: %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
}

type gatedRead struct {
	*memLog
	release chan struct{}
}

func (g *gatedRead) ReadBatches(from int64, fn func([]byte) bool) error {
	<-g.release
	return g.memLog.ReadBatches(from, fn)
}

// Writes queued while an append is in flight go out in one batch, in
// order, and a reload replays them.
func TestRuntimeCoalescesWritesAndReplays(t *testing.T) {
	rt := newKV(t, nil, 1<<20)
	log := &memLog{gate: make(chan struct{})}
	loadAndWait(t, rt, 0, log)
	done := make(chan error, 10)
	for i, v := range []string{"a", "b", "c"} {
		s, err := rt.Acquire(0)
		if err != nil {
			t.Fatal(err)
		}
		s.Machine().set("k", v, done)
		s.Release()
		if i == 0 {
			// The first write is in flight at the gate; let b and c queue.
			poll.Until(t, 5*time.Second, "first write in flight", func() bool {
				s, _ := rt.Acquire(0)
				defer s.Release()
				return s.Queued() == 0
			})
		}
	}
	close(log.gate)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := log.len(); n != 2 {
		t.Fatalf("%d batches, want 2 (a, then b and c coalesced)", n)
	}
	loadAndWait(t, rt, 0, log)
	s, err := rt.Acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if got := s.Machine().values["k"]; got != "c" {
		t.Fatalf("replayed k=%q, want c", got)
	}
}

// Unloading fails the queued and the in-flight writes with ErrUnloaded.
func TestRuntimeUnloadFailsWrites(t *testing.T) {
	rt := newKV(t, nil, 0)
	log := &memLog{gate: make(chan struct{})}
	loadAndWait(t, rt, 0, log)
	done := make(chan error, 2)
	s, err := rt.Acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	s.Machine().set("k", "a", done)
	s.Machine().set("k", "b", done)
	s.Release()
	rt.Unload(0)
	for range 2 {
		if err := <-done; !errors.Is(err, ErrUnloaded) {
			t.Fatalf("write after unload: %v, want ErrUnloaded", err)
		}
	}
}

// manualClock fires AfterFuncs when advanced.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *manualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool { was := !t.stopped; t.stopped = true; return was }

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(c.now) {
			t.stopped = true
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// A deadline runs once the clock reaches it, with that time, and its
// writes are appended; a moved deadline runs at its new time only.
func TestRuntimeDeadlines(t *testing.T) {
	clock := &manualClock{now: time.Unix(1000, 0)}
	rt := newKV(t, clock, 0)
	log := &memLog{}
	loadAndWait(t, rt, 0, log)
	done := make(chan error, 1)
	var ranAt time.Time
	s, err := rt.Acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	start := s.Now()
	fire := func(now time.Time) { ranAt = now; s.Machine().set("k", "timer", done) }
	s.Machine().timers.Schedule("k", start.Add(time.Second), fire)
	s.Machine().timers.Schedule("k", start.Add(2*time.Second), fire)
	s.Release()
	clock.advance(time.Second)
	s, err = rt.Acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	if !ranAt.IsZero() || s.Machine().timers.Len() != 1 {
		t.Fatalf("moved deadline ran at its old time (at %v)", ranAt)
	}
	s.Release()
	clock.advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !ranAt.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("deadline ran at %v, want %v", ranAt, start.Add(2*time.Second))
	}
	if log.len() != 1 {
		t.Fatalf("%d batches, want the timer's one", log.len())
	}
}
