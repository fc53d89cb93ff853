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
// is a store to memory, no system call; the active segment's file is
// preallocated to the maximum size and mapped whole. Otherwise (an in-memory
// FS) they live in a heap buffer written to the file on flush.
//
// The mapping is never shrunk while the index is open: trim truncates the
// file below the mapping's length, and only entries (all within the file)
// are ever touched, so readers never fault on a page past the file's end.
type indexFile struct {
	mu        sync.RWMutex // guards everything below; lookups take it shared
	f         vfs.File
	entrySize int
	maxBytes  int    // the preallocated size while active, a multiple of entrySize
	data      []byte // mapped: the mapping; buffered: the entries
	mapped    bool
	entries   int
	active    bool
	// Buffered mode only: how much of data is in the file, and the file's
	// length (which may exceed len(data) after a truncation).
	written  int
	fileSize int64
}

func roundDown(n, multiple int) int { return n / multiple * multiple }

// createIndexFile creates (or empties) an index file.
func createIndexFile(fs vfs.FS, path string, entrySize, maxBytes int, active bool) (*indexFile, error) {
	f, err := fs.Create(path)
	if err != nil {
		return nil, err
	}
	ix := &indexFile{f: f, entrySize: entrySize, maxBytes: roundDown(maxBytes, entrySize)}
	if active {
		if err := ix.activate(); err != nil {
			f.Close()
			return nil, err
		}
	}
	return ix, nil
}

// openIndexFile opens an existing index file, taking every whole entry in it
// as written; the caller sanity-checks them. A length that is not a multiple
// of the entry size is errCorruptIndex (the file is still returned, to be
// rebuilt).
func openIndexFile(fs vfs.FS, path string, entrySize, maxBytes int) (*indexFile, error) {
	f, err := fs.OpenReadWrite(path)
	if err != nil {
		return nil, err
	}
	ix := &indexFile{f: f, entrySize: entrySize, maxBytes: roundDown(maxBytes, entrySize)}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	size := st.Size()
	if size%int64(entrySize) != 0 || size > math.MaxInt32 {
		return ix, fmt.Errorf("%w: %s: length %d is not a multiple of %d", errCorruptIndex, path, size, entrySize)
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
	if size == 0 {
		return nil
	}
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

// activate preallocates the file to maxBytes and maps it whole, ready for
// appends. ix.mu must be held or the index unshared.
func (ix *indexFile) activate() error {
	ix.active = true
	used := ix.entries * ix.entrySize
	ix.maxBytes = max(ix.maxBytes, used)
	fd := ix.f.Fd()
	if fd == vfs.InvalidFd || !canMmap {
		return nil
	}
	if ix.mapped && len(ix.data) >= ix.maxBytes {
		return ix.f.Truncate(int64(ix.maxBytes))
	}
	if err := ix.f.Truncate(int64(ix.maxBytes)); err != nil {
		return err
	}
	m, err := mmapFile(fd, ix.maxBytes)
	if err != nil {
		// Stay buffered: correct, only slower.
		return nil
	}
	if ix.mapped {
		munmap(ix.data)
	} else if used > 0 {
		copy(m, ix.data[:used])
	}
	ix.data, ix.mapped = m, true
	ix.fileSize = int64(ix.maxBytes)
	return nil
}

// trim shrinks the file to its entries: the segment stopped being active.
func (ix *indexFile) trim() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.active = false
	if !ix.mapped {
		if err := ix.writeLocked(); err != nil {
			return err
		}
	}
	size := int64(ix.entries * ix.entrySize)
	if err := ix.f.Truncate(size); err != nil {
		return err
	}
	ix.fileSize = size
	return nil
}

// writeLocked writes buffered entries to the file. ix.mu must be held.
func (ix *indexFile) writeLocked() error {
	if ix.mapped {
		return nil
	}
	if ix.written < len(ix.data) {
		if _, err := ix.f.WriteAt(ix.data[ix.written:], int64(ix.written)); err != nil {
			return err
		}
		ix.written = len(ix.data)
		ix.fileSize = max(ix.fileSize, int64(ix.written))
	}
	if !ix.active && ix.fileSize > int64(len(ix.data)) {
		if err := ix.f.Truncate(int64(len(ix.data))); err != nil {
			return err
		}
		ix.fileSize = int64(len(ix.data))
	}
	return nil
}

// flush makes the entries durable.
func (ix *indexFile) flush() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.writeLocked(); err != nil {
		return err
	}
	return ix.f.Sync()
}

// reset drops every entry (before a rebuild).
func (ix *indexFile) reset() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.truncateEntriesLocked(0)
	return nil
}

func (ix *indexFile) truncateEntriesLocked(n int) {
	ix.entries = n
	if !ix.mapped {
		ix.data = ix.data[:n*ix.entrySize]
		ix.written = min(ix.written, len(ix.data))
	}
}

// appendLocked adds one encoded entry. ix.mu must be held.
func (ix *indexFile) appendLocked(entry []byte) {
	off := ix.entries * ix.entrySize
	if ix.mapped {
		if off+len(entry) > len(ix.data) {
			panic(fmt.Sprintf("storage: index append past its mapping (%d entries of %d bytes, %d mapped): callers must roll when full",
				ix.entries, ix.entrySize, len(ix.data)))
		}
		copy(ix.data[off:], entry)
	} else {
		ix.data = append(ix.data, entry...)
	}
	ix.entries++
}

func (ix *indexFile) entry(i int) []byte {
	return ix.data[i*ix.entrySize : (i+1)*ix.entrySize]
}

func (ix *indexFile) close() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.f == nil {
		return nil
	}
	if ix.mapped {
		munmap(ix.data)
	}
	// A reader holding a retired segment finds no entries and scans from
	// the start of its (still open, for file.delete.delay.ms) log.
	ix.data, ix.mapped, ix.entries = nil, false, 0
	err := ix.f.Close()
	ix.f = nil
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

// sanityCheck verifies that every entry lies within the segment and that
// the entries increase strictly, as written; trailing zeros from a
// preallocated file that was never trimmed fail it.
func (x *offsetIndex) sanityCheck(logSize int64) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	prevRel, prevPos := int64(-1), int64(-1)
	for i := range x.entries {
		rel, pos := x.relOffset(i), x.position(i)
		if rel < 0 || pos < 0 || pos >= logSize || rel <= prevRel || pos <= prevPos {
			return fmt.Errorf("%w: offset index of segment %d: entry %d (%d, %d) after (%d, %d), log size %d",
				errCorruptIndex, x.baseOffset, i, rel, pos, prevRel, prevPos, logSize)
		}
		prevRel, prevPos = rel, pos
	}
	return nil
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

// sanityCheck verifies timestamps increase strictly and offsets do not
// decrease.
func (x *timeIndex) sanityCheck() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	prevTS, prevRel := int64(-1), int64(0)
	for i := range x.entries {
		ts, rel := x.timestamp(i), x.relOffset(i)
		if ts <= prevTS || rel < prevRel {
			return fmt.Errorf("%w: time index of segment %d: entry %d (%d, %d) after (%d, %d)",
				errCorruptIndex, x.baseOffset, i, ts, rel, prevTS, prevRel)
		}
		prevTS, prevRel = ts, rel
	}
	return nil
}
