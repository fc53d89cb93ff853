package storage

import (
	"cmp"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// cleanerLoop runs CleanLogs every log.cleaner.backoff.ms (as it is now:
// SetCleanerSettings restarts the wait) until stop is closed, which also
// cancels a cleaning under way.
func (m *Manager) cleanerLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := m.cleanerSettings().Backoff
	t := time.NewTicker(backoff)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-m.cleanerChanged:
			if b := m.cleanerSettings().Backoff; b != backoff {
				backoff = b
				t.Reset(backoff)
			}
		case <-t.C:
			m.CleanLogs(ctx, m.now())
		}
	}
}

// CleanLogs is one round of the log cleaner: it cleans every compacted
// log whose cleaning is due at now (its dirty ratio reached
// min.cleanable.dirty.ratio, or a tombstone's delete horizon passed),
// dirtiest first, CleanerSettings.Threads at a time, and writes
// cleaner-offset-checkpoint after each. It returns how many logs it
// cleaned. Failures are logged; a log whose data cannot be cleaned is
// skipped until restart.
func (m *Manager) CleanLogs(ctx context.Context, now time.Time) int {
	type candidate struct {
		log   *Log
		ratio float64
	}
	var due []candidate
	for _, l := range m.Logs() {
		if info, ok := cleaningDue(l, now); ok {
			due = append(due, candidate{l, info.Ratio})
		}
	}
	slices.SortStableFunc(due, func(a, b candidate) int { return cmp.Compare(b.ratio, a.ratio) })
	settings := m.cleanerSettings()
	threads := settings.Threads
	opts := CleanOptions{Now: now, DedupeBufferSize: settings.DedupeBufferSize / int64(threads),
		ProducerIDExpirationMs: settings.ProducerIDExpirationMs}

	var wg sync.WaitGroup
	var mu sync.Mutex
	cleaned := 0
	work := make(chan *Log)
	for range min(threads, len(due)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range work {
				_, err := l.Clean(ctx, opts)
				switch {
				case errors.Is(err, errCleanAborted):
					m.logger.Debug("cleaning aborted", "log", l.String(), "err", err)
					continue
				case err != nil && !errors.Is(err, errUncleanable):
					m.logger.Warn("cleaning failed", "log", l.String(), "err", err)
					continue
				case err != nil:
					continue // logged by the log, once
				}
				if err := m.writeCleanerCheckpoint(); err != nil {
					m.logger.Warn("writing cleaner-offset-checkpoint", "err", err)
				}
				mu.Lock()
				cleaned++
				mu.Unlock()
			}
		}()
	}
	for _, c := range due {
		if ctx.Err() != nil {
			break
		}
		work <- c.log
	}
	close(work)
	wg.Wait()
	return cleaned
}

// writeCleanerCheckpoint writes cleaner-offset-checkpoint.
func (m *Manager) writeCleanerCheckpoint() error {
	logs := m.Logs()
	m.checkpointMu.Lock()
	defer m.checkpointMu.Unlock()
	return m.writeCleanerCheckpointLocked(logs)
}

// writeCleanerCheckpointLocked writes the cleaner checkpoints of the logs
// that have one. m.checkpointMu must be held.
func (m *Manager) writeCleanerCheckpointLocked(logs []*Log) error {
	offsets := map[TopicPartition]int64{}
	for _, l := range logs {
		if o := l.CleanerCheckpoint(); o > 0 {
			offsets[TopicPartition{l.topic, l.partition}] = o
		}
	}
	return WriteOffsetCheckpoint(m.fs, filepath.Join(m.dir, CleanerOffsetCheckpointFile), offsets)
}

// cleaningDue reports whether the Manager's cleaner should clean the log
// at now: it is compacted, was not found uncleanable, and either its dirty
// ratio reached min.cleanable.dirty.ratio or a tombstone's delete horizon
// passed.
func cleaningDue(l *Log, now time.Time) (CleanableInfo, bool) {
	cfg := l.cfg.Load()
	if !cfg.Compact || l.cleaner.uncleanable.Load() || l.Offline() != nil {
		return CleanableInfo{}, false
	}
	info := newCleanState(l, now).CleanableInfo
	if info.DirtyBytes > 0 && info.Ratio >= cfg.MinCleanableDirtyRatio {
		return info, true
	}
	return info, info.CleanBytes+info.DirtyBytes > 0 && now.UnixMilli() >= l.cleaner.deleteHorizon.Load()
}
