package storage

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	snapshotSuffix  = ".snapshot"
	deletedSuffix   = ".deleted"
	tmpSuffix       = ".tmp"
	cleanedSuffix   = ".cleaned" // a segment the cleaner is writing
	swapSuffix      = ".swap"    // a cleaned segment committed to replace others
)

// segmentName is the 20-digit file name stem of a segment or snapshot.
func segmentName(baseOffset int64) string { return fmt.Sprintf("%020d", baseOffset) }

// segment is one .log file with its two indexes.
type segment struct {
	baseOffset int64
	log        vfs.File
	offsetIdx  *offsetIndex
	timeIdx    *timeIndex
	created    time.Time

	// size is the published length of the log: readers never look past
	// it, and every byte below it is a whole, valid batch.
	size atomic.Int64
	// dirtyLog is set when the log changed since its last sync, dirtyIndex
	// when an inactive segment's indexes did (the active segment's indexes
	// are never synced; see flush).
	dirtyLog, dirtyIndex atomic.Bool

	// statMu guards the max timestamp pair, updated by the appender and
	// read by ListOffsets and retention.
	statMu               sync.Mutex
	maxTimestamp         int64 // -1 when no batch has a timestamp
	offsetOfMaxTimestamp int64 // last offset of the batch that first reached it

	// Appender state, guarded by Log.appendMu.
	nextOffset            int64 // the offset after the last batch; baseOffset when empty
	lastIndexEntryPos     int64 // position of the batch of the last offset-index entry (0 if none)
	rollingBasedTimestamp int64 // first batch's max timestamp, -1 unknown or absent
	rollingLoaded         bool
}

func (s *segment) paths(dir string) [3]string {
	stem := filepath.Join(dir, segmentName(s.baseOffset))
	return [3]string{stem + logSuffix, stem + indexSuffix, stem + timeIndexSuffix}
}

func (s *segment) maxTimestampAndOffset() (int64, int64) {
	s.statMu.Lock()
	defer s.statMu.Unlock()
	return s.maxTimestamp, s.offsetOfMaxTimestamp
}

func (s *segment) observeTimestamp(ts, lastOffset int64) {
	s.statMu.Lock()
	if ts > s.maxTimestamp {
		s.maxTimestamp, s.offsetOfMaxTimestamp = ts, lastOffset
	}
	s.statMu.Unlock()
}

// createSegment creates the files of a new, empty, active segment,
// replacing any left at those names.
func createSegment(fs vfs.FS, dir string, baseOffset int64, cfg *Config, now time.Time) (*segment, error) {
	s := &segment{baseOffset: baseOffset, created: now, maxTimestamp: -1, offsetOfMaxTimestamp: baseOffset,
		nextOffset: baseOffset, rollingBasedTimestamp: -1, rollingLoaded: true}
	p := s.paths(dir)
	var err error
	if s.log, err = fs.Create(p[0]); err != nil {
		return nil, err
	}
	oi, err := createIndexFile(fs, p[1], offsetIndexEntrySize, cfg.SegmentIndexBytes, true)
	if err != nil {
		s.log.Close()
		return nil, err
	}
	s.offsetIdx = &offsetIndex{indexFile: oi, baseOffset: baseOffset}
	ti, err := createIndexFile(fs, p[2], timeIndexEntrySize, cfg.SegmentIndexBytes, true)
	if err != nil {
		s.log.Close()
		s.offsetIdx.close()
		return nil, err
	}
	s.timeIdx = &timeIndex{indexFile: ti, baseOffset: baseOffset}
	s.becomeActive()
	return s, nil
}

