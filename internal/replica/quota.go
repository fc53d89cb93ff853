package replica

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Quota is a replication throttle (Kafka's ReplicationQuotaManager): a
// byte rate measured over the last Windows windows of WindowSize
// (replication.quota.window.num, 11, of replication.quota.window.size.seconds,
// 1 s), and a bound (leader.replication.throttled.rate or
// follower.replication.throttled.rate). The rate is the bytes recorded in
// the windows over the time they span, and at least Windows-1 windows, so
// a burst after a quiet spell is not taken for a high rate, as Kafka's
// Rate measures. It is safe for concurrent use; times are given, not read.
type Quota struct {
	mu    sync.Mutex
	bound int64 // bytes per second; math.MaxInt64: no throttle
	// windows are the recent windows, oldest first.
	windows []quotaWindow
	// heldBack counts the partition reads the throttle held back.
	heldBack atomic.Int64
}

type quotaWindow struct {
	start time.Time
	bytes int64
}

// The measuring windows, as Kafka's defaults.
const (
	QuotaWindows    = 11
	QuotaWindowSize = time.Second
)

// NewQuota returns a quota with no bound.
func NewQuota() *Quota { return &Quota{bound: math.MaxInt64} }

// SetBound sets the bound in bytes per second (math.MaxInt64: none).
func (q *Quota) SetBound(bytesPerSecond int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.bound = bytesPerSecond
}

// Record counts bytes replicated at now.
func (q *Quota) Record(now time.Time, bytes int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expireLocked(now)
	if n := len(q.windows); n > 0 && now.Sub(q.windows[n-1].start) < QuotaWindowSize {
		q.windows[n-1].bytes += bytes
		return
	}
	q.windows = append(q.windows, quotaWindow{start: now, bytes: bytes})
}

// Exceeded reports whether the measured rate is above the bound.
func (q *Quota) Exceeded(now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bound == math.MaxInt64 {
		return false
	}
	return q.rateLocked(now) > float64(q.bound)
}

// NoteHeldBack counts a partition read the throttle held back.
func (q *Quota) NoteHeldBack() { q.heldBack.Add(1) }

// HeldBack returns how many partition reads the throttle held back.
func (q *Quota) HeldBack() int64 { return q.heldBack.Load() }

// Rate returns the measured rate in bytes per second.
func (q *Quota) Rate(now time.Time) float64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rateLocked(now)
}

func (q *Quota) rateLocked(now time.Time) float64 {
	q.expireLocked(now)
	if len(q.windows) == 0 {
		return 0
	}
	var total int64
	for _, w := range q.windows {
		total += w.bytes
	}
	elapsed := max(now.Sub(q.windows[0].start), (QuotaWindows-1)*QuotaWindowSize)
	return float64(total) / elapsed.Seconds()
}

// expireLocked drops the windows older than the measured span.
func (q *Quota) expireLocked(now time.Time) {
	i := 0
	for i < len(q.windows) && now.Sub(q.windows[i].start) >= QuotaWindows*QuotaWindowSize {
		i++
	}
	q.windows = q.windows[i:]
}
