package storage

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/strata-io/strata/internal/vfs"
)

// AbortedTxn is one entry of the aborted-transaction index: Kafka's
// AbortedTxn. A read_committed consumer drops the records of ProducerID
// from FirstOffset up to the marker at LastOffset.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
	// LastOffset is the offset of the ABORT marker.
	LastOffset int64
	// LastStableOffset is the partition's last stable offset once the
	// marker was appended.
	LastStableOffset int64
}

const (
	txnIndexSuffix   = ".txnindex"
	abortedTxnSize   = 34
	abortedTxnFormat = 0
)

func appendAbortedTxn(b []byte, t AbortedTxn) []byte {
	b = binary.BigEndian.AppendUint16(b, abortedTxnFormat)
	b = binary.BigEndian.AppendUint64(b, uint64(t.ProducerID))
	b = binary.BigEndian.AppendUint64(b, uint64(t.FirstOffset))
	b = binary.BigEndian.AppendUint64(b, uint64(t.LastOffset))
	return binary.BigEndian.AppendUint64(b, uint64(t.LastStableOffset))
}

// decodeTxnIndex reads a .txnindex file's entries; a torn last entry is
// dropped, a bad version ends the entries (it is what a crash leaves).
func decodeTxnIndex(data []byte) []AbortedTxn {
	var out []AbortedTxn
	for len(data) >= abortedTxnSize {
		if binary.BigEndian.Uint16(data) != abortedTxnFormat {
			break
		}
		out = append(out, AbortedTxn{
			ProducerID:       int64(binary.BigEndian.Uint64(data[2:])),
			FirstOffset:      int64(binary.BigEndian.Uint64(data[10:])),
			LastOffset:       int64(binary.BigEndian.Uint64(data[18:])),
			LastStableOffset: int64(binary.BigEndian.Uint64(data[26:])),
		})
		data = data[abortedTxnSize:]
	}
	return out
}

// TxnIndex is a log's aborted-transaction index: the entries of its
// .txnindex files, in memory, and which files a flush must sync. It
// belongs to its Log (Log.TxnIndex); its methods may be called
// concurrently with everything, but the replica serializes Append and
// Rebuild with the log's appends. Its mu is taken after the log's
// appendMu, snapshots.fileMu and commit.syncMu, before Log.mu (its
// methods read the log's directory).
type TxnIndex struct {
	// Set by OpenLog: the log's file system, its directory now, its name
	// (for errors), what takes it offline, why it cannot be written, its
	// end offset and its segments.
	fs       vfs.FS
	dir      func() string
	name     string
	fail     func(op string, err error) error
	writable func() error
	logEnd   *atomic.Int64
	segments func() []*segment

	// recoveryPoint is the log's (its flusher's): an entry appended below
	// it is synced at once.
	recoveryPoint *atomic.Int64
	// suspectFrom is where the index stops being trusted after open
	// (SuspectFrom); set by the log's load, then only read.
	suspectFrom int64
	// firstUnstable is SetFirstUnstableOffset's, -1 when none.
	firstUnstable atomic.Int64
	mu            struct {
		sync.Mutex
		// files are the entries of each .txnindex file by its base
		// offset; aborted is all of them by marker offset.
		files   map[int64][]AbortedTxn
		aborted []AbortedTxn
		// unsynced are the files (by base offset) written since the
		// last flush, true for one created since (its directory entry
		// needs a sync too).
		unsynced map[int64]bool
	}
}

func (x *TxnIndex) path(base int64) string {
	return filepath.Join(x.dir(), segmentName(base)+txnIndexSuffix)
}

// TxnIndex returns the log's aborted-transaction index.
func (l *Log) TxnIndex() *TxnIndex { return &l.txns }