// openSegment opens an existing segment's log and indexes. A trusted
// segment (flushed: before the recovery point, or every segment after a
// clean shutdown) has the ends of its indexes checked (see
// offsetIndex.check) and its max timestamp read from its time index; the
// others are recovered, which checks their indexes entry by entry. A
// missing or malformed index of a non-empty log is created empty and
// reported with errCorruptIndex, so the caller rebuilds it; the missing
// index of an empty log is only created.
func openSegment(fs vfs.FS, dir string, baseOffset int64, cfg *Config, now time.Time, trusted bool) (*segment, error) {
	s := &segment{baseOffset: baseOffset, created: now, maxTimestamp: -1, offsetOfMaxTimestamp: baseOffset,
		nextOffset: baseOffset, rollingBasedTimestamp: -1}
	p := s.paths(dir)
	var err error
	if s.log, err = fs.OpenReadWrite(p[0]); err != nil {
		return nil, err
	}
	st, err := s.log.Stat()
	if err != nil {
		s.log.Close()
		return nil, err
	}
	size := st.Size()
	s.size.Store(size)
	var corrupt error
	open := func(path string, entrySize int) (*indexFile, error) {
		if size == 0 {
			// An empty log has no index entries: whatever the file holds
			// (nothing, or the zeros of an old preallocation) is not
			// read, and it is zeroed before its first entry (growLocked).
			return &indexFile{fs: fs, path: path, entrySize: entrySize, maxBytes: roundDown(cfg.SegmentIndexBytes, entrySize),
				fileSize: -1}, nil
		}
		if !vfs.Exists(fs, path) {
			corrupt = fmt.Errorf("%w: %s is missing", errCorruptIndex, path)
			return createIndexFile(fs, path, entrySize, cfg.SegmentIndexBytes, true)
		}
		ix, err := openIndexFile(fs, path, entrySize, cfg.SegmentIndexBytes)
		if errors.Is(err, errCorruptIndex) {
			corrupt = err
			return createIndexFile(fs, path, entrySize, cfg.SegmentIndexBytes, true)
		}
		return ix, err
	}
	oi, err := open(p[1], offsetIndexEntrySize)
	if err != nil {
		s.log.Close()
		return nil, err
	}
	s.offsetIdx = &offsetIndex{indexFile: oi, baseOffset: baseOffset}
	ti, err := open(p[2], timeIndexEntrySize)
	if err != nil {
		s.log.Close()
		s.offsetIdx.close()
		return nil, err
	}
	s.timeIdx = &timeIndex{indexFile: ti, baseOffset: baseOffset}
	if corrupt == nil && trusted {
		corrupt = s.offsetIdx.check(size)
		if corrupt == nil {
			corrupt = s.timeIdx.check()
		}
		if corrupt == nil {
			// The time index's last entry is the segment's max timestamp:
			// the segment wrote it when it rolled or closed.
			ts, off := s.timeIdx.lastEntry()
			s.maxTimestamp, s.offsetOfMaxTimestamp = ts, off
			_, s.lastIndexEntryPos = s.offsetIdx.lastEntry()
		}
	}
	return s, corrupt
}

// canHold reports whether offsets up to lastOffset fit the 4-byte relative
// offsets of this segment's indexes.
func (s *segment) canHold(lastOffset int64) bool {
	rel := lastOffset - s.baseOffset
	return rel >= 0 && rel <= math.MaxInt32
}

// loadRollingTimestamp reads the first batch's max timestamp, which
// segment.ms is measured from. Appender only.
func (s *segment) loadRollingTimestamp() {
	if s.rollingLoaded {
		return
	}
	s.rollingLoaded = true
	if s.size.Load() < record.HeaderSize {
		return
	}
	var b [record.HeaderSize]byte
	if _, err := s.log.ReadAt(b[:], 0); err != nil {
		return
	}
	if h, err := record.ParseHeader(b[:]); err == nil {
		s.rollingBasedTimestamp = h.MaxTimestamp
	}
}

// append writes validated batches, whose offsets follow the segment's, at
// the end of the log and indexes them by their headers (as written). Appender only. On error the
// segment's published size is unchanged, though a prefix of data may have
// reached the file.
func (s *segment) append(data []byte, headers []record.Header, indexInterval int) error {
	pos := s.size.Load()
	if _, err := s.log.WriteAt(data, pos); err != nil {
		return err
	}
	s.dirtyLog.Store(true)
	if pos == 0 {
		s.rollingLoaded = true
		s.rollingBasedTimestamp = -1
	}
	for i := range headers {
		s.indexBatch(&headers[i], pos, indexInterval)
		pos += int64(headers[i].Size())
	}
	s.size.Store(pos)
	return nil
}

// indexBatch updates the max timestamp and indexes for the batch at pos,
// exactly as recovery rebuilds them, so that a rebuilt index equals the
// appended one. Appender (or recovery) only.
func (s *segment) indexBatch(h *record.Header, pos int64, indexInterval int) {
	if pos == 0 {
		s.rollingBasedTimestamp = h.MaxTimestamp
	}
	s.observeTimestamp(h.MaxTimestamp, h.LastOffset())
	// A full index takes no more entries: one append of many batches can
	// fill it (the next append rolls), and recovery may meet a segment
	// written with a bigger segment.index.bytes. Lookups then scan further.
	if pos-s.lastIndexEntryPos > int64(indexInterval) && !s.indexesFull() {
		s.offsetIdx.append(h.LastOffset(), pos)
		ts, off := s.maxTimestampAndOffset()
		s.timeIdx.maybeAppend(ts, off, false)
		s.lastIndexEntryPos = pos
	}
	s.nextOffset = h.NextOffset()
}

