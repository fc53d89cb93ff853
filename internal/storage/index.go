package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/strata-io/strata/internal/vfs"
)

const (
	offsetIndexEntrySize = 8
	timeIndexEntrySize   = 12
	// warmBytes is the tail of an index searched first: lookups from
	// consumers and followers near the log end stay in the same few pages
	// (Kafka's AbstractIndex does the same).
	warmBytes = 8192
)

// errCorruptIndex means an index file failed its sanity check; the segment
// is rebuilt from its log.
var errCorruptIndex = errors.New("storage: corrupt index")

// indexFile holds an index's entries. For a file with an OS descriptor the
// entries live in a shared memory mapping of the file, so appending an entry
// is a store to memory, no system call. Otherwise (an in-memory FS) they live
// in a heap buffer written to the file on flush.
//
// Nothing is spent on an index before it has entries: an empty index file
// is closed (it costs no descriptor, which matters with thousands of mostly
// empty partitions) and reopened by its path when the first entry comes; the
// active segment's file is preallocated to the maximum size and mapped whole
// only then. Paths are those of the live partition directory: a segment
// whose files are renamed (deleted, or a retired segment) takes no more
// entries.
//
// The mapping is never shrunk while the index is open: trim truncates the
// file below the mapping's length, and only entries (all within the file)
// are ever touched, so readers never fault on a page past the file's end.
// Entries dropped by a truncation are zeroed, so that the file past the
// entries is zero up to its preallocated end and recovery can tell where
// the entries of a crashed, untrimmed index end.
type indexFile struct {
	mu        sync.RWMutex // guards everything below; lookups take it shared
	fs        vfs.FS
	path      string
	f         vfs.File // nil while the file is empty and closed (see above)
	entrySize int
	maxBytes  int    // the preallocated size while active, a multiple of entrySize
	data      []byte // mapped: the mapping; buffered: the entries
	mapped    bool
	entries   int
	active    bool
	grown     bool  // active and preallocated (or buffered for good)
	fileSize  int64 // the file's length; -1 when not known (an empty log's index, never opened)
	dirty     bool  // the file changed since its last sync
	// Buffered mode only: how much of data is in the file.
	written int
}

func roundDown(n, multiple int) int { return n / multiple * multiple }

// createIndexFile creates (or empties) an index file. A lazy one is closed
// at once, and reopened with its first entry (see indexFile).
func createIndexFile(fs vfs.FS, path string, entrySize, maxBytes int, lazy bool) (*indexFile, error) {
	f, err := fs.Create(path)
	if err != nil {
		return nil, err
	}
	ix := &indexFile{fs: fs, path: path, f: f, entrySize: entrySize, maxBytes: roundDown(maxBytes, entrySize)}
	if lazy {
		ix.f = nil
		if err := f.Close(); err != nil {
			return nil, err
		}
	}
	return ix, nil
}

// openIndexFile opens an existing index file, taking every whole entry in it
// as written; the caller checks them. A length that is not a multiple of the
// entry size is errCorruptIndex (and the file is closed). An empty file is
// closed again at once (see indexFile).
func openIndexFile(fs vfs.FS, path string, entrySize, maxBytes int) (*indexFile, error) {
	f, err := fs.OpenReadWrite(path)
	if err != nil {
		return nil, err
	}
	ix := &indexFile{fs: fs, path: path, f: f, entrySize: entrySize, maxBytes: roundDown(maxBytes, entrySize)}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	size := st.Size()
	if size%int64(entrySize) != 0 || size > math.MaxInt32 {
		f.Close()
		return nil, fmt.Errorf("%w: %s: length %d is not a multiple of %d", errCorruptIndex, path, size, entrySize)
	}
	if size == 0 {
		ix.f = nil
		return ix, f.Close()
	}
	if err := ix.load(int(size)); err != nil {
		f.Close()
		return nil, err
	}
	return ix, nil
}

// load maps or reads the first size bytes of the file as entries.
func (ix *indexFile) load(size int) error {
	ix.entries = size / ix.entrySize
	ix.fileSize = int64(size)
	if fd := ix.f.Fd(); fd != vfs.InvalidFd && canMmap {
		if m, err := mmapFile(fd, size); err == nil {
			ix.data, ix.mapped = m, true
			return nil
		}
	}
	ix.data = make([]byte, size)
	if n, err := ix.f.ReadAt(ix.data, 0); err != nil && !(errors.Is(err, io.EOF) && n == size) {
		return err
	}
	ix.written = size
	return nil
}

