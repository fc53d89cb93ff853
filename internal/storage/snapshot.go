package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/strata-io/strata/internal/vfs"
)

// ProducerSnapshots are a log's producer-state snapshot files
// (%020d.snapshot), which the producer package encodes: this type only
// names, writes (atomically), syncs and prunes them. It belongs to its
// Log (Log.Snapshots), and its methods may be called concurrently with
// everything, Append included. fileMu serializes the files' changes; the
// log takes it after appendMu and before commit.syncMu, so that a
// truncation or retention sees no snapshot written beside it. mu is a
// leaf: taken under any of the log's locks, and none under it.
type ProducerSnapshots struct {
	fs     vfs.FS
	fileMu sync.Mutex
	mu     struct {
		sync.Mutex
		// offsets are those of the snapshot files, ascending.
		offsets []int64
		// unsynced are the offsets of the snapshots WriteRoll wrote
		// since the last flush.
		unsynced map[int64]struct{}
	}

	// Set by OpenLog: the log's directory now, its name (for errors),
	// whether it is offline, its end offset, and what an unsynced write
	// tells it (the next flush syncs the directory; the Manager queues
	// the log for its roll flusher).
	dir           func() string
	name          string
	offline       func() error
	logEnd        *atomic.Int64
	wroteUnsynced func()
}

func snapshotPath(dir string, offset int64) string {
	return filepath.Join(dir, segmentName(offset)+snapshotSuffix)
}

// Snapshots returns the log's producer-state snapshots.
func (l *Log) Snapshots() *ProducerSnapshots { return &l.snapshots }

// Write stores a producer-state snapshot taken at offset (the state after
// every batch below it) as "%020d.snapshot", atomically. data belongs to
// the caller.
func (x *ProducerSnapshots) Write(offset int64, data []byte) error {
	return x.write(offset, data, true)
}

// WriteRoll is Write for the snapshot a roll takes at the new segment's
// base offset, without an fsync on the caller's path, as Kafka's roll
// takes it (takeSnapshot without a flush) and syncs it in the flush it
// schedules: the file is renamed into place unsynced, and the next flush
// of the log syncs it and its directory entry; the log is queued for the
// Manager's roll flusher again to make that soon. A power loss before then
// may leave the file empty or torn, which its CRC shows: the replica then
// falls back to an older snapshot.
func (x *ProducerSnapshots) WriteRoll(offset int64, data []byte) error {
	return x.write(offset, data, false)
}

func (x *ProducerSnapshots) write(offset int64, data []byte, sync bool) error {
	x.fileMu.Lock()
	defer x.fileMu.Unlock()
	if err := x.offline(); err != nil {
		return err
	}
	if leo := x.logEnd.Load(); offset < 0 || offset > leo {
		return fmt.Errorf("storage: snapshot at %d outside [0, %d] of %s", offset, leo, x.name)
	}
	if err := x.writeLocked(x.dir(), offset, data, sync); err != nil {
		return fmt.Errorf("storage: writing snapshot %d of %s: %w", offset, x.name, err)
	}
	if !sync {
		x.wroteUnsynced()
	}
	return nil
}

// writeLocked writes the snapshot at offset in dir, synced or not (then
// the next sync syncs it). x.fileMu must be held.
func (x *ProducerSnapshots) writeLocked(dir string, offset int64, data []byte, sync bool) error {
	path := snapshotPath(dir, offset)
	if x.has(offset) {
		// A broker that restarts without appends (or a partition that
		// has none) takes the same snapshot again: reading it back costs
		// far less than writing and syncing it.
		if old, err := vfs.ReadFile(x.fs, path); err == nil && bytes.Equal(old, data) {
			return nil
		}
	}
	write := vfs.WriteFileAtomic
	if !sync {
		write = writeFileRenamed
	}
	if err := write(x.fs, path, data); err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if i, ok := slices.BinarySearch(x.mu.offsets, offset); !ok {
		x.mu.offsets = slices.Insert(x.mu.offsets, i, offset)
	}
	if !sync {
		if x.mu.unsynced == nil {
			x.mu.unsynced = map[int64]struct{}{}
		}
		x.mu.unsynced[offset] = struct{}{}
	}
	return nil
}

// writeFileRenamed is vfs.WriteFileAtomic without its fsyncs: readers see
// the old file or the new one whole, but a power loss may keep neither.
func writeFileRenamed(fs vfs.FS, name string, data []byte) error {
	tmp := name + tmpSuffix
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return fs.Rename(tmp, name)
}

// sync syncs the snapshot files WriteRoll wrote (their directory
// entries are the caller's: the log's unflushedDir). The log's commit.syncMu
// must be held.
func (x *ProducerSnapshots) sync(dir string) error {
	x.mu.Lock()
	pending := x.mu.unsynced
	x.mu.unsynced = nil
	x.mu.Unlock()
	for offset := range pending {
		f, err := x.fs.Open(snapshotPath(dir, offset))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted since
		}
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Offsets returns the offsets of the stored snapshots, ascending.
func (x *ProducerSnapshots) Offsets() []int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.mu.offsets)
}

func (x *ProducerSnapshots) has(offset int64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := slices.BinarySearch(x.mu.offsets, offset)
	return ok
}

// Read returns the snapshot taken at offset, or ErrNoSnapshot.
func (x *ProducerSnapshots) Read(offset int64) ([]byte, error) {
	x.fileMu.Lock()
	defer x.fileMu.Unlock()
	if !x.has(offset) {
		return nil, fmt.Errorf("%w: %d in %s", ErrNoSnapshot, offset, x.name)
	}
	return vfs.ReadFile(x.fs, snapshotPath(x.dir(), offset))
}

// deleteLocked removes the snapshots in dir that pred selects. x.fileMu
// must be held (or the log not yet shared).
func (x *ProducerSnapshots) deleteLocked(dir string, pred func(offset int64) bool) error {
	x.mu.Lock()
	var doomed, kept []int64
	for _, o := range x.mu.offsets {
		if pred(o) {
			doomed = append(doomed, o)
		} else {
			kept = append(kept, o)
		}
	}
	x.mu.offsets = kept
	x.mu.Unlock()
	var errs []error
	for _, o := range doomed {
		if err := x.fs.Remove(snapshotPath(dir, o)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pruneLocked removes the snapshots below the log start offset, keeping
// the latest snapshot whatever its offset. x.fileMu must be held.
func (x *ProducerSnapshots) pruneLocked(dir string, logStart int64) error {
	x.mu.Lock()
	latest := int64(-1)
	if n := len(x.mu.offsets); n > 0 {
		latest = x.mu.offsets[n-1]
	}
	x.mu.Unlock()
	return x.deleteLocked(dir, func(o int64) bool { return o < logStart && o != latest })
}