// Append adds an aborted transaction to the index of the segment
// holding its marker (t.LastOffset, which must be in the log). The replica
// calls it under its append lock, right after the marker's append, so the
// entry is written before any later batch, and before the segment can
// roll. The entry reaches the file; the next Flush syncs it (a crash may
// lose it before, and recovery adds it again from the log: see
// SuspectFrom).
func (x *TxnIndex) Append(t AbortedTxn) error {
	if err := x.writable(); err != nil {
		return err
	}
	if t.LastOffset >= x.logEnd.Load() || t.FirstOffset > t.LastOffset {
		return fmt.Errorf("storage: aborted transaction %+v outside the log of %s", t, x.name)
	}
	segs := x.segments()
	i, found := slices.BinarySearchFunc(segs, t.LastOffset, func(s *segment, o int64) int {
		if s.baseOffset > o {
			return 1
		}
		if s.baseOffset < o {
			return -1
		}
		return 0
	})
	if !found {
		i--
	}
	return x.append(t, segs[max(i, 0)].baseOffset)
}

// append writes t to the file of the segment based at base.
func (x *TxnIndex) append(t AbortedTxn, base int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if slices.ContainsFunc(x.mu.files[base], func(a AbortedTxn) bool { return a.LastOffset == t.LastOffset }) {
		return nil
	}
	f, err := x.fs.OpenReadWrite(x.path(base))
	if err != nil {
		return x.fail("opening a transaction index", err)
	}
	_, err = f.WriteAt(appendAbortedTxn(nil, t), int64(len(x.mu.files[base]))*abortedTxnSize)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return x.fail("writing a transaction index", err)
	}
	if x.mu.files == nil {
		x.mu.files = map[int64][]AbortedTxn{}
	}
	// A new file's name is durable once the directory is synced.
	created := len(x.mu.files[base]) == 0
	x.mu.files[base] = append(x.mu.files[base], t)
	if x.mu.unsynced == nil {
		x.mu.unsynced = map[int64]bool{}
	}
	x.mu.unsynced[base] = x.mu.unsynced[base] || created
	x.rebuildAbortedLocked()
	if t.LastOffset < x.recoveryPoint.Load() {
		// A flush round moved the recovery point past the marker before
		// the entry was noted (commitRecoveryPoint): sync it now, not at
		// the next round.
		delete(x.mu.unsynced, base)
		if err := x.sync(base); err != nil {
			return x.fail("syncing a transaction index", err)
		}
		if err := vfs.SyncDir(x.fs, x.dir()); err != nil {
			return x.fail("syncing directory", err)
		}
	}
	return nil
}

// commitRecoveryPoint syncs the .txnindex files written to, then
// advances the recovery point from recoveryPoint to target (Flush's last
// step), under x.mu once no file is left to sync: an entry
// Append notes meanwhile is either synced here or sees the new
// recovery point and syncs itself. So every entry whose marker is below
// the recovery point is durable, and recovery need only rebuild the
// entries of the segments it recovers, as Kafka's LogSegment.flush syncs
// its txnIndex. The log's commit.syncMu must be held.
func (x *TxnIndex) commitRecoveryPoint(recoveryPoint, target int64) error {
	for {
		x.mu.Lock()
		pending := x.mu.unsynced
		x.mu.unsynced = nil
		if len(pending) == 0 {
			if target > recoveryPoint {
				x.recoveryPoint.Store(target)
			}
			x.mu.Unlock()
			return nil
		}
		x.mu.Unlock()
		created := false
		for base, isNew := range pending {
			if err := x.sync(base); err != nil {
				return x.fail("syncing a transaction index", err)
			}
			created = created || isNew
		}
		if created {
			if err := vfs.SyncDir(x.fs, x.dir()); err != nil {
				return x.fail("syncing directory", err)
			}
		}
	}
}

