package coordinator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/coordinator"
	"github.com/strata-io/strata/internal/coordinator/coordinatortest"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// kvMachine is a last-value-wins map: the smallest machine a coordinator
// could run.
type kvMachine struct {
	values map[string]string
	out    []coordinator.Write
	timers *coordinator.Timers
}

var errCorrupt = errors.New("corrupt record")

func (m *kvMachine) Replay(batch []byte, _ time.Time) error {
	return record.Records(batch, func(_, _ int64, r *kmsg.Record) error {
		if string(r.Value) == "corrupt" {
			return errCorrupt
		}
		m.values[string(r.Key)] = string(r.Value)
		return nil
	})
}

func (m *kvMachine) SetTime(time.Time) {}

func (m *kvMachine) TakeWrites() []coordinator.Write { w := m.out; m.out = nil; return w }

func (m *kvMachine) Deadlines() *coordinator.Timers { return m.timers }

// set queues k=v, recorded in the map once committed.
func (m *kvMachine) set(k, v string, done chan<- error) {
	m.out = append(m.out, coordinator.Write{Records: []coordinator.Record{{Key: []byte(k), Value: []byte(v)}}, Done: func(err error) {
		if err == nil {
			m.values[k] = v
		}
		done <- err
	}})
}

func newKV(t *testing.T, clock coordinator.Clock, maxBytes int) *coordinator.Runtime[*kvMachine] {
	rt := coordinator.New(coordinator.Options[*kvMachine]{
		Name:  "test",
		Clock: clock,
		New: func(int32, int32) *kvMachine {
			return &kvMachine{values: map[string]string{}, timers: coordinator.NewTimers()}
		},
		MaxAppendBytes: maxBytes,
	})
	t.Cleanup(rt.Close)
	return rt
}

func loadAndWait(t *testing.T, rt *coordinator.Runtime[*kvMachine], p int32, log coordinator.Partition) {
	t.Helper()
	rt.Load(p, 1, log)
	select {
	case <-mustShard(t, rt, p).Loaded():
	case <-time.After(5 * time.Second):
		t.Fatal("partition did not load")
	}
}

func mustShard(t *testing.T, rt *coordinator.Runtime[*kvMachine], p int32) *coordinator.Shard[*kvMachine] {
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
	gate := &coordinatortest.MemPartition{ReadGate: make(chan struct{})}
	rt.Load(0, 1, gate)
	if _, err := rt.Acquire(0); err != kerr.CoordinatorLoadInProgress {
		t.Fatalf("loading: %v, want COORDINATOR_LOAD_IN_PROGRESS", err)
	}
	close(gate.ReadGate)
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

// Writes queued while an append is in flight go out in one batch, in
// order, and a reload replays them.
func TestRuntimeCoalescesWritesAndReplays(t *testing.T) {
	rt := newKV(t, nil, 1<<20)
	log := &coordinatortest.MemPartition{AppendGate: make(chan struct{})}
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
	close(log.AppendGate)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := log.Appends(); n != 2 {
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

// Unloading fails the queued and the in-flight writes with coordinator.ErrUnloaded.
func TestRuntimeUnloadFailsWrites(t *testing.T) {
	rt := newKV(t, nil, 0)
	log := &coordinatortest.MemPartition{AppendGate: make(chan struct{})}
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
		if err := <-done; !errors.Is(err, coordinator.ErrUnloaded) {
			t.Fatalf("write after unload: %v, want ErrUnloaded", err)
		}
	}
}

// A deadline runs once the clock reaches it, with that time, and its
// writes are appended; a moved deadline runs at its new time only.
func TestRuntimeDeadlines(t *testing.T) {
	clock := coordinatortest.NewManualClock(time.Unix(1000, 0))
	rt := newKV(t, clock, 0)
	log := &coordinatortest.MemPartition{}
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
	clock.Advance(time.Second)
	s, err = rt.Acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	if !ranAt.IsZero() || s.Machine().timers.Len() != 1 {
		t.Fatalf("moved deadline ran at its old time (at %v)", ranAt)
	}
	s.Release()
	clock.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !ranAt.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("deadline ran at %v, want %v", ranAt, start.Add(2*time.Second))
	}
	if log.Appends() != 1 {
		t.Fatalf("%d batches, want the timer's one", log.Appends())
	}
}

// A partition whose replay fails is not served: requests get
// NOT_COORDINATOR.
func TestRuntimeFailedLoad(t *testing.T) {
	rt := newKV(t, nil, 0)
	log := &coordinatortest.MemPartition{}
	loadAndWait(t, rt, 0, log)
	done := make(chan error, 1)
	s, err := rt.Acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	s.Machine().set("k", "corrupt", done)
	s.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	loadAndWait(t, rt, 0, log)
	if _, err := rt.Acquire(0); err != kerr.NotCoordinator {
		t.Fatalf("after a failed load: %v, want NOT_COORDINATOR", err)
	}
}
