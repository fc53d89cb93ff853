package group

import (
	"container/heap"
	"time"
)

// Clock is the coordinator's source of time. Tests substitute one they
// advance by hand, so no test sleeps.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d, unless the returned
	// Timer is stopped first. It must not call f synchronously: the
	// coordinator calls it with a shard's mutex held.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the function from running if it has not started, and
	// reports whether it did.
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// timerKind names what a deadline is for; with the group and member it keys
// the deadline, so scheduling the same key again moves it (Kafka's
// CoordinatorTimer.schedule semantics).
type timerKind uint8

const (
	timerClassicHeartbeat  timerKind = iota // a classic member's session (or a new member's join timeout)
	timerClassicJoin                        // a classic group's join phase: initial delay or rebalance timeout
	timerClassicSync                        // a classic group's wait for SyncGroup from every member
	timerConsumerSession                    // a KIP-848 member's session
	timerConsumerRebalance                  // a KIP-848 member's time to revoke partitions
	timerOffsetsCleanup                     // the shard's periodic offset expiration
)

type timerKey struct {
	kind   timerKind
	group  string
	member string
}

type timerEntry struct {
	key   timerKey
	at    time.Time
	seq   uint64 // orders entries with equal deadlines by scheduling order
	fn    func()
	index int
}

// timers is a keyed set of deadlines: pure data, no goroutines. The shard
// arms one Clock timer for the earliest deadline and runs due entries under
// its mutex.
type timers struct {
	byKey map[timerKey]*timerEntry
	queue timerQueue
	seq   uint64
}

func newTimers() *timers {
	return &timers{byKey: make(map[timerKey]*timerEntry)}
}

// schedule sets key's deadline to at, replacing any earlier one.
func (t *timers) schedule(key timerKey, at time.Time, fn func()) {
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

func (t *timers) cancel(key timerKey) {
	if e, ok := t.byKey[key]; ok {
		heap.Remove(&t.queue, e.index)
		delete(t.byKey, key)
	}
}

// next returns the earliest deadline.
func (t *timers) next() (time.Time, bool) {
	if len(t.queue) == 0 {
		return time.Time{}, false
	}
	return t.queue[0].at, true
}

// popDue removes and returns the earliest entry due at now, if any.
func (t *timers) popDue(now time.Time) *timerEntry {
	if len(t.queue) == 0 || t.queue[0].at.After(now) {
		return nil
	}
	e := heap.Pop(&t.queue).(*timerEntry)
	delete(t.byKey, e.key)
	return e
}

func (t *timers) len() int { return len(t.queue) }

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
