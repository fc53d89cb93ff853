package group

import (
	"time"

	"github.com/strata-io/strata/internal/coordinator"
)

// Clock is the coordinator's source of time; tests substitute one they
// advance by hand, so no test sleeps.
type Clock = coordinator.Clock

// Timer is a pending Clock.AfterFunc.
type Timer = coordinator.Timer

// timerKind names what a deadline is for; with the group and member it keys
// the deadline, so scheduling the same key again moves it (Kafka's
// CoordinatorTimer.schedule semantics).
type timerKind uint8

const (
	timerClassicHeartbeat  timerKind = iota // a classic member's session (or a new member's join timeout)
	timerClassicJoin                        // a classic group's join phase: initial delay or rebalance timeout
	timerClassicSync                        // a classic group's wait for SyncGroup from every member
	timerConsumerSession                    // a KIP-848 member's session
	timerConsumerRebalance                  // a KIP-848 member's time to revoke partitions
	timerOffsetsCleanup                     // the shard's periodic offset expiration
)

type timerKey struct {
	kind   timerKind
	group  string
	member string
}

// timers is the state's keyed set of deadlines over the runtime's
// coordinator.Timers: a due deadline's function runs with the state's now
// set to the time it runs at.
type timers struct {
	set *coordinator.Timers
	now *time.Time
}

// schedule sets key's deadline to at, replacing any earlier one.
func (t *timers) schedule(key timerKey, at time.Time, fn func()) {
	t.set.Schedule(key, at, func(now time.Time) {
		*t.now = now
		fn()
	})
}

func (t *timers) cancel(key timerKey) { t.set.Cancel(key) }
