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
