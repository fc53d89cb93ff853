package record

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultBudgetBytes is the capacity of DefaultBudget, and the default of
// strata.decompression.budget.bytes.
const DefaultBudgetBytes = 128 << 20

// MaxUncompressedKey is the configuration key of MaxUncompressed.
const MaxUncompressedKey = "strata.decompressed.batch.max.bytes"

// DefaultMaxUncompressed is the default of MaxUncompressed: 64 times the
// default max.message.bytes, far above what producers send (a batch as
// large as a producer sends by default passes at any ratio up to 64:1, a
// few MiB of zeros at any ratio), and half the default budget, so that
// the log cleaner, which decompresses a batch whole, can decompress every
// batch accepted. A bomb costs at most a fraction of a second of CPU.
const DefaultMaxUncompressed = 64 << 20

// DefaultBudget is the budget used where the caller names none.
var DefaultBudget = NewBudget(DefaultBudgetBytes)

// Budget bounds the memory that decoders hold, across every goroutine that
// shares it (one per broker): a decompression reserves its decoder's memory
// (window, block buffers and, when the output is kept in memory, the
// output) before it starts. A decoder that ends goes back to the budget's
// pool of idle decoders with its reservation, so the memory the pools keep
// is inside the budget too; idle decoders are dropped as soon as a
// reservation needs their room. A reservation that does not fit waits,
// first come first served, for earlier ones to end; every decompression
// ends after a bounded amount of work, since every one stops at its output
// limit. One larger than the whole budget fails with ErrDecompress.
//
// A budget also holds the limit of each decompression's output,
// MaxUncompressed, which keeps the work bounded.
//
// A Budget is safe for concurrent use. A goroutine holds at most one
// reservation at a time, so waiting cannot deadlock.
type Budget struct {
	maxUncompressed atomic.Int64

	mu       sync.Mutex
	capacity int64
	used     int64 // reserved, by decoders busy and idle
	idleUsed int64 // the part of used that idle decoders hold
	waiting  []*budgetWaiter
	idle     [numKinds][]*decoder
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

// NewBudget returns a budget of capacity bytes, whose decompressions stop
// at DefaultMaxUncompressed bytes of output.
func NewBudget(capacity int64) *Budget {
	if capacity <= 0 {
		panic("record: a decompression budget needs a positive capacity")
	}
	b := &Budget{capacity: capacity}
	b.maxUncompressed.Store(DefaultMaxUncompressed)
	return b
}

// MaxUncompressed returns the most bytes the records of one compressed
// batch may decompress to (strata.decompressed.batch.max.bytes): a batch
// that decompresses to more is refused (ErrUncompressedTooLarge) as soon as
// its output passes it.
func (b *Budget) MaxUncompressed() int64 { return b.maxUncompressed.Load() }

// SetMaxUncompressed sets MaxUncompressed to n bytes (at least 1); it
// applies to the decompressions that start after it.
func (b *Budget) SetMaxUncompressed(n int64) *Budget {
	b.maxUncompressed.Store(max(n, 1))
	return b
}

// Capacity returns the budget's size in bytes.
func (b *Budget) Capacity() int64 { return b.capacity }

// InUse returns the bytes reserved by decompressions in flight.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used - b.idleUsed
}

// Idle returns the bytes the pools of idle decoders hold.
func (b *Budget) Idle() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.idleUsed
}

// reserve reserves n bytes, dropping idle decoders to make room, and
// waiting while they do not fit.
func (b *Budget) reserve(n int64) error {
	if n > b.capacity {
		return fmt.Errorf("%w: needs %d bytes, more than the decompression budget of %d", ErrDecompress, n, b.capacity)
	}
	var dropped []*decoder
	b.mu.Lock()
	if len(b.waiting) == 0 {
		for b.used+n > b.capacity && b.idleUsed > 0 {
			dropped = append(dropped, b.dropIdleLocked())
		}
		if b.used+n <= b.capacity {
			b.used += n
			b.mu.Unlock()
			closeAll(dropped)
			return nil
		}
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiting = append(b.waiting, w)
	b.mu.Unlock()
	closeAll(dropped)
	<-w.ready // whoever woke us added n to used
	return nil
}

// release gives back n bytes of a reservation and wakes the waiters that
// now fit, in order, dropping idle decoders for them.
func (b *Budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	if b.used < b.idleUsed || b.used < 0 {
		panic("record: decompression budget released more than was reserved")
	}
	dropped := b.wakeLocked()
	b.mu.Unlock()
	closeAll(dropped)
}

func (b *Budget) wakeLocked() []*decoder {
	var dropped []*decoder
	for len(b.waiting) > 0 {
		w := b.waiting[0]
		for b.used+w.n > b.capacity && b.idleUsed > 0 {
			dropped = append(dropped, b.dropIdleLocked())
		}
		if b.used+w.n > b.capacity {
			break
		}
		b.waiting[0] = nil
		b.waiting = b.waiting[1:]
		b.used += w.n
		close(w.ready)
	}
	return dropped
}

// dropIdleLocked removes the largest idle decoder and its reservation; the
// caller closes it outside the lock.
func (b *Budget) dropIdleLocked() *decoder {
	k := -1
	for i := range b.idle {
		if n := len(b.idle[i]); n > 0 && (k < 0 || b.idle[i][n-1].memory > b.idle[k][len(b.idle[k])-1].memory) {
			k = i
		}
	}
	d := b.idle[k][len(b.idle[k])-1]
	b.idle[k] = b.idle[k][:len(b.idle[k])-1]
	b.used -= d.memory
	b.idleUsed -= d.memory
	return d
}

// take returns an idle decoder of kind with its reservation, or nil.
func (b *Budget) take(kind decoderKind) *decoder {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.idle[kind])
	if n == 0 {
		return nil
	}
	d := b.idle[kind][n-1]
	b.idle[kind] = b.idle[kind][:n-1]
	b.idleUsed -= d.memory
	return d
}

// keep pools d, idle, with its reservation, unless its kind's pool is full
// or a reservation waits for room: then it reports false and the caller
// releases d's memory.
func (b *Budget) keep(d *decoder) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiting) > 0 || len(b.idle[d.kind]) >= idleLimit[d.kind] {
		return false
	}
	b.idle[d.kind] = append(b.idle[d.kind], d)
	b.idleUsed += d.memory
	return true
}

func closeAll(ds []*decoder) {
	for _, d := range ds {
		d.free()
	}
}
