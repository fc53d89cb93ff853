package record

import (
	"fmt"
	"sync"
)

// DefaultBudgetBytes is the capacity of DefaultBudget, and the default of
// strata.decompression.budget.bytes.
const DefaultBudgetBytes = 128 << 20

// DefaultBudget is the budget used where the caller names none.
var DefaultBudget = NewBudget(DefaultBudgetBytes)

// Budget bounds the memory that decompressions in flight may hold, across
// every goroutine that shares it (one per broker): a decompression reserves
// its decoder's memory (window, block buffers and, when the output is kept
// in memory, the output's limit) before it starts and gives it back when it
// ends. A reservation that does not fit waits, first come first served, for
// earlier ones to end; every reservation ends after a bounded amount of
// work, since every decompression stops at its output limit. One that is
// larger than the whole budget fails with ErrDecompress.
//
// A Budget is safe for concurrent use. A goroutine holds at most one
// reservation at a time, so waiting cannot deadlock.
type Budget struct {
	mu       sync.Mutex
	capacity int64
	used     int64
	waiting  []*budgetWaiter // first come, first served
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

// NewBudget returns a budget of capacity bytes.
func NewBudget(capacity int64) *Budget {
	if capacity <= 0 {
		panic("record: a decompression budget needs a positive capacity")
	}
	return &Budget{capacity: capacity}
}

// Capacity returns the budget's size in bytes.
func (b *Budget) Capacity() int64 { return b.capacity }

// InUse returns the bytes reserved now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// acquire reserves n bytes, waiting while they do not fit.
func (b *Budget) acquire(n int64) error {
	if n > b.capacity {
		return fmt.Errorf("%w: needs %d bytes, more than the decompression budget of %d", ErrDecompress, n, b.capacity)
	}
	b.mu.Lock()
	if len(b.waiting) == 0 && b.used+n <= b.capacity {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiting = append(b.waiting, w)
	b.mu.Unlock()
	<-w.ready // release has added n to used
	return nil
}

// release gives back n bytes of a reservation and wakes the waiters that
// now fit, in order.
func (b *Budget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.used < 0 {
		panic("record: decompression budget released more than was reserved")
	}
	for len(b.waiting) > 0 && b.used+b.waiting[0].n <= b.capacity {
		w := b.waiting[0]
		b.waiting[0] = nil
		b.waiting = b.waiting[1:]
		b.used += w.n
		close(w.ready)
	}
}
