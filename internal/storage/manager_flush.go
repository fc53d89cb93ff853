package storage

import (
	"errors"
)

// The roll flusher: Kafka's UnifiedLog.roll schedules a flush of
// everything below the new segment's base offset on the log manager's
// scheduler, so the recovery point reaches the active segment and a crash
// recovers only the active segment, not the whole log. Strata does the
// same with one goroutine per Manager (Start runs it): a roll queues its
// log (rollQueue, under appendMu, without blocking) and the flusher calls
// FlushRolled on each queued log; a log that rolls again before its turn
// is queued once. The recovery-point checkpoint that recovery reads is
// written by Start's loop every CheckpointInterval, and at Close.

// rollQueue holds the logs that rolled since the flusher last looked.
type rollQueue struct {
	logs   map[*Log]struct{} // guarded by Manager.rollMu
	signal chan struct{}     // capacity 1: something was queued
}

// queueRolled queues l for FlushRolled. It is a Log's rolled hook: it runs
// under l.appendMu and never blocks.
func (m *Manager) queueRolled(l *Log) {
	m.rollMu.Lock()
	m.rolled.logs[l] = struct{}{}
	m.rollMu.Unlock()
	select {
	case m.rolled.signal <- struct{}{}:
	default:
	}
}

// takeRolled returns the queued logs and empties the queue.
func (m *Manager) takeRolled() map[*Log]struct{} {
	m.rollMu.Lock()
	defer m.rollMu.Unlock()
	logs := m.rolled.logs
	m.rolled.logs = map[*Log]struct{}{}
	return logs
}

// queueUnflushedRolls queues every log whose recovery point is below its
// active segment, as after an unclean shutdown (or one written by a
// version that flushed no rolls): without this a log that does not roll
// again would be recovered whole after every crash.
func (m *Manager) queueUnflushedRolls() {
	for _, l := range m.Logs() {
		segs := l.segmentList()
		if l.RecoveryPoint() < segs[len(segs)-1].baseOffset {
			m.queueRolled(l)
		}
	}
}

// flushRolledLoop runs FlushRolled on the queued logs until stop is closed.
func (m *Manager) flushRolledLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		case <-m.rolled.signal:
		}
		for l := range m.takeRolled() {
			select {
			case <-stop:
				return // Close flushes every log anyway
			default:
			}
			err := l.FlushRolled()
			if err != nil && !errors.Is(err, ErrLogOffline) && !errors.Is(err, ErrClosed) {
				m.logger.Warn("flushing rolled segments", "log", l.String(), "err", err)
			}
		}
	}
}