// openLocked reopens a closed, empty index file. ix.mu must be held.
func (ix *indexFile) openLocked() error {
	if ix.f != nil {
		return nil
	}
	f, err := ix.fs.OpenReadWrite(ix.path)
	if err != nil {
		return err
	}
	ix.f = f
	return nil
}

// activate makes the index take appends; the file is preallocated and
// mapped with the first one (growLocked). ix.mu must be held or the index
// unshared.
func (ix *indexFile) activate() {
	ix.active = true
	ix.grown = false
	ix.maxBytes = max(ix.maxBytes, ix.entries*ix.entrySize)
}

// growLocked preallocates an active index's file to maxBytes and maps it
// whole, ready for appends. Failing that, the entries stay in (or move to)
// a heap buffer, written on flush: correct, only slower; an error opening
// the file then surfaces at the flush. ix.mu must be held.
func (ix *indexFile) growLocked() {
	ix.grown = true
	used := ix.entries * ix.entrySize
	if ix.mapped && len(ix.data) >= ix.maxBytes {
		if ix.fileSize < int64(ix.maxBytes) && ix.f.Truncate(int64(ix.maxBytes)) == nil {
			ix.fileSize, ix.dirty = int64(ix.maxBytes), true
		}
		return
	}
	if ix.openLocked() == nil {
		if ix.fileSize < 0 {
			// A file never looked at may hold anything past the entries
			// (there are none): empty it, so that zeros follow them.
			if ix.f.Truncate(0) == nil {
				ix.fileSize = 0
			}
		}
		if fd := ix.f.Fd(); ix.fileSize >= 0 && fd != vfs.InvalidFd && canMmap {
			if err := ix.f.Truncate(int64(ix.maxBytes)); err == nil {
				ix.fileSize, ix.dirty = int64(ix.maxBytes), true
				if m, err := mmapFile(fd, ix.maxBytes); err == nil {
					copy(m, ix.data[:used])
					if ix.mapped {
						munmap(ix.data)
					}
					ix.data, ix.mapped = m, true
					return
				}
			}
		}
	}
	if ix.mapped {
		// Keep the entries (already in the file) on the heap.
		buf := make([]byte, used, max(used, 4096))
		copy(buf, ix.data[:used])
		munmap(ix.data)
		ix.data, ix.mapped, ix.written = buf, false, used
	}
}

// trim shrinks the file to its entries: the segment stopped being active.
func (ix *indexFile) trim() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.active, ix.grown = false, false
	if !ix.mapped {
		if err := ix.writeLocked(); err != nil {
			return err
		}
	}
	size := int64(ix.entries * ix.entrySize)
	if ix.fileSize == size || ix.fileSize < 0 && size == 0 {
		return nil // (a file never looked at is left as it is)
	}
	if err := ix.openLocked(); err != nil {
		return err
	}
	if err := ix.f.Truncate(size); err != nil {
		return err
	}
	ix.fileSize, ix.dirty = size, true
	return nil
}

// writeLocked writes buffered entries to the file. ix.mu must be held.
func (ix *indexFile) writeLocked() error {
	if ix.mapped {
		return nil
	}
	if ix.written < len(ix.data) {
		if err := ix.openLocked(); err != nil {
			return err
		}
		if _, err := ix.f.WriteAt(ix.data[ix.written:], int64(ix.written)); err != nil {
			return err
		}
		ix.written = len(ix.data)
		ix.fileSize = max(ix.fileSize, int64(ix.written))
		ix.dirty = true
	}
	if !ix.active && ix.fileSize > int64(len(ix.data)) {
		if err := ix.openLocked(); err != nil {
			return err
		}
		if err := ix.f.Truncate(int64(len(ix.data))); err != nil {
			return err
		}
		ix.fileSize = int64(len(ix.data))
		ix.dirty = true
	}
	return nil
}

// flush makes the entries durable; an index unchanged since its last sync
// (or its creation, empty) costs nothing.
func (ix *indexFile) flush() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.writeLocked(); err != nil {
		return err
	}
	if !ix.dirty || ix.f == nil {
		// Closed, the file is empty and nothing was written to it.
		ix.dirty = false
		return nil
	}
	if err := ix.f.Sync(); err != nil {
		return err
	}
	ix.dirty = false
	return nil
}

// reset drops every entry (before a rebuild) and empties the file.
func (ix *indexFile) reset() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.mapped {
		munmap(ix.data)
		ix.data, ix.mapped = nil, false
	}
	ix.data, ix.entries, ix.written, ix.grown = ix.data[:0], 0, 0, false
	if ix.fileSize <= 0 {
		return nil // empty, or never looked at (growLocked empties it)
	}
	if err := ix.openLocked(); err != nil {
		return err
	}
	if err := ix.f.Truncate(0); err != nil {
		return err
	}
	ix.fileSize, ix.dirty = 0, true
	return nil
}

