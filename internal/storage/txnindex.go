package storage

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

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

func (l *Log) txnIndexPath(base int64) string {
	return filepath.Join(l.Dir(), segmentName(base)+txnIndexSuffix)
}

// AppendAbortedTxn adds an aborted transaction to the index of the segment
// holding its marker (t.LastOffset, which must be in the log). The replica
// calls it under its append lock, right after the marker's append, so the
// entry is written before any later batch, and before the segment can
// roll. The entry reaches the file; the next Flush syncs it (a crash may
// lose it before, and recovery adds it again from the log: see
// TxnIndexSuspectFrom).
func (l *Log) AppendAbortedTxn(t AbortedTxn) error {
	if err := l.writable(); err != nil {
		return err
	}
	if t.LastOffset >= l.logEndOffset.Load() || t.FirstOffset > t.LastOffset {
		return fmt.Errorf("storage: aborted transaction %+v outside the log of %s", t, l)
	}
	segs := l.segmentList()
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
	base := segs[max(i, 0)].baseOffset
	l.txnMu.Lock()
	defer l.txnMu.Unlock()
	if slices.ContainsFunc(l.txnFiles[base], func(a AbortedTxn) bool { return a.LastOffset == t.LastOffset }) {
		return nil
	}
	f, err := l.fs.OpenReadWrite(l.txnIndexPath(base))
	if err != nil {
		return l.fail("opening a transaction index", err)
	}
	_, err = f.WriteAt(appendAbortedTxn(nil, t), int64(len(l.txnFiles[base]))*abortedTxnSize)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return l.fail("writing a transaction index", err)
	}
	if l.txnFiles == nil {
		l.txnFiles = map[int64][]AbortedTxn{}
	}
	// A new file's name is durable once the directory is synced.
	created := len(l.txnFiles[base]) == 0
	l.txnFiles[base] = append(l.txnFiles[base], t)
	if l.txnUnsynced == nil {
		l.txnUnsynced = map[int64]bool{}
	}
	l.txnUnsynced[base] = l.txnUnsynced[base] || created
	l.rebuildAbortedLocked()
	if t.LastOffset < l.recoveryPoint.Load() {
		// A flush round moved the recovery point past the marker before
		// the entry was noted (commitRecoveryPoint): sync it now, not at
		// the next round.
		delete(l.txnUnsynced, base)
		if err := l.syncTxnIndex(base); err != nil {
			return l.fail("syncing a transaction index", err)
		}
		if err := vfs.SyncDir(l.fs, l.Dir()); err != nil {
			return l.fail("syncing directory", err)
		}
	}
	return nil
}

// commitRecoveryPoint syncs the .txnindex files written to, then
// advances the recovery point from recoveryPoint to target (Flush's last
// step), under txnMu once no file is left to sync: an entry
// AppendAbortedTxn notes meanwhile is either synced here or sees the new
// recovery point and syncs itself. So every entry whose marker is below
// the recovery point is durable, and recovery need only rebuild the
// entries of the segments it recovers, as Kafka's LogSegment.flush syncs
// its txnIndex. l.flushMu must be held.
func (l *Log) commitRecoveryPoint(recoveryPoint, target int64) error {
	for {
		l.txnMu.Lock()
		pending := l.txnUnsynced
		l.txnUnsynced = nil
		if len(pending) == 0 {
			if target > recoveryPoint {
				l.recoveryPoint.Store(target)
			}
			l.txnMu.Unlock()
			return nil
		}
		l.txnMu.Unlock()
		created := false
		for base, isNew := range pending {
			if err := l.syncTxnIndex(base); err != nil {
				return l.fail("syncing a transaction index", err)
			}
			created = created || isNew
		}
		if created {
			if err := vfs.SyncDir(l.fs, l.Dir()); err != nil {
				return l.fail("syncing directory", err)
			}
		}
	}
}

