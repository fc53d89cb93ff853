package quota

import (
	"testing"
	"time"
)

func TestManagerThrottles(t *testing.T) {
	m := NewManager(11, time.Second)
	now := time.Unix(1000, 0)
	// 1 MB/s quota; 10 MB in the first second is a rate of 1 MB/s over
	// the minimum 10-second span: at the quota, no throttle.
	if d := m.Record(ProducerByteRate, "user=a", 10<<20, 1<<20, now); d != 0 {
		t.Fatalf("at the quota: throttled %v", d)
	}
	// Another 10 MB: 2 MB/s, twice the quota: throttle (2-1)/1 * 11 s,
	// capped at the 11 s span.
	d := m.Record(ProducerByteRate, "user=a", 10<<20, 1<<20, now.Add(500*time.Millisecond))
	if d != 11*time.Second {
		t.Fatalf("twice the quota: throttled %v, want 11s", d)
	}
	// 5% over the quota: a throttle of 5% of the span.
	m2 := NewManager(11, time.Second)
	m2.Record(ConsumerByteRate, "client-id=c", 10_500, 1000, now)
	if d := m2.Record(ConsumerByteRate, "client-id=c", 0, 1000, now); d < 500*time.Millisecond || d > 600*time.Millisecond {
		t.Fatalf("5%% over: throttled %v, want 550ms", d)
	}
	// Rates are per entity and key.
	if d := m.Record(ConsumerByteRate, "user=a", 100, 1<<20, now); d != 0 {
		t.Fatalf("another key throttled %v", d)
	}
	if d := m.Record(ProducerByteRate, "user=b", 100, 1<<20, now); d != 0 {
		t.Fatalf("another entity throttled %v", d)
	}
	// After all windows have passed, the rate starts afresh.
	if d := m.Record(ProducerByteRate, "user=a", 100, 1<<20, now.Add(time.Minute)); d != 0 {
		t.Fatalf("after a minute idle: throttled %v", d)
	}
	// No quota: never throttled.
	if d := m.Record(ProducerByteRate, "user=z", 1<<40, 0, now); d != 0 {
		t.Fatalf("without a quota: throttled %v", d)
	}
}

// TestRequestTime: request_percentage is the percentage of one thread an
// entity's requests keep busy, over the same windows as the byte rates;
// the throttle brings it back to the quota and is at most one window.
func TestRequestTime(t *testing.T) {
	now := time.Unix(1000, 0)
	ms := time.Millisecond
	cases := []struct {
		name  string
		limit float64
		// handler times recorded 100 ms apart; the throttle after the last
		handled []time.Duration
		want    time.Duration
	}{
		// 10% of a thread over the 10-second minimum span is 1 s of
		// handler time.
		{"within", 10, []time.Duration{500 * ms, 500 * ms}, 0},
		// 1.05 s: 10.5%, 5% over: 5% of the 10 s span.
		{"just over", 10, []time.Duration{500 * ms, 550 * ms}, 500 * ms},
		// 5 s: 50%, four times over; capped at one window.
		{"capped at a window", 10, []time.Duration{5000 * ms}, time.Second},
		// A quota over 100 is more than one thread's worth: 12 s of
		// handler time in 10 s (requests on several connections at once)
		// is within 150%.
		{"several threads", 150, []time.Duration{6000 * ms, 6000 * ms}, 0},
		{"no quota", 0, []time.Duration{time.Hour}, 0},
	}
	for _, c := range cases {
		m := NewManager(11, time.Second)
		var got time.Duration
		for i, d := range c.handled {
			got = m.RecordRequestTime("user=a", d, c.limit, now.Add(time.Duration(i)*100*ms))
		}
		if got != c.want {
			t.Errorf("%s: throttled %v, want %v", c.name, got, c.want)
		}
	}

	m := NewManager(11, time.Second)
	if d := m.RecordRequestTime("user=a", 2*time.Second, 10, now); d != time.Second {
		t.Fatalf("over the quota: throttled %v", d)
	}
	// The request rate is its own: the same entity's bytes and another
	// entity's requests are not throttled by it.
	if d := m.Record(ProducerByteRate, "user=a", 100, 1<<20, now); d != 0 {
		t.Fatalf("bytes throttled by request time: %v", d)
	}
	if d := m.RecordRequestTime("user=b", time.Millisecond, 10, now); d != 0 {
		t.Fatalf("another entity throttled %v", d)
	}
	// Once the windows have passed, the time is forgotten.
	if d := m.RecordRequestTime("user=a", time.Millisecond, 10, now.Add(12*time.Second)); d != 0 {
		t.Fatalf("after the windows: throttled %v", d)
	}
	// The throttles answered are counted per key.
	if got := m.Throttled(); got[RequestPercentage] != (Throttles{Count: 1, Total: time.Second}) || got[ProducerByteRate].Count != 0 {
		t.Fatalf("throttles counted %+v", got)
	}
}

// TestConnectionRate: connection_creation_rate counts accepted connections
// over the windows; a connection over the quota is refused for up to a
// window and not counted.
func TestConnectionRate(t *testing.T) {
	m := NewManager(11, time.Second)
	now := time.Unix(1000, 0)
	// 2 connections a second over the 10-second minimum span: 20
	// connections are accepted at once, the 21st is over.
	for i := 0; i < 20; i++ {
		if d := m.RecordConnection("10.0.0.1", 2, now); d != 0 {
			t.Fatalf("connection %d throttled %v", i+1, d)
		}
	}
	// 21 in 10 s is 2.1/s, 5% over: 5% of the span, 500 ms.
	if d := m.RecordConnection("10.0.0.1", 2, now); d != 500*time.Millisecond {
		t.Fatalf("connection 21: throttled %v, want 500ms", d)
	}
	// Refused connections are not counted: the next is refused alike,
	// not for longer.
	if d := m.RecordConnection("10.0.0.1", 2, now); d != 500*time.Millisecond {
		t.Fatalf("connection 22: throttled %v, want 500ms", d)
	}
	// Far over a small quota: at most one window.
	m2 := NewManager(11, time.Second)
	m2.RecordConnection("10.0.0.2", 0.1, now)
	if d := m2.RecordConnection("10.0.0.2", 0.1, now); d != time.Second {
		t.Fatalf("far over: throttled %v, want the 1s window", d)
	}
	// Another IP has its own rate; no quota, no throttle.
	if d := m.RecordConnection("10.0.0.3", 2, now); d != 0 {
		t.Fatalf("another ip throttled %v", d)
	}
	if d := m.RecordConnection("10.0.0.1", 0, now); d != 0 {
		t.Fatalf("without a quota: throttled %v", d)
	}
	// Once the windows have passed, the IP connects again.
	if d := m.RecordConnection("10.0.0.1", 2, now.Add(12*time.Second)); d != 0 {
		t.Fatalf("after the windows: throttled %v", d)
	}
}
