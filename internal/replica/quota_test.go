package replica

import (
	"math"
	"testing"
	"time"
)

func TestQuota(t *testing.T) {
	q := NewQuota()
	start := time.Unix(1_700_000_000, 0)
	q.Record(start, 1<<30)
	if q.Exceeded(start) {
		t.Fatal("a quota without a bound is exceeded")
	}
	q.SetBound(1000)
	// 1 GiB over at least ten windows is far above 1000 B/s.
	if !q.Exceeded(start.Add(time.Second)) {
		t.Fatal("1 GiB in a second does not exceed 1000 B/s")
	}
	// Once the bytes age out of the eleven windows, the rate is 0.
	if q.Exceeded(start.Add(11 * time.Second)) {
		t.Fatalf("rate %v after the windows passed", q.Rate(start.Add(11*time.Second)))
	}
	// 5000 bytes a second for 20 s: 5000 B/s measured, above 4000, below 6000.
	now := start.Add(20 * time.Second)
	for i := range 20 {
		q.Record(now.Add(time.Duration(i)*time.Second), 5000)
	}
	now = now.Add(19 * time.Second)
	if r := q.Rate(now); math.Abs(r-5500) > 600 {
		t.Fatalf("rate %v, want about 5000-5500 B/s", r)
	}
	q.SetBound(4000)
	if !q.Exceeded(now) {
		t.Fatal("5000 B/s does not exceed 4000")
	}
	q.SetBound(7000)
	if q.Exceeded(now) {
		t.Fatal("5000 B/s exceeds 7000")
	}
	// A burst after a quiet spell counts over ten windows, as Kafka's.
	q = NewQuota()
	q.SetBound(1000)
	q.Record(start, 9000)
	if q.Exceeded(start) {
		t.Fatalf("9000 bytes at once measured as %v B/s", q.Rate(start))
	}
}
