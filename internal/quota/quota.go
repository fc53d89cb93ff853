// Package quota measures client byte rates and request time and says how
// long to throttle a client over its quota, as Kafka's ClientQuotaManager
// and ClientRequestQuotaManager do: a rate over quota.window.num windows
// of quota.window.size.seconds each, and a throttle time that brings the
// rate back to the quota, (rate - quota) / quota * the measured span; at
// most the windows' span for byte rates, at most one window for request
// time.
//
// Request time is measured as Kafka's request_percentage is: the time a
// request spent in the broker's handler (the connection's reader, here:
// Go has no fixed pool of handler threads) is recorded as a percentage of
// one thread for one second (1 ms = 0.1), so the rate is the percentage of
// one thread the entity keeps busy; a quota of 200 allows two threads'
// worth.
//
// It is a state machine: callers pass the time; there are no goroutines,
// timers or I/O. Which quota applies to a (user, client id) is resolved by
// the caller (the broker, from the metadata image; see Resolve).
package quota

import (
	"sync"
	"time"
)

// Kafka's quota keys.
const (
	ProducerByteRate  = "producer_byte_rate"
	ConsumerByteRate  = "consumer_byte_rate"
	RequestPercentage = "request_percentage"
	// ConnectionCreationRate is an ip entity's quota (KIP-612):
	// connections accepted a second.
	ConnectionCreationRate = "connection_creation_rate"
)

// Kafka's defaults for quota.window.num and quota.window.size.seconds.
const (
	DefaultWindows    = 11
	DefaultWindowSize = time.Second
)

// Manager keeps one rate per quota key and entity. Safe for concurrent
// use.
type Manager struct {
	windows    int
	windowSize time.Duration

	mu        sync.Mutex
	rates     map[rateKey]*rate
	sweeps    int
	throttled map[string]Throttles
}

// Throttles counts the throttles one quota key answered: how many, and
// their total length.
type Throttles struct {
	Count uint64
	Total time.Duration
}

type rateKey struct {
	key, entity string
}

type rate struct {
	starts []time.Time // window start times, a ring
	values []float64   // bytes, or percent-seconds of request time
	cur    int
	last   time.Time
}

// NewManager returns a manager with windows windows of size each.
func NewManager(windows int, size time.Duration) *Manager {
	if windows < 2 {
		windows = 2
	}
	if size <= 0 {
		size = DefaultWindowSize
	}
	return &Manager{windows: windows, windowSize: size, rates: map[rateKey]*rate{}, throttled: map[string]Throttles{}}
}

// Record adds n bytes to the rate of key (ProducerByteRate or
// ConsumerByteRate) for entity, whose quota is limit bytes a second, and
// returns how long the client must be throttled: zero when the rate is
// within the quota.
func (m *Manager) Record(key, entity string, n int64, limit float64, now time.Time) time.Duration {
	span := time.Duration(m.windows) * m.windowSize
	observed, _ := m.record(key, entity, float64(n), now)
	if limit <= 0 || observed <= limit {
		return 0
	}
	throttle := time.Duration((observed - limit) / limit * float64(span))
	return m.count(key, min(throttle, span))
}

// count adds a throttle of key to its counts and returns it.
func (m *Manager) count(key string, d time.Duration) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.throttled[key]
	t.Count++
	t.Total += d
	m.throttled[key] = t
	return d
}

// Throttled returns, per quota key, the throttles answered so far.
func (m *Manager) Throttled() map[string]Throttles {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Throttles, len(m.throttled))
	for k, t := range m.throttled {
		out[k] = t
	}
	return out
}

// RecordRequestTime adds d, the time one request of entity spent in the
// broker's handler, to entity's request_percentage rate, whose quota is
// limit percent of one thread, and returns how long the client must be
// throttled: zero within the quota, else the time that brings the rate
// back to it over the measured span, at most one window (Kafka's
// ClientRequestQuotaManager bounds it so, as one slow request must not
// mute a client for the whole span).
func (m *Manager) RecordRequestTime(entity string, d time.Duration, limit float64, now time.Time) time.Duration {
	observed, elapsed := m.record(RequestPercentage, entity, d.Seconds()*100, now)
	if limit <= 0 || observed <= limit {
		return 0
	}
	throttle := time.Duration((observed - limit) / limit * float64(elapsed))
	return m.count(RequestPercentage, min(throttle, m.windowSize))
}

// RecordConnection counts a new connection from ip, whose
// connection_creation_rate quota is limit connections a second, and
// returns zero to accept it, or, over the quota, how long to hold it
// before closing it unread, as Kafka's ConnectionQuotas does: the time
// that brings the rate back to the quota, at most one window. A refused
// connection is not counted, so a client that keeps retrying is refused
// only while its accepted connections exceed the quota.
func (m *Manager) RecordConnection(ip string, limit float64, now time.Time) time.Duration {
	if limit <= 0 {
		return 0
	}
	observed, elapsed := m.record(ConnectionCreationRate, ip, 1, now)
	if observed <= limit {
		return 0
	}
	m.record(ConnectionCreationRate, ip, -1, now)
	throttle := time.Duration((observed - limit) / limit * float64(elapsed))
	return m.count(ConnectionCreationRate, min(throttle, m.windowSize))
}

// record adds v to the rate of key for entity and returns the rate after
// it, a second, and the span it is measured over.
func (m *Manager) record(key, entity string, v float64, now time.Time) (float64, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := rateKey{key, entity}
	r := m.rates[k]
	if r == nil {
		r = &rate{starts: make([]time.Time, m.windows), values: make([]float64, m.windows)}
		r.starts[0] = now
		m.rates[k] = r
	}
	m.advance(r, now)
	r.values[r.cur] += v
	r.last = now
	m.sweep(now)
	return m.value(r, now)
}

// advance moves r's current window forward to now, clearing the windows
// it passes.
func (m *Manager) advance(r *rate, now time.Time) {
	for now.Sub(r.starts[r.cur]) >= m.windowSize {
		next := r.starts[r.cur].Add(m.windowSize)
		if now.Sub(next) >= time.Duration(m.windows)*m.windowSize {
			next = now // idle for longer than all windows: start afresh
			for i := range r.values {
				r.values[i], r.starts[i] = 0, time.Time{}
			}
		}
		r.cur = (r.cur + 1) % m.windows
		r.starts[r.cur], r.values[r.cur] = next, 0
	}
}

// value is the rate a second over the windows, and the span it is
// measured over: at least windows-1 windows, as Kafka's Rate measures it
// (so one burst at the start does not look like a huge rate).
func (m *Manager) value(r *rate, now time.Time) (float64, time.Duration) {
	var total float64
	oldest := now
	for i := range r.values {
		if r.starts[i].IsZero() {
			continue
		}
		total += r.values[i]
		if r.starts[i].Before(oldest) {
			oldest = r.starts[i]
		}
	}
	elapsed := max(now.Sub(oldest), time.Duration(m.windows-1)*m.windowSize)
	return total / elapsed.Seconds(), elapsed
}

// sweep forgets, now and then, rates idle for longer than all windows.
func (m *Manager) sweep(now time.Time) {
	if m.sweeps++; m.sweeps < 1024 {
		return
	}
	m.sweeps = 0
	for k, r := range m.rates {
		if now.Sub(r.last) > 2*time.Duration(m.windows)*m.windowSize {
			delete(m.rates, k)
		}
	}
}