func (l *Log) syncTxnIndex(base int64) error {
	f, err := l.fs.Open(l.txnIndexPath(base))
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

// TxnIndexSuspectFrom is the offset from which the aborted-transaction
// index cannot be trusted after the log opened: the base offset of the
// first segment recovery checked (whose entries a crash may have lost or
// left stale), or of a .txnindex file found torn; the log end offset when
// the whole index is trusted (a clean shutdown). The replica rebuilds the
// entries from there from the log (RebuildAbortedTxns), replaying the
// producers' state from a snapshot at or below it, as Kafka's LogLoader
// rebuilds the transaction index of every segment it recovers.
func (l *Log) TxnIndexSuspectFrom() int64 { return l.txnSuspectFrom }

// RebuildAbortedTxns replaces the index entries whose marker is at or
// after from with txns, the aborted transactions a replay of the log from
// from found (in any order; each with its marker in [from, log end)).
// keep says which of the replaced entries to keep all the same when txns
// has none at their marker: those of transactions that began below where
// the replay started, which it cannot know the first offset of. Changed
// files are rewritten atomically (synced), emptied ones removed.
func (l *Log) RebuildAbortedTxns(from int64, txns []AbortedTxn, keep func(AbortedTxn) bool) error {
	if err := l.writable(); err != nil {
		return err
	}
	end := l.logEndOffset.Load()
	found := map[int64]bool{}
	for _, t := range txns {
		if t.LastOffset < from || t.LastOffset >= end || t.FirstOffset > t.LastOffset {
			return fmt.Errorf("storage: rebuilt aborted transaction %+v outside [%d, %d) of %s", t, from, end, l)
		}
		found[t.LastOffset] = true
	}
	segs := l.segmentList()
	l.txnMu.Lock()
	defer l.txnMu.Unlock()
	want := map[int64][]AbortedTxn{}
	for base, es := range l.txnFiles {
		for _, a := range es {
			if a.LastOffset < from || (!found[a.LastOffset] && keep != nil && keep(a)) {
				want[base] = append(want[base], a)
			}
		}
	}
	for _, t := range txns {
		base := segs[floorSegment(segs, t.LastOffset)].baseOffset
		want[base] = append(want[base], t)
	}
	var errs []error
	for base := range l.txnFiles {
		if _, ok := want[base]; !ok {
			delete(l.txnFiles, base)
			if err := l.fs.Remove(l.txnIndexPath(base)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	for base, es := range want {
		slices.SortFunc(es, func(a, b AbortedTxn) int { return cmp.Compare(a.LastOffset, b.LastOffset) })
		if slices.Equal(es, l.txnFiles[base]) {
			continue
		}
		var data []byte
		for _, a := range es {
			data = appendAbortedTxn(data, a)
		}
		if err := vfs.WriteFileAtomic(l.fs, l.txnIndexPath(base), data); err != nil {
			errs = append(errs, err)
			continue
		}
		if l.txnFiles == nil {
			l.txnFiles = map[int64][]AbortedTxn{}
		}
		l.txnFiles[base] = es
		delete(l.txnUnsynced, base)
	}
	l.rebuildAbortedLocked()
	if err := errors.Join(errs...); err != nil {
		return l.fail("rebuilding the transaction indexes", err)
	}
	return nil
}

// AbortedTxns returns the aborted transactions a read_committed fetch of
// [from, upTo) must know: those whose marker is at or after from and that
// began before upTo, oldest marker first (Kafka's collectAbortedTxns). The
// slice is the caller's.
func (l *Log) AbortedTxns(from, upTo int64) []AbortedTxn {
	l.txnMu.Lock()
	defer l.txnMu.Unlock()
	i, _ := slices.BinarySearchFunc(l.aborted, from, func(a AbortedTxn, o int64) int {
		if a.LastOffset < o {
			return -1
		}
		if a.LastOffset > o {
			return 1
		}
		return 0
	})
	var out []AbortedTxn
	for _, a := range l.aborted[i:] {
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
// l.txnMu must be held.
func (l *Log) rebuildAbortedLocked() {
	l.aborted = l.aborted[:0]
	for _, es := range l.txnFiles {
		l.aborted = append(l.aborted, es...)
	}
	slices.SortFunc(l.aborted, func(a, b AbortedTxn) int {
		switch {
		case a.LastOffset < b.LastOffset:
			return -1
		case a.LastOffset > b.LastOffset:
			return 1
		}
		return 0
	})
}

// filterTxnIndexesLocked keeps the entries keep selects, rewriting (or
// removing) the files that lose some. l.txnMu must be held.
func (l *Log) filterTxnIndexesLocked(keep func(AbortedTxn) bool) error {
	var errs []error
	for base, es := range l.txnFiles {
		kept := slices.DeleteFunc(slices.Clone(es), func(a AbortedTxn) bool { return !keep(a) })
		if len(kept) == len(es) {
			continue
		}
		path := l.txnIndexPath(base)
		if len(kept) == 0 {
			delete(l.txnFiles, base)
			if err := l.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		l.txnFiles[base] = kept
		var data []byte
		for _, a := range kept {
			data = appendAbortedTxn(data, a)
		}
		if err := vfs.WriteFileAtomic(l.fs, path, data); err != nil {
			errs = append(errs, err)
		}
	}
	l.rebuildAbortedLocked()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: rewriting the transaction indexes of %s: %w", l, err)
	}
	return nil
}

// truncateTxnIndexes drops the entries whose marker is at or after end.
func (l *Log) truncateTxnIndexes(end int64) error {
	l.txnMu.Lock()
	defer l.txnMu.Unlock()
	return l.filterTxnIndexesLocked(func(a AbortedTxn) bool { return a.LastOffset < end })
}

// pruneTxnIndexes drops the entries whose marker is below the log start:
// no fetch reads there.
func (l *Log) pruneTxnIndexes(logStart int64) error {
	l.txnMu.Lock()
	defer l.txnMu.Unlock()
	return l.filterTxnIndexesLocked(func(a AbortedTxn) bool { return a.LastOffset >= logStart })
}

// loadTxnIndexes reads the .txnindex files among names at open, after
// recovery set the log's bounds. A file may outlive its segment's base
// offset (the cleaner merges segments): its entries still count.
func (l *Log) loadTxnIndexes(names []string) error {
	l.txnFiles = map[int64][]AbortedTxn{}
	for _, name := range names {
		base, ok := parseOffsetName(name, txnIndexSuffix)
		if !ok {
			continue
		}
		data, err := vfs.ReadFile(l.fs, filepath.Join(l.dir, name))
		if err != nil {
			return err
		}
		es := decodeTxnIndex(data)
		if !sortedTxnIndex(es) {
			es = nil
		}
		l.txnFiles[base] = es
		if len(es)*abortedTxnSize != len(data) {
			// Torn or damaged: what it lost, the replica rebuilds.
			l.corruption("rebuilding a torn transaction index", "segment", base, "entries_kept", len(es),
				"bytes", len(data))
			l.txnSuspectFrom = min(l.txnSuspectFrom, base)
			var clean []byte
			for _, a := range es {
				clean = appendAbortedTxn(clean, a)
			}
			if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, name), clean); err != nil {
				return err
			}
		}
	}
	l.txnMu.Lock()
	defer l.txnMu.Unlock()
	start, end := l.logStartOffset.Load(), l.logEndOffset.Load()
	return l.filterTxnIndexesLocked(func(a AbortedTxn) bool { return a.LastOffset >= start && a.LastOffset < end })
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
func (l *Log) isAborted(producerID, offset int64) bool {
	l.txnMu.Lock()
	defer l.txnMu.Unlock()
	i, _ := slices.BinarySearchFunc(l.aborted, offset, func(a AbortedTxn, o int64) int {
		if a.LastOffset < o {
			return -1
		}
		if a.LastOffset > o {
			return 1
		}
		return 0
	})
	for _, a := range l.aborted[i:] {
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
func (l *Log) SetFirstUnstableOffset(offset int64) { l.firstUnstable.Store(offset) }