// indexesFull reports whether another index entry might not fit.
func (s *segment) indexesFull() bool { return s.offsetIdx.isFull() || s.timeIdx.isFull() }

// becomeInactive records the final max timestamp and trims the indexes to
// their entries: the segment has rolled (or the log is closing).
func (s *segment) becomeInactive() error {
	ts, off := s.maxTimestampAndOffset()
	s.timeIdx.maybeAppend(ts, off, true)
	if err := s.offsetIdx.trim(); err != nil {
		return err
	}
	if err := s.timeIdx.trim(); err != nil {
		return err
	}
	s.dirtyIndex.Store(true)
	return nil
}

// becomeActive makes the indexes take appends again (a new segment, or
// truncation made this one the last); they are preallocated with their
// first entry.
func (s *segment) becomeActive() {
	for _, ix := range []*indexFile{s.offsetIdx.indexFile, s.timeIdx.indexFile} {
		ix.mu.Lock()
		ix.activate()
		ix.mu.Unlock()
	}
}

// flush syncs the log and, unless the segment is active, its indexes. The
// active segment's indexes need no sync: recovery after a crash checks the
// segment holding the recovery point entry by entry against its log (and
// keeps only what agrees), and the active segment holds every recovery
// point it could have.
func (s *segment) flush(active bool) error {
	if s.dirtyLog.Swap(false) {
		if err := s.log.Sync(); err != nil {
			return err
		}
	}
	if active || !s.dirtyIndex.Swap(false) {
		return nil
	}
	if err := s.offsetIdx.flush(); err != nil {
		return err
	}
	return s.timeIdx.flush()
}

// close closes the files.
func (s *segment) close() error {
	return errors.Join(s.offsetIdx.close(), s.timeIdx.close(), s.log.Close())
}

// headerScanner reads batch headers of a segment's log through a small
// window, so that a scan from an index entry to its target costs one or two
// reads.
type headerScanner struct {
	file  vfs.File // whose bytes buf holds
	buf   [8192]byte
	start int64 // file position of buf[0]
	n     int   // valid bytes in buf
}

var scannerPool = sync.Pool{New: func() any { return new(headerScanner) }}

// header returns the header of the batch at pos, reading no further than
// end.
func (sc *headerScanner) header(f vfs.File, pos, end int64) (record.Header, error) {
	if f != sc.file || pos < sc.start || pos+record.HeaderSize > sc.start+int64(sc.n) {
		want := min(int64(len(sc.buf)), end-pos)
		if want < record.HeaderSize {
			return record.Header{}, fmt.Errorf("%w: header at %d past the end %d", record.ErrShort, pos, end)
		}
		n, err := f.ReadAt(sc.buf[:want], pos)
		if err != nil && !(errors.Is(err, io.EOF) && n >= record.HeaderSize) {
			sc.n = 0
			return record.Header{}, err
		}
		sc.file, sc.start, sc.n = f, pos, n
	}
	return record.ParseHeader(sc.buf[pos-sc.start : sc.n])
}

// scan calls fn for each batch header from pos until end or fn returns
// false.
func (sc *headerScanner) scan(f vfs.File, pos, end int64, fn func(h *record.Header, pos int64) bool) error {
	for pos < end {
		h, err := sc.header(f, pos, end)
		if err != nil {
			return err
		}
		if !fn(&h, pos) {
			return nil
		}
		pos += int64(h.Size())
	}
	return nil
}

// find returns the position and header of the first batch whose last offset
// is >= offset, scanning from the index entry at or below it; found is false
// when no batch in the first end bytes qualifies.
func (s *segment) find(sc *headerScanner, offset, end int64) (pos int64, h record.Header, found bool, err error) {
	_, pos = s.offsetIdx.lookup(offset)
	for pos < end {
		if h, err = sc.header(s.log, pos, end); err != nil {
			return 0, h, false, err
		}
		if h.LastOffset() >= offset {
			return pos, h, true, nil
		}
		pos += int64(h.Size())
	}
	return 0, h, false, nil
}

// openFiles returns how many descriptors the segment holds.
func (s *segment) openFiles() int {
	n := 1
	for _, ix := range []*indexFile{s.offsetIdx.indexFile, s.timeIdx.indexFile} {
		ix.mu.RLock()
		if ix.f != nil {
			n++
		}
		ix.mu.RUnlock()
	}
	return n
}
