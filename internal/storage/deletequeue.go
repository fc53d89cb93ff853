package storage

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-io/strata/internal/vfs"
)

// deleteQueue holds one log's retired segments while they wait out
// file.delete.delay.ms, renamed *.deleted, before they are closed and
// removed, so that file regions handed out before stay readable. It is
// owned by its Log; its mu is a leaf: taken under any of the log's locks,
// and none under it.
type deleteQueue struct {
	fs     vfs.FS
	logger *slog.Logger
	// dir returns the log's directory now: the Manager moves it when it
	// deletes the log, and the retired files move with it.
	dir func() string
	// cfg is the log's configuration (file.delete.delay.ms), and fail
	// takes the log offline.
	cfg  *atomic.Pointer[Config]
	fail func(op string, err error) error
	mu   struct {
		sync.Mutex
		pending map[*pendingDelete]struct{}
	}
}

// pendingDelete is a retired segment waiting in a deleteQueue.
type pendingDelete struct {
	seg   *segment
	timer *time.Timer
	once  sync.Once // the timer and Close may both try to finish it
}

// retire takes segments out of use: their files are renamed "*.deleted" at
// once (so their names can be reused and a restart removes them) and
// closed and removed after file.delete.delay.ms. A failed rename takes the
// log offline. The caller holds the log's appendMu and commit.syncMu and
// has removed segs from its segment list.
func (q *deleteQueue) retire(segs []*segment) error {
	delay := time.Duration(q.cfg.Load().FileDeleteDelayMs) * time.Millisecond
	dir := q.dir()
	for _, s := range segs {
		for _, p := range s.paths(dir) {
			if err := q.fs.Rename(p, p+deletedSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				return q.fail("renaming deleted segment", err)
			}
		}
		pd := &pendingDelete{seg: s}
		if delay <= 0 {
			q.finish(pd)
			continue
		}
		q.mu.Lock()
		if q.mu.pending == nil {
			q.mu.pending = map[*pendingDelete]struct{}{}
		}
		q.mu.pending[pd] = struct{}{}
		pd.timer = time.AfterFunc(delay, func() {
			q.finish(pd)
			q.mu.Lock()
			delete(q.mu.pending, pd)
			q.mu.Unlock()
		})
		q.mu.Unlock()
	}
	return nil
}

// finish closes a retired segment and removes its files, once.
func (q *deleteQueue) finish(pd *pendingDelete) {
	pd.once.Do(func() {
		if err := pd.seg.close(); err != nil {
			q.logger.Warn("closing deleted segment", "segment", pd.seg.baseOffset, "err", err)
		}
		dir := q.dir()
		for _, p := range pd.seg.paths(dir) {
			if err := q.fs.Remove(p + deletedSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				q.logger.Warn("removing deleted segment file", "path", p+deletedSuffix, "err", err)
			}
		}
	})
}

// finishAll finishes every delayed deletion now (the log's Close).
func (q *deleteQueue) finishAll() {
	q.mu.Lock()
	pending := q.mu.pending
	q.mu.pending = nil
	q.mu.Unlock()
	for pd := range pending {
		pd.timer.Stop()
		q.finish(pd)
	}
}

// len returns how many retired segments still wait.
func (q *deleteQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.mu.pending)
}
