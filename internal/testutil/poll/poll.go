// Package poll waits in tests for a condition to hold, never for a fixed
// time: it checks the condition every few milliseconds and fails the test
// with what it waited for once the deadline passes.
package poll

import (
	"testing"
	"time"
)

// interval is how often the condition is checked.
const interval = 10 * time.Millisecond

// Until checks cond until it holds, failing t after d.
func Until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilStatus(t, d, what, func() (bool, string) { return cond(), "" })
}

// UntilStatus is Until for a condition that also says where it stands, for
// the failure message.
func UntilStatus(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, status := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if status != "" {
				t.Fatalf("timed out after %v waiting for %s: %s", d, what, status)
			}
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(interval)
	}
}