// truncateEntriesLocked keeps the first n entries. A mapped index zeroes
// the dropped ones (see indexFile). ix.mu must be held.
func (ix *indexFile) truncateEntriesLocked(n int) {
	if n >= ix.entries {
		return
	}
	if ix.mapped {
		clear(ix.data[n*ix.entrySize : ix.entries*ix.entrySize])
		ix.dirty = true
	} else {
		ix.data = ix.data[:n*ix.entrySize]
		ix.written = min(ix.written, len(ix.data))
	}
	ix.entries = n
}

// appendLocked adds one encoded entry. ix.mu must be held.
func (ix *indexFile) appendLocked(entry []byte) {
	if ix.active && !ix.grown {
		ix.growLocked()
	}
	off := ix.entries * ix.entrySize
	if ix.mapped {
		if off+len(entry) > len(ix.data) {
			panic(fmt.Sprintf("storage: index append past its mapping (%d entries of %d bytes, %d mapped): callers must roll when full",
				ix.entries, ix.entrySize, len(ix.data)))
		}
		copy(ix.data[off:], entry)
		ix.dirty = true
	} else {
		ix.data = append(ix.data, entry...)
	}
	ix.entries++
}

func (ix *indexFile) entry(i int) []byte {
	return ix.data[i*ix.entrySize : (i+1)*ix.entrySize]
}

// isZeroEntry reports whether entry i is all zeros: past the end of the
// entries of a preallocated file. ix.mu must be held.
func (ix *indexFile) isZeroEntry(i int) bool {
	for _, b := range ix.entry(i) {
		if b != 0 {
			return false
		}
	}
	return true
}

func (ix *indexFile) close() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.mapped {
		munmap(ix.data)
	}
	// A reader holding a retired segment finds no entries and scans from
	// the start of its (still open, for file.delete.delay.ms) log.
	ix.data, ix.mapped, ix.entries = nil, false, 0
	if ix.f == nil {
		return nil
	}
	err := ix.f.Close()
	ix.f = nil
	ix.path = "" // closed for good: never reopened
	return err
}

// searchRange returns the range of entries to binary-search for a key:
// the warm tail when the key is at or after its first entry (the common
// case for consumers and followers near the log end), else the rest.
func searchRange(n, warmEntries int, keyAtWarm int64, target int64) (lo, hi int) {
	if w := n - 1 - warmEntries; w > 0 {
		if keyAtWarm <= target {
			return w, n - 1
		}
		return 0, w
	}
	return 0, n - 1
}

// offsetIndex maps a batch's last offset to its file position.
type offsetIndex struct {
	*indexFile
	baseOffset int64
}

func (x *offsetIndex) relOffset(i int) int64 {
	return int64(int32(binary.BigEndian.Uint32(x.entry(i))))
}

func (x *offsetIndex) position(i int) int64 {
	return int64(int32(binary.BigEndian.Uint32(x.entry(i)[4:])))
}

// isFull reports whether the index has no room for another entry. Called by
// the appender only.
func (x *offsetIndex) isFull() bool {
	return x.entries >= x.maxBytes/offsetIndexEntrySize
}

// append adds an entry for the batch at pos whose last offset is offset.
func (x *offsetIndex) append(offset, pos int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	rel := offset - x.baseOffset
	if rel < 0 || rel > math.MaxInt32 || pos > math.MaxInt32 {
		panic(fmt.Sprintf("storage: offset index entry (%d, %d) outside segment %d", offset, pos, x.baseOffset))
	}
	if n := x.entries; n > 0 && (rel <= x.relOffset(n-1) || pos <= x.position(n-1)) {
		panic(fmt.Sprintf("storage: offset index entries must increase: (%d, %d) after (%d, %d)",
			rel, pos, x.relOffset(n-1), x.position(n-1)))
	}
	var e [offsetIndexEntrySize]byte
	binary.BigEndian.PutUint32(e[:], uint32(rel))
	binary.BigEndian.PutUint32(e[4:], uint32(pos))
	x.appendLocked(e[:])
}

// lookup returns the entry with the largest offset <= target, or the
// segment's start (baseOffset, 0) when there is none.
func (x *offsetIndex) lookup(target int64) (offset, pos int64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i := x.largestAtMost(target - x.baseOffset)
	if i < 0 {
		return x.baseOffset, 0
	}
	return x.baseOffset + x.relOffset(i), x.position(i)
}

