package coordinator

import (
	"container/heap"
	"time"
)

// Clock is a runtime's source of time. Tests substitute one they advance by
// hand, so no test sleeps.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d, unless the returned
	// Timer is stopped first. It must not call f synchronously: the runtime
	// calls it with a shard's mutex held.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the function from running if it has not started, and
	// reports whether it did.
	Stop() bool
}

// SystemClock is the wall clock.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Timers is a Machine's keyed set of deadlines: pure data, no goroutines.
// Scheduling a key again moves its deadline (Kafka's
// CoordinatorTimer.schedule). The runtime arms one Clock timer for the
// earliest deadline and runs due functions under the shard's mutex, each
// given the time it runs at. Keys must be comparable.
type Timers struct {
	byKey map[any]*timerEntry
	queue timerQueue
	seq   uint64
}

type timerEntry struct {
	key   any
	at    time.Time
	seq   uint64 // orders entries with equal deadlines by scheduling order
	fn    func(now time.Time)
	index int
}

// NewTimers returns an empty set.
func NewTimers() *Timers {
	return &Timers{byKey: make(map[any]*timerEntry)}
}

// Schedule sets key's deadline to at, replacing any earlier one and its
// function.
func (t *Timers) Schedule(key any, at time.Time, fn func(now time.Time)) {
	t.seq++
	if e, ok := t.byKey[key]; ok {
		e.at, e.seq, e.fn = at, t.seq, fn
		heap.Fix(&t.queue, e.index)
		return
	}
	e := &timerEntry{key: key, at: at, seq: t.seq, fn: fn}
	t.byKey[key] = e
	heap.Push(&t.queue, e)
}

// Cancel removes key's deadline, if any.
func (t *Timers) Cancel(key any) {
	if e, ok := t.byKey[key]; ok {
		heap.Remove(&t.queue, e.index)
		delete(t.byKey, key)
	}
}

// Next returns the earliest deadline.
func (t *Timers) Next() (time.Time, bool) {
	if len(t.queue) == 0 {
		return time.Time{}, false
	}
	return t.queue[0].at, true
}

// Len is the number of deadlines.
func (t *Timers) Len() int { return len(t.queue) }

// RunDue runs, in deadline order, every function due at now, including
// ones they schedule for now or earlier.
func (t *Timers) RunDue(now time.Time) {
	for len(t.queue) > 0 && !t.queue[0].at.After(now) {
		e := heap.Pop(&t.queue).(*timerEntry)
		delete(t.byKey, e.key)
		e.fn(now)
	}
}

type timerQueue []*timerEntry

func (q timerQueue) Len() int { return len(q) }

func (q timerQueue) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].seq < q[j].seq
	}
	return q[i].at.Before(q[j].at)
}

func (q timerQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}

func (q *timerQueue) Push(x any) {
	e := x.(*timerEntry)
	e.index = len(*q)
	*q = append(*q, e)
}

func (q *timerQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	e.index = -1
	return e
}
