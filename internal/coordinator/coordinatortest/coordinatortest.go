// Package coordinatortest holds test doubles for code on the coordinator
// runtime: a clock advanced by hand and a partition over an in-memory log
// of real, validated batches. They stand in for the broker's edges (its
// clock, a replica of an internal topic), not for any coordinator logic.
package coordinatortest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/strata-io/strata/internal/coordinator"
	"github.com/strata-io/strata/internal/record"
)

// ManualClock is a coordinator.Clock the test advances; due functions run
// synchronously in Advance, in deadline order, each with the clock at its
// deadline.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c    *ManualClock
	at   time.Time
	f    func()
	done bool
}

// NewManualClock returns a clock at start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now is the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run in Advance once d has passed.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) coordinator.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Advance moves time forward by d, running every timer that comes due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		var next *manualTimer
		for _, t := range c.timers {
			if !t.done && !t.at.After(target) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		if next.at.After(c.now) {
			c.now = next.at
		}
		next.done = true
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
}

// MemPartition is a coordinator.Partition over an in-memory log: Append
// validates each batch and stores it with its offsets assigned, as a
// leader would. Its zero value is an empty log.
type MemPartition struct {
	// ReadGate, when set, holds ReadBatches until it is closed.
	ReadGate chan struct{}
	// AppendGate, when set, holds Append until it is closed or its ctx
	// ends.
	AppendGate chan struct{}

	mu       sync.Mutex
	log      []byte
	next     int64
	appends  int
	failNext error
}

// Append stores batch, or fails with the error Fail set.
func (p *MemPartition) Append(ctx context.Context, batch []byte) error {
	h, err := record.Validate(batch, 0)
	if err != nil {
		return fmt.Errorf("coordinatortest: %w", err)
	}
	if p.AppendGate != nil {
		select {
		case <-p.AppendGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.failNext; err != nil {
		p.failNext = nil
		return err
	}
	b := append([]byte(nil), batch...)
	record.SetBaseOffset(b, p.next)
	p.next += int64(h.LastOffsetDelta) + 1
	p.log = append(p.log, b...)
	p.appends++
	return nil
}

// ReadBatches calls fn with each stored batch from offset from.
func (p *MemPartition) ReadBatches(from int64, fn func(batch []byte) bool) error {
	if p.ReadGate != nil {
		<-p.ReadGate
	}
	p.mu.Lock()
	log := append([]byte(nil), p.log...)
	p.mu.Unlock()
	return record.Batches(log, func(h record.Header, b []byte) bool {
		if h.LastOffset() < from {
			return true
		}
		return fn(b)
	})
}

// Fail makes the next Append fail with err, storing nothing.
func (p *MemPartition) Fail(err error) {
	p.mu.Lock()
	p.failNext = err
	p.mu.Unlock()
}

// Appends is how many batches were stored.
func (p *MemPartition) Appends() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.appends
}

// CorruptTail flips the bits of the log's last byte, breaking the last
// batch's CRC, as a torn or rotten disk would.
func (p *MemPartition) CorruptTail() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.log) > 0 {
		p.log[len(p.log)-1] ^= 0xff
	}
}