// largestAtMost returns the last entry whose relative offset is <= rel, or
// -1. x.mu must be held.
func (x *offsetIndex) largestAtMost(rel int64) int {
	n := x.entries
	if n == 0 || x.relOffset(0) > rel {
		return -1
	}
	warm := max(n-1-warmBytes/offsetIndexEntrySize, 0)
	lo, hi := searchRange(n, warmBytes/offsetIndexEntrySize, x.relOffset(warm), rel)
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if x.relOffset(mid) <= rel {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// floor returns the last entry whose position is <= maxPos and whose offset
// is < maxOffset: the batch it points at, and every batch before it, start
// before maxPos and end below maxOffset. ok is false when there is none.
func (x *offsetIndex) floor(maxPos, maxOffset int64) (offset, pos int64, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	// Both fields increase, so "position <= maxPos and offset < maxOffset"
	// holds for a prefix of the entries.
	relMax := maxOffset - x.baseOffset
	fits := func(i int) bool { return x.position(i) <= maxPos && x.relOffset(i) < relMax }
	n := x.entries
	if n == 0 || !fits(0) {
		return 0, 0, false
	}
	lo, hi := 0, n-1
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return x.baseOffset + x.relOffset(lo), x.position(lo), true
}

// lastEntry returns the last entry, or (baseOffset, 0).
func (x *offsetIndex) lastEntry() (offset, pos int64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.entries == 0 {
		return x.baseOffset, 0
	}
	return x.baseOffset + x.relOffset(x.entries-1), x.position(x.entries - 1)
}

// truncateToPosition drops the entries of batches at or after pos.
func (x *offsetIndex) truncateToPosition(pos int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.entries
	for n > 0 && x.position(n-1) >= pos {
		n--
	}
	x.truncateEntriesLocked(n)
}

// check verifies, as Kafka's OffsetIndex.sanityCheck does, the first and
// the last entry of a trusted segment's index: both lie within the segment
// and the last follows the first. Trailing zeros of a preallocated file
// that was never trimmed, or a file cut or garbled at either end, fail it;
// the pages between are not touched.
func (x *offsetIndex) check(logSize int64) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.entries
	if n == 0 {
		return nil
	}
	valid := func(i int) bool {
		rel, pos := x.relOffset(i), x.position(i)
		return rel > 0 && pos > 0 && pos < logSize
	}
	if !valid(0) || !valid(n-1) || n > 1 && (x.relOffset(n-1) <= x.relOffset(0) || x.position(n-1) <= x.position(0)) {
		return fmt.Errorf("%w: offset index of segment %d: entries (%d, %d) .. (%d, %d) (%d entries), log size %d",
			errCorruptIndex, x.baseOffset, x.relOffset(0), x.position(0), x.relOffset(n-1), x.position(n-1), n, logSize)
	}
	return nil
}

// validPrefix keeps the entries of a segment being recovered that can be
// trusted: they increase strictly and point inside the log (an entry is
// written after the batch it points at, so every batch before it reached
// the file as well). It stops at the first zero entry, which ends the
// entries of a crashed, untrimmed index (see indexFile), and at an entry
// past the log, which a power loss that kept the index's page but not the
// log's may leave; past such an entry it zeroes the file's entries, so that
// they cannot be read as the continuation of the new ones. Any other entry
// that breaks the order means the index disagrees with its log: garbled is
// true and the caller rebuilds the index from scratch.
func (x *offsetIndex) validPrefix(logSize int64) (garbled bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	prevRel, prevPos := int64(0), int64(0)
	n := 0
	for ; n < x.entries; n++ {
		if x.isZeroEntry(n) {
			x.entries = n // the zero tail: nothing to zero
			break
		}
		rel, pos := x.relOffset(n), x.position(n)
		if rel <= prevRel || pos <= prevPos {
			return true
		}
		if pos >= logSize {
			// Zero what follows, up to the zero tail.
			end := n
			for end < x.entries && !x.isZeroEntry(end) {
				end++
			}
			x.entries = end
			break
		}
		prevRel, prevPos = rel, pos
	}
	x.truncateEntriesLocked(n)
	x.dirty = true
	return false
}

// timeIndex maps a running max timestamp to the last offset of the batch
// that reached it.
type timeIndex struct {
	*indexFile
	baseOffset int64
}

func (x *timeIndex) timestamp(i int) int64 { return int64(binary.BigEndian.Uint64(x.entry(i))) }

func (x *timeIndex) relOffset(i int) int64 {
	return int64(int32(binary.BigEndian.Uint32(x.entry(i)[8:])))
}

// isFull is true one entry early, keeping room for the final entry written
// when the segment rolls (Kafka's TimeIndex does the same).
func (x *timeIndex) isFull() bool {
	return x.entries >= x.maxBytes/timeIndexEntrySize-1
}

// lastEntryLocked returns the last entry or (-1, baseOffset). x.mu must be
// held.
func (x *timeIndex) lastEntryLocked() (ts, offset int64) {
	if x.entries == 0 {
		return -1, x.baseOffset
	}
	return x.timestamp(x.entries - 1), x.baseOffset + x.relOffset(x.entries-1)
}

func (x *timeIndex) lastEntry() (ts, offset int64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.lastEntryLocked()
}

// maybeAppend adds (ts, offset) if ts is greater than the last entry's
// timestamp. skipFull allows the final entry of a rolling segment.
func (x *timeIndex) maybeAppend(ts, offset int64, skipFull bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	lastTS, lastOffset := x.lastEntryLocked()
	if ts <= lastTS {
		return
	}
	if offset < lastOffset {
		panic(fmt.Sprintf("storage: time index offset %d below last entry's %d", offset, lastOffset))
	}
	if !skipFull && x.entries >= x.maxBytes/timeIndexEntrySize-1 {
		panic("storage: time index append when full: callers must roll")
	}
	if x.active && !x.grown {
		x.growLocked()
	}
	if x.mapped && (x.entries+1)*timeIndexEntrySize > len(x.data) {
		// The final entry of an index filled to its last slot has no
		// room; the segment's max timestamp is then slightly stale after a
		// restart, never wrong by more than the last interval.
		return
	}
	var e [timeIndexEntrySize]byte
	binary.BigEndian.PutUint64(e[:], uint64(ts))
	binary.BigEndian.PutUint32(e[8:], uint32(offset-x.baseOffset))
	x.appendLocked(e[:])
}

// lookup returns the entry with the largest timestamp <= target, or
// (-1, baseOffset).
func (x *timeIndex) lookup(target int64) (ts, offset int64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.entries
	if n == 0 || x.timestamp(0) > target {
		return -1, x.baseOffset
	}
	lo, hi := 0, n-1
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if x.timestamp(mid) <= target {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return x.timestamp(lo), x.baseOffset + x.relOffset(lo)
}

// truncateToOffset drops the entries pointing at offset or later.
func (x *timeIndex) truncateToOffset(offset int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.entries
	for n > 0 && x.baseOffset+x.relOffset(n-1) >= offset {
		n--
	}
	x.truncateEntriesLocked(n)
}

// check verifies, like offsetIndex.check, the first and the last entry
// of a trusted segment's time index: offsets within the segment and not
// decreasing, timestamps increasing.
func (x *timeIndex) check() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := x.entries
	if n == 0 {
		return nil
	}
	if x.relOffset(0) < 0 || x.timestamp(0) < 0 || n > 1 && (x.relOffset(n-1) < x.relOffset(0) || x.timestamp(n-1) <= x.timestamp(0)) {
		return fmt.Errorf("%w: time index of segment %d: entries (%d, %d) .. (%d, %d) (%d entries)",
			errCorruptIndex, x.baseOffset, x.timestamp(0), x.relOffset(0), x.timestamp(n-1), x.relOffset(n-1), n)
	}
	return nil
}

// validPrefix keeps the entries of a segment being recovered whose
// timestamps increase strictly and whose offsets do not decrease, up to
// maxOffset (the last offset the kept offset-index entries cover: a later
// entry belongs to a batch that recovery scans again). It returns the last
// entry kept, or (-1, baseOffset). The zeros of a crashed, untrimmed index
// end the entries; a first entry of zeros, (timestamp 0, the base offset),
// can be real, and the caller checks the last entry against the log.
func (x *timeIndex) validPrefix(maxOffset int64) (ts, offset int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	prevTS, prevRel := int64(-1), int64(0)
	n := 0
	for ; n < x.entries; n++ {
		ts, rel := x.timestamp(n), x.relOffset(n)
		if ts <= prevTS || rel < prevRel || x.baseOffset+rel > maxOffset {
			break
		}
		prevTS, prevRel = ts, rel
	}
	// What follows is zeros, or entries to be written again: zero them up
	// to the zero tail.
	end := n
	for end < x.entries && !x.isZeroEntry(end) {
		end++
	}
	x.entries = end
	x.truncateEntriesLocked(n)
	x.dirty = true
	return x.lastEntryLocked()
}