func (x *TxnIndex) sync(base int64) error {
	f, err := x.fs.Open(x.path(base))
	if errors.Is(err, os.ErrNotExist) {
		return nil // rewritten away (atomically, synced) since
	}
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SuspectFrom is the offset from which the aborted-transaction
// index cannot be trusted after the log opened: the base offset of the
// first segment recovery checked (whose entries a crash may have lost or
// left stale), or of a .txnindex file found torn; the log end offset when
// the whole index is trusted (a clean shutdown). The replica rebuilds the
// entries from there from the log (Rebuild), replaying the
// producers' state from a snapshot at or below it, as Kafka's LogLoader
// rebuilds the transaction index of every segment it recovers.
func (x *TxnIndex) SuspectFrom() int64 { return x.suspectFrom }

// Rebuild replaces the index entries whose marker is at or
// after from with txns, the aborted transactions a replay of the log from
// from found (in any order; each with its marker in [from, log end)).
// keep says which of the replaced entries to keep all the same when txns
// has none at their marker: those of transactions that began below where
// the replay started, which it cannot know the first offset of. Changed
// files are rewritten atomically (synced), emptied ones removed.
func (x *TxnIndex) Rebuild(from int64, txns []AbortedTxn, keep func(AbortedTxn) bool) error {
	if err := x.writable(); err != nil {
		return err
	}
	end := x.logEnd.Load()
	found := map[int64]bool{}
	for _, t := range txns {
		if t.LastOffset < from || t.LastOffset >= end || t.FirstOffset > t.LastOffset {
			return fmt.Errorf("storage: rebuilt aborted transaction %+v outside [%d, %d) of %s", t, from, end, x.name)
		}
		found[t.LastOffset] = true
	}
	return x.rebuild(x.segments(), from, txns, func(a AbortedTxn) bool {
		return !found[a.LastOffset] && keep != nil && keep(a)
	})
}

// rebuild is Rebuild once its arguments are checked: keep says
// which replaced entries stay.
func (x *TxnIndex) rebuild(segs []*segment, from int64, txns []AbortedTxn, keep func(AbortedTxn) bool) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	want := map[int64][]AbortedTxn{}
	for base, es := range x.mu.files {
		for _, a := range es {
			if a.LastOffset < from || keep(a) {
				want[base] = append(want[base], a)
			}
		}
	}
	for _, t := range txns {
		base := segs[floorSegment(segs, t.LastOffset)].baseOffset
		want[base] = append(want[base], t)
	}
	var errs []error
	for base := range x.mu.files {
		if _, ok := want[base]; !ok {
			delete(x.mu.files, base)
			if err := x.fs.Remove(x.path(base)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	for base, es := range want {
		slices.SortFunc(es, func(a, b AbortedTxn) int { return cmp.Compare(a.LastOffset, b.LastOffset) })
		if slices.Equal(es, x.mu.files[base]) {
			continue
		}
		var data []byte
		for _, a := range es {
			data = appendAbortedTxn(data, a)
		}
		if err := vfs.WriteFileAtomic(x.fs, x.path(base), data); err != nil {
			errs = append(errs, err)
			continue
		}
		if x.mu.files == nil {
			x.mu.files = map[int64][]AbortedTxn{}
		}
		x.mu.files[base] = es
		delete(x.mu.unsynced, base)
	}
	x.rebuildAbortedLocked()
	if err := errors.Join(errs...); err != nil {
		return x.fail("rebuilding the transaction indexes", err)
	}
	return nil
}

// Aborted returns the aborted transactions a read_committed fetch of
// [from, upTo) must know: those whose marker is at or after from and that
// began before upTo, oldest marker first (Kafka's collectAbortedTxns). The
// slice is the caller's.
func (x *TxnIndex) Aborted(from, upTo int64) []AbortedTxn {
	x.mu.Lock()
	defer x.mu.Unlock()
	i, _ := slices.BinarySearchFunc(x.mu.aborted, from, func(a AbortedTxn, o int64) int {
		if a.LastOffset < o {
			return -1
		}
		if a.LastOffset > o {
			return 1
		}
		return 0
	})
	var out []AbortedTxn
	for _, a := range x.mu.aborted[i:] {
		if a.FirstOffset < upTo {
			out = append(out, a)
		}
		if a.LastStableOffset >= upTo {
			// Every later transaction began at or after this one's
			// last stable offset.
			break
		}
	}
	return out
}

// rebuildAbortedLocked recomputes the sorted view of every file's entries.
// x.mu must be held.
func (x *TxnIndex) rebuildAbortedLocked() {
	x.mu.aborted = x.mu.aborted[:0]
	for _, es := range x.mu.files {
		x.mu.aborted = append(x.mu.aborted, es...)
	}
	slices.SortFunc(x.mu.aborted, func(a, b AbortedTxn) int {
		switch {
		case a.LastOffset < b.LastOffset:
			return -1
		case a.LastOffset > b.LastOffset:
			return 1
		}
		return 0
	})
}

// filter keeps the entries keep selects, rewriting (or removing) the files
// that lose some: a truncation keeps those whose marker is below the new
// end, retention those at or above the log start (no fetch reads below).
func (x *TxnIndex) filter(keep func(AbortedTxn) bool) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	var errs []error
	for base, es := range x.mu.files {
		kept := slices.DeleteFunc(slices.Clone(es), func(a AbortedTxn) bool { return !keep(a) })
		if len(kept) == len(es) {
			continue
		}
		path := x.path(base)
		if len(kept) == 0 {
			delete(x.mu.files, base)
			if err := x.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		x.mu.files[base] = kept
		var data []byte
		for _, a := range kept {
			data = appendAbortedTxn(data, a)
		}
		if err := vfs.WriteFileAtomic(x.fs, path, data); err != nil {
			errs = append(errs, err)
		}
	}
	x.rebuildAbortedLocked()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: rewriting the transaction indexes of %s: %w", x.name, err)
	}
	return nil
}

// truncate drops the entries whose marker is at or after end.
func (x *TxnIndex) truncate(end int64) error {
	return x.filter(func(a AbortedTxn) bool { return a.LastOffset < end })
}

// prune drops the entries whose marker is below the log start: no fetch
// reads there.
func (x *TxnIndex) prune(logStart int64) error {
	return x.filter(func(a AbortedTxn) bool { return a.LastOffset >= logStart })
}

// load reads the .txnindex files among names at open, after recovery set
// the log's bounds [start, end) and suspectFrom; corruption reports a torn
// file. A file may outlive its segment's base offset (the cleaner merges
// segments): its entries still count. Nothing else has the log yet.
func (x *TxnIndex) load(names []string, start, end int64, corruption func(msg string, attrs ...any)) error {
	files := map[int64][]AbortedTxn{}
	dir := x.dir()
	for _, name := range names {
		base, ok := parseOffsetName(name, txnIndexSuffix)
		if !ok {
			continue
		}
		data, err := vfs.ReadFile(x.fs, filepath.Join(dir, name))
		if err != nil {
			return err
		}
		es := decodeTxnIndex(data)
		if !sortedTxnIndex(es) {
			es = nil
		}
		files[base] = es
		if len(es)*abortedTxnSize != len(data) {
			// Torn or damaged: what it lost, the replica rebuilds.
			corruption("rebuilding a torn transaction index", "segment", base, "entries_kept", len(es),
				"bytes", len(data))
			x.suspectFrom = min(x.suspectFrom, base)
			var clean []byte
			for _, a := range es {
				clean = appendAbortedTxn(clean, a)
			}
			if err := vfs.WriteFileAtomic(x.fs, filepath.Join(dir, name), clean); err != nil {
				return err
			}
		}
	}
	x.mu.Lock()
	x.mu.files = files
	x.mu.Unlock()
	return x.filter(func(a AbortedTxn) bool { return a.LastOffset >= start && a.LastOffset < end })
}

// sortedTxnIndex reports whether a file's entries are what appends write:
// markers ascending, each after its transaction's first offset.
func sortedTxnIndex(es []AbortedTxn) bool {
	for i, a := range es {
		if a.FirstOffset > a.LastOffset || a.FirstOffset < 0 || (i > 0 && es[i-1].LastOffset >= a.LastOffset) {
			return false
		}
	}
	return true
}

// isAborted reports whether producerID's record at offset belongs to an
// aborted transaction: an index entry of the producer spans it.
func (x *TxnIndex) isAborted(producerID, offset int64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	i, _ := slices.BinarySearchFunc(x.mu.aborted, offset, func(a AbortedTxn, o int64) int {
		if a.LastOffset < o {
			return -1
		}
		if a.LastOffset > o {
			return 1
		}
		return 0
	})
	for _, a := range x.mu.aborted[i:] {
		if a.ProducerID == producerID && a.FirstOffset <= offset {
			return true
		}
	}
	return false
}

// SetFirstUnstableOffset records the first offset of the oldest
// transaction open on the partition (-1 when none), which the replica
// tracks: the cleaner stays below it, as Kafka's does, so that records of
// a transaction not yet decided never shadow older values of their keys.
func (x *TxnIndex) SetFirstUnstableOffset(offset int64) { x.firstUnstable.Store(offset) }
