package coordinator_test

import (
	"testing"
	"time"

	"github.com/strata-io/strata/internal/coordinator"
)

func TestTimers(t *testing.T) {
	ts := coordinator.NewTimers()
	base := time.Unix(100, 0)
	var fired []string
	add := func(name string, at time.Duration) {
		ts.Schedule(name, base.Add(at), func(time.Time) { fired = append(fired, name) })
	}
	add("b", 2*time.Second)
	add("a", 1*time.Second)
	add("c", 3*time.Second)
	add("a", 4*time.Second) // moves a
	ts.Cancel("c")
	if next, _ := ts.Next(); !next.Equal(base.Add(2 * time.Second)) {
		t.Fatalf("next = %v", next)
	}
	ts.RunDue(base.Add(10 * time.Second))
	if len(fired) != 2 || fired[0] != "b" || fired[1] != "a" {
		t.Fatalf("fired %v", fired)
	}
	if ts.Len() != 0 {
		t.Fatalf("%d timers left", ts.Len())
	}
}

// A function that schedules a deadline already due runs it in the same
// RunDue, after itself.
func TestTimersRunDueRunsWhatItSchedules(t *testing.T) {
	ts := coordinator.NewTimers()
	base := time.Unix(100, 0)
	var fired []string
	ts.Schedule("first", base, func(now time.Time) {
		fired = append(fired, "first")
		ts.Schedule("second", now, func(time.Time) { fired = append(fired, "second") })
	})
	ts.RunDue(base)
	if len(fired) != 2 || fired[1] != "second" {
		t.Fatalf("fired %v", fired)
	}
}
