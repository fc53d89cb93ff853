package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/strata-io/strata/internal/vfs"
)

func (l *Log) snapshotPath(dir string, offset int64) string {
	return filepath.Join(dir, segmentName(offset)+snapshotSuffix)
}

// WriteSnapshot stores a producer-state snapshot taken at offset (the state
// after every batch below it) as "%020d.snapshot", atomically. data belongs
// to the caller. It may run concurrently with Append.
func (l *Log) WriteSnapshot(offset int64, data []byte) error {
	return l.writeSnapshot(offset, data, true)
}

// WriteRollSnapshot is WriteSnapshot for the snapshot a roll takes at the
// new segment's base offset, without an fsync on the caller's path, as
// Kafka's roll takes it (takeSnapshot without a flush) and syncs it in the
// flush it schedules: the file is renamed into place unsynced, and the
// next flush of the log syncs it and its directory entry; the log is
// queued for the Manager's roll flusher again to make that soon. A power
// loss before then may leave the file empty or torn, which its CRC shows:
// the replica then falls back to an older snapshot.
func (l *Log) WriteRollSnapshot(offset int64, data []byte) error {
	return l.writeSnapshot(offset, data, false)
}

func (l *Log) writeSnapshot(offset int64, data []byte, sync bool) error {
	l.snapshotMu.Lock()
	defer l.snapshotMu.Unlock()
	if err := l.Offline(); err != nil {
		return err
	}
	if leo := l.logEndOffset.Load(); offset < 0 || offset > leo {
		return fmt.Errorf("storage: snapshot at %d outside [0, %d] of %s", offset, leo, l)
	}
	l.mu.RLock()
	_, exists := slices.BinarySearch(l.snapshots, offset)
	l.mu.RUnlock()
	if exists {
		// A broker that restarts without appends (or a partition that
		// has none) takes the same snapshot again: reading it back costs
		// far less than writing and syncing it.
		if old, err := vfs.ReadFile(l.fs, l.snapshotPath(l.Dir(), offset)); err == nil && bytes.Equal(old, data) {
			return nil
		}
	}
	write := vfs.WriteFileAtomic
	if !sync {
		write = writeFileRenamed
	}
	if err := write(l.fs, l.snapshotPath(l.Dir(), offset), data); err != nil {
		return fmt.Errorf("storage: writing snapshot %d of %s: %w", offset, l, err)
	}
	l.mu.Lock()
	if i, ok := slices.BinarySearch(l.snapshots, offset); !ok {
		l.snapshots = slices.Insert(l.snapshots, i, offset)
	}
	l.mu.Unlock()
	if !sync {
		l.unsyncedSnapshotsMu.Lock()
		if l.unsyncedSnapshots == nil {
			l.unsyncedSnapshots = map[int64]struct{}{}
		}
		l.unsyncedSnapshots[offset] = struct{}{}
		l.unsyncedSnapshotsMu.Unlock()
		l.unflushedDir.Store(true)
		if l.rolled != nil {
			l.rolled(l)
		}
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

// syncSnapshots syncs the snapshot files WriteRollSnapshot wrote (their
// directory entries are the caller's: unflushedDir). l.flushMu must be
// held.
func (l *Log) syncSnapshots(dir string) error {
	l.unsyncedSnapshotsMu.Lock()
	pending := l.unsyncedSnapshots
	l.unsyncedSnapshots = nil
	l.unsyncedSnapshotsMu.Unlock()
	for offset := range pending {
		f, err := l.fs.Open(l.snapshotPath(dir, offset))
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

// SnapshotOffsets returns the offsets of the stored snapshots, ascending.
func (l *Log) SnapshotOffsets() []int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Clone(l.snapshots)
}

// ReadSnapshot returns the snapshot taken at offset, or ErrNoSnapshot.
func (l *Log) ReadSnapshot(offset int64) ([]byte, error) {
	l.snapshotMu.Lock()
	defer l.snapshotMu.Unlock()
	l.mu.RLock()
	_, ok := slices.BinarySearch(l.snapshots, offset)
	dir := l.dir
	l.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %d in %s", ErrNoSnapshot, offset, l)
	}
	return vfs.ReadFile(l.fs, l.snapshotPath(dir, offset))
}

// LatestSnapshot returns the newest snapshot; ok is false when there is
// none.
func (l *Log) LatestSnapshot() (offset int64, data []byte, ok bool, err error) {
	offs := l.SnapshotOffsets()
	if len(offs) == 0 {
		return -1, nil, false, nil
	}
	offset = offs[len(offs)-1]
	data, err = l.ReadSnapshot(offset)
	if err != nil {
		return offset, nil, false, err
	}
	return offset, data, true, nil
}

// DeleteSnapshot removes the snapshot taken at offset (one the producer
// package found corrupt); a missing one is not an error.
func (l *Log) DeleteSnapshot(offset int64) error {
	l.snapshotMu.Lock()
	defer l.snapshotMu.Unlock()
	return l.deleteSnapshotsLocked(func(o int64) bool { return o == offset })
}

// deleteSnapshotsLocked removes the snapshots pred selects. l.snapshotMu
// must be held (or the log not yet shared).
func (l *Log) deleteSnapshotsLocked(pred func(offset int64) bool) error {
	l.mu.Lock()
	var doomed, kept []int64
	for _, o := range l.snapshots {
		if pred(o) {
			doomed = append(doomed, o)
		} else {
			kept = append(kept, o)
		}
	}
	l.snapshots = kept
	dir := l.dir
	l.mu.Unlock()
	var errs []error
	for _, o := range doomed {
		if err := l.fs.Remove(l.snapshotPath(dir, o)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pruneSnapshotsLocked removes snapshots below the log start offset,
// keeping the latest snapshot whatever its offset. l.snapshotMu must be
// held.
func (l *Log) pruneSnapshotsLocked(logStart int64) error {
	l.mu.RLock()
	latest := int64(-1)
	if n := len(l.snapshots); n > 0 {
		latest = l.snapshots[n-1]
	}
	l.mu.RUnlock()
	return l.deleteSnapshotsLocked(func(o int64) bool { return o < logStart && o != latest })
}
