package storage

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recoveryStats summarizes a log's opening, for its own log line and the
// Manager's summary.
type recoveryStats struct {
	segmentsScanned int
	bytesScanned    int64
	bytesTruncated  int64
	segmentsDropped int
	indexesRebuilt  int
	// Corruption found, which the Manager counts by cause: a torn or bad
	// batch truncated; an index that disagreed with its log (rebuilt);
	// segments after a lost segment tail dropped; an active segment that
	// did not parse although the clean-shutdown marker said it would.
	tornTail, corruptIndex, lostSegments, unreadableActive bool
	// recoveredFrom is the base offset of the first segment recovery
	// checked, -1 when it trusted them all.
	recoveredFrom int64
}

func (st *recoveryStats) corrupt() bool {
	return st.tornTail || st.corruptIndex || st.lostSegments || st.unreadableActive
}

// causes names the kinds of corruption found, for the Manager's summary.
func (st *recoveryStats) causes() []string {
	var out []string
	for _, c := range []struct {
		found bool
		name  string
	}{{st.tornTail, "torn_tail"}, {st.corruptIndex, "corrupt_index"}, {st.lostSegments, "lost_segment_tail"},
		{st.unreadableActive, "unreadable_after_clean_shutdown"}} {
		if c.found {
			out = append(out, c.name)
		}
	}
	return out
}

// parseOffsetName parses "%020d<suffix>".
func parseOffsetName(name, suffix string) (int64, bool) {
	stem, ok := strings.CutSuffix(name, suffix)
	if !ok || len(stem) != 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(stem, 10, 64)
	return n, err == nil && n >= 0
}

// load opens the segments in l.mu.dir and recovers them (see logLoader).
// Nothing else has the log yet, so no locks are needed.
func (l *Log) load(opts LogOptions) error {
	start := time.Now()
	ld := &logLoader{log: l, opts: opts, cfg: l.cfg.Load(), stats: &l.recovery}
	if err := ld.listDir(); err != nil {
		return err
	}
	if err := ld.openSegments(); err != nil {
		return err
	}
	if err := ld.recoverSegments(); err != nil {
		return err
	}
	if err := ld.settleSegments(); err != nil {
		return err
	}
	if err := ld.setBounds(); err != nil {
		return err
	}
	ld.report(time.Since(start))
	return nil
}

// logLoader is one opening of a log, Kafka's LogLoader: it lists the
// directory, opens the segments, recovers those not known to be flushed,
// and sets the log's bounds. It works on its log before the log is shared.
type logLoader struct {
	log   *Log
	opts  LogOptions
	cfg   *Config
	stats *recoveryStats
	// names is the directory's listing, after interrupted swaps were
	// finished or rolled back; swapped are the base offsets of the segments
	// those swaps put in.
	names   []string
	swapped map[int64]bool
	bases   []int64 // of the .log files, ascending
	// firstToRecover is the index of the first segment recovery checks;
	// rebuild[i] says segment i's indexes must be rebuilt, recovered[i]
	// that segment i was checked.
	firstToRecover     int
	rebuild, recovered []bool
}

// corruption logs what recovery found wrong with one segment: a warning
// for a log opened on its own, a debug line under a Manager, which sums
// up all its logs in one line.
func (ld *logLoader) corruption(msg string, attrs ...any) {
	level := slog.LevelWarn
	if ld.log.summarized {
		level = slog.LevelDebug
	}
	ld.log.logger.Log(context.Background(), level, msg, attrs...)
}

// listDir lists the directory: it finishes the swaps of an interrupted
// cleaning, removes leftovers, finds the segments and snapshots, and reads
// the leader-epoch checkpoint.
func (ld *logLoader) listDir() error {
	l := ld.log
	names, err := l.fs.List(l.mu.dir)
	if err != nil {
		return err
	}
	swapped, names, dirChanged, err := finishSwaps(l.fs, l.mu.dir, l.logger, names)
	if err != nil {
		return fmt.Errorf("finishing an interrupted cleaning: %w", err)
	}
	if dirChanged {
		l.unflushedDir.Store(true)
	}
	ld.names, ld.swapped = names, swapped
	present := map[string]bool{}
	for _, name := range names {
		path := filepath.Join(l.mu.dir, name)
		switch {
		case strings.HasSuffix(name, deletedSuffix) || strings.HasSuffix(name, tmpSuffix):
			// Leftovers of an interrupted deletion or checkpoint write.
			if err := l.fs.Remove(path); err != nil {
				return err
			}
			continue
		case strings.HasSuffix(name, logSuffix):
			if b, ok := parseOffsetName(name, logSuffix); ok {
				ld.bases = append(ld.bases, b)
			}
		case strings.HasSuffix(name, snapshotSuffix):
			if o, ok := parseOffsetName(name, snapshotSuffix); ok {
				l.snapshots.mu.offsets = append(l.snapshots.mu.offsets, o)
			}
		}
		present[name] = true
	}
	slices.Sort(ld.bases)
	slices.Sort(l.snapshots.mu.offsets)
	// Indexes without a log are orphans of a deletion (Kafka removes them).
	for _, name := range names {
		for _, suf := range []string{indexSuffix, timeIndexSuffix} {
			if b, ok := parseOffsetName(name, suf); ok && !present[segmentName(b)+logSuffix] {
				if err := l.fs.Remove(filepath.Join(l.mu.dir, name)); err != nil {
					return err
				}
			}
		}
	}
	if present[LeaderEpochCheckpointFile] {
		data, err := vfs.ReadFile(l.fs, filepath.Join(l.mu.dir, LeaderEpochCheckpointFile))
		if err != nil {
			return err
		}
		if l.mu.epochs.entries, err = decodeEpochCheckpoint(LeaderEpochCheckpointFile, data); err != nil {
			return err
		}
	}
	return nil
}

// openSegments opens the segments listDir found, or creates the first one
// of an empty log.
func (ld *logLoader) openSegments() error {
	l, bases, opts := ld.log, ld.bases, ld.opts
	// Without a clean shutdown, the segment holding the recovery point and
	// every later one hold data that was not flushed: recovery checks them.
	// The segments before it, and every segment after a clean shutdown, are
	// trusted.
	ld.firstToRecover = len(bases)
	if !opts.CleanShutdown {
		ld.firstToRecover = max(sort.Search(len(bases), func(i int) bool { return bases[i] > opts.RecoveryPoint })-1, 0)
	}
	now := l.now()
	ld.rebuild = make([]bool, len(bases))
	for i, base := range bases {
		s, err := openSegment(l.fs, l.mu.dir, base, ld.cfg, now, i < ld.firstToRecover)
		if errors.Is(err, errCorruptIndex) {
			ld.corruption("rebuilding index", "segment", base, "reason", err)
			ld.stats.corruptIndex = true
			ld.rebuild[i] = true
		} else if err != nil {
			return err
		}
		ld.rebuild[i] = ld.rebuild[i] || ld.swapped[base]
		l.mu.segments = append(l.mu.segments, s)
	}
	if len(l.mu.segments) == 0 {
		s, err := createSegment(l.fs, l.mu.dir, max(opts.LogStartOffset, 0), ld.cfg, now)
		if err != nil {
			return err
		}
		l.mu.segments = []*segment{s}
		ld.rebuild = []bool{false}
		ld.firstToRecover = 1
		l.unflushedDir.Store(true)
	}
	return nil
}

// recoverSegments recovers the segments from firstToRecover on, and any
// whose index must be rebuilt; everything after a corrupt batch or a lost
// segment tail is dropped.
func (ld *logLoader) recoverSegments() error {
	l, stats := ld.log, ld.stats
	ld.recovered = make([]bool, len(l.mu.segments))
	for i := 0; i < len(l.mu.segments); i++ {
		s := l.mu.segments[i]
		last := i == len(l.mu.segments)-1
		if i < ld.firstToRecover && !ld.rebuild[i] {
			if !last {
				continue
			}
			// A trusted active segment: find its end from its last index
			// entry. A batch that does not parse means the marker lied;
			// recover the segment instead.
			if err := s.loadEnd(); err == nil {
				break
			}
			ld.corruption("active segment unreadable despite clean shutdown; recovering", "segment", s.baseOffset)
			stats.unreadableActive = true
			ld.rebuild[i] = true
		}
		rebuiltBefore := stats.indexesRebuilt
		bad, err := ld.recoverSegment(s, ld.rebuild[i])
		if err != nil {
			return err
		}
		ld.recovered[i] = true
		ld.rebuild[i] = stats.indexesRebuilt > rebuiltBefore
		if !bad && !last {
			if why := checkBoundary(s, l.mu.segments[i+1]); why != "" {
				ld.corruption("dropping segments after a lost segment tail", "segment", s.baseOffset,
					"next_segment", l.mu.segments[i+1].baseOffset, "reason", why)
				stats.lostSegments = true
				bad = true
			}
		}
		if bad && !last {
			// Everything after a corrupt batch is suspect.
			for _, later := range l.mu.segments[i+1:] {
				stats.segmentsDropped++
				stats.bytesTruncated += later.size.Load()
				later.close()
				for _, p := range later.paths(l.mu.dir) {
					if err := l.fs.Remove(p); err != nil {
						return err
					}
				}
			}
			l.mu.segments = l.mu.segments[:i+1]
			ld.recovered = ld.recovered[:i+1]
			l.unflushedDir.Store(true)
		}
	}
	return nil
}

// settleSegments makes the last segment the active one, and marks what
// recovery checked for the next flush.
func (ld *logLoader) settleSegments() error {
	l := ld.log
	active := l.mu.segments[len(l.mu.segments)-1]
	for i, s := range l.mu.segments {
		if ld.recovered[i] && s != active {
			if err := s.becomeInactive(); err != nil {
				return err
			}
		}
	}
	active.becomeActive()
	// Recovered data came from the page cache, which a power loss may yet
	// lose: it stays above the recovery point, and the next flush syncs it
	// (recovery itself syncs nothing it did not have to change). Only what
	// recovery rebuilt (indexes found corrupt, segments of an interrupted
	// cleaning, rare both) and the removal of dropped segments are made
	// durable now: a flush would not reach them below the recovery point.
	for i, s := range l.mu.segments {
		if ld.recovered[i] {
			s.dirtyLog.Store(true)
			s.dirtyIndex.Store(s != active)
			if ld.rebuild[i] {
				if err := s.flush(s == active); err != nil {
					return err
				}
			}
		}
	}
	if ld.stats.segmentsDropped > 0 {
		if err := vfs.SyncDir(l.fs, l.mu.dir); err != nil {
			return err
		}
	}
	return nil
}

// setBounds sets the log's start and end offsets and recovery point from
// its segments and the checkpoints, and fits the epoch cache, the
// snapshots and the aborted-transaction index to them.
func (ld *logLoader) setBounds() error {
	l, opts := ld.log, ld.opts
	leo := l.mu.segments[len(l.mu.segments)-1].nextOffset
	logStart := max(opts.LogStartOffset, l.mu.segments[0].baseOffset)
	l.logEndOffset.Store(leo)
	l.logStartOffset.Store(min(logStart, leo))
	recoveryPoint := leo
	if !opts.CleanShutdown {
		recoveryPoint = min(max(opts.RecoveryPoint, l.mu.segments[0].baseOffset), leo)
	}
	l.recoveryPoint.Store(recoveryPoint)
	if logStart > leo {
		// Recovery truncated below the checkpointed log start.
		if err := l.truncateFullyLocked(logStart); err != nil {
			return err
		}
		leo = logStart
	}
	// An epoch that starts at the log end (a leader elected that wrote
	// nothing yet) is kept: it still describes the log, and dropping it
	// would cost a rewrite now and another when the leader is elected again.
	if l.mu.epochs.truncateFromEnd(leo+1) || l.mu.epochs.truncateFromStart(l.logStartOffset.Load()) {
		if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.mu.dir, LeaderEpochCheckpointFile), l.mu.epochs.encode()); err != nil {
			return err
		}
	}
	if err := l.snapshots.deleteLocked(l.mu.dir, func(o int64) bool { return o > leo }); err != nil {
		return err
	}
	// The .txnindex entries of a recovered segment may be missing (never
	// synced) or stale (a torn tail truncated): the replica rebuilds them
	// from the log (TxnIndex.SuspectFrom). Those of the segments before are
	// as durable as the segments (Flush syncs them).
	l.txns.suspectFrom = leo
	ld.stats.recoveredFrom = -1
	for i, s := range l.mu.segments {
		if ld.recovered[i] {
			l.txns.suspectFrom = s.baseOffset
			ld.stats.recoveredFrom = s.baseOffset
			break
		}
	}
	if err := l.txns.load(ld.names, l.logStartOffset.Load(), l.logEndOffset.Load(), ld.corruption); err != nil {
		return fmt.Errorf("loading transaction indexes: %w", err)
	}
	return nil
}

// report logs the opening: a debug line, or a line of what recovery did.
func (ld *logLoader) report(took time.Duration) {
	l, opts, stats := ld.log, ld.opts, ld.stats
	attrs := []any{"segments", len(l.mu.segments), "log_start_offset", l.logStartOffset.Load(),
		"log_end_offset", l.logEndOffset.Load(), "clean_shutdown", opts.CleanShutdown,
		"duration", took.Round(time.Microsecond)}
	if !opts.CleanShutdown {
		// Where recovery started: the checkpointed recovery point, and the
		// base offset of the segment holding it, which was the first one
		// checked.
		attrs = append(attrs, "recovery_point", opts.RecoveryPoint, "recovered_from_segment", stats.recoveredFrom)
	}
	if stats.bytesScanned > 0 || stats.bytesTruncated > 0 || stats.segmentsDropped > 0 || stats.indexesRebuilt > 0 {
		attrs = append(attrs, "segments_scanned", stats.segmentsScanned, "bytes_scanned", stats.bytesScanned,
			"bytes_truncated", stats.bytesTruncated, "segments_dropped", stats.segmentsDropped,
			"indexes_rebuilt", stats.indexesRebuilt)
		level := slog.LevelInfo
		if l.summarized {
			level = slog.LevelDebug
		}
		l.logger.Log(context.Background(), level, "recovered log", attrs...)
	} else {
		l.logger.Debug("loaded log", attrs...)
	}
}

// checkBoundary checks that next, the segment after the recovered segment
// s, starts where s ends. Rolls start the new segment at the log end
// offset, except when the appended offsets cannot be indexed relative to it
// (a follower's jump of more than 2^31 offsets), when the segment starts at
// the first appended batch. Any other gap means the end of s was lost (a
// power loss kept later data but not s's tail, at a batch boundary): the
// later segments must go, or the log would skip offsets. It returns why, or
// "".
func checkBoundary(s, next *segment) string {
	switch {
	case next.baseOffset < s.nextOffset:
		return fmt.Sprintf("segment %d overlaps its predecessor, which ends at %d", next.baseOffset, s.nextOffset)
	case next.baseOffset == s.nextOffset:
		return ""
	}
	// A legitimate gap holds a batch that a segment starting at s's end
	// could not have indexed; usually the first batch shows it.
	sc := scannerPool.Get().(*headerScanner)
	defer scannerPool.Put(sc)
	sc.n = 0
	legit := false
	sc.scan(next.log, 0, next.size.Load(), func(h *record.Header, _ int64) bool {
		legit = h.LastOffset()-s.nextOffset > math.MaxInt32
		return !legit
	})
	if legit {
		return ""
	}
	return fmt.Sprintf("segment %d starts after its predecessor's end %d", next.baseOffset, s.nextOffset)
}

// loadEnd finds the end offset of a trusted segment by scanning from its
// last index entry.
func (s *segment) loadEnd() error {
	_, pos := s.offsetIdx.lastEntry()
	sc := scannerPool.Get().(*headerScanner)
	defer scannerPool.Put(sc)
	sc.n = 0
	next := s.baseOffset
	end := pos
	err := sc.scan(s.log, pos, s.size.Load(), func(h *record.Header, p int64) bool {
		if h.BaseOffset < s.baseOffset || p+int64(h.Size()) > s.size.Load() {
			end = -1
			return false
		}
		s.observeTimestamp(h.MaxTimestamp, h.LastOffset())
		next = h.NextOffset()
		end = p + int64(h.Size())
		return true
	})
	if err != nil {
		return err
	}
	if end != s.size.Load() {
		return fmt.Errorf("%w: segment %d ends inside a batch", record.ErrShort, s.baseOffset)
	}
	s.nextOffset = next
	return nil
}

// recoveryWindow is how much of a segment recovery reads at a time.
const recoveryWindow = 1 << 20

// recoverSegment checks a segment that was not flushed, or whose index
// must be rebuilt (full): every batch it checks must parse, pass its CRC
// and follow its predecessor's offsets, and the log is truncated at the
// first that fails; bad reports such a truncation. The indexes and the max
// timestamp are rebuilt on the way.
//
// Unless full, only what the index does not validly cover is read: the
// index's valid entries (offsetIndex.validPrefix) are kept, and the scan
// starts at the batch of the last one, which must be where the index says,
// and ends at the end of the file. An index entry is written after its
// batch, so what it covers reached the file before it did; a crash that
// kept the entry kept the batches. An empty log reads nothing. An index
// that disagrees with its log is rebuilt from the start of the segment.
func (ld *logLoader) recoverSegment(s *segment, full bool) (bad bool, err error) {
	cfg, stats := ld.cfg, ld.stats
	size := s.size.Load()
	s.becomeActive() // takes the entries of what it scans
	// Whatever recovery keeps of the indexes came from the page cache: the
	// next flush of the segment syncs them.
	s.offsetIdx.mu.Lock()
	s.offsetIdx.dirty = true
	s.offsetIdx.mu.Unlock()
	s.timeIdx.mu.Lock()
	s.timeIdx.dirty = true
	s.timeIdx.mu.Unlock()
	pos, expectLast := int64(0), int64(-1)
	if !full {
		var garbled error
		pos, expectLast, garbled = s.resumePoint(size)
		if garbled != nil {
			ld.corruption("rebuilding index", "segment", s.baseOffset, "reason", garbled)
			stats.corruptIndex = true
			full = true
		}
	}
	if full || pos == 0 {
		if err := s.offsetIdx.reset(); err != nil {
			return false, err
		}
		if err := s.timeIdx.reset(); err != nil {
			return false, err
		}
		s.maxTimestamp, s.offsetOfMaxTimestamp = -1, s.baseOffset
		s.lastIndexEntryPos = 0
		s.rollingBasedTimestamp, s.rollingLoaded = -1, true
		pos, expectLast = 0, -1
		if full {
			stats.indexesRebuilt++
		}
	}
	s.nextOffset = s.baseOffset
	if size == pos {
		return false, nil
	}
	stats.segmentsScanned++

	resumed := pos
	r := batchReader{f: s.log, size: size, buf: make([]byte, min(recoveryWindow, size-pos))}
	prevLast := s.baseOffset - 1
	var why error
	for pos < size {
		h, err := r.validate(pos)
		switch {
		case err != nil:
		case pos == resumed && expectLast >= 0:
			if h.LastOffset() != expectLast || h.BaseOffset < s.baseOffset {
				err = fmt.Errorf("%w: offset index of segment %d points at a batch of offsets %d..%d at %d, not one ending at %d",
					errCorruptIndex, s.baseOffset, h.BaseOffset, h.LastOffset(), pos, expectLast)
			}
		case h.BaseOffset <= prevLast || !s.canHold(h.LastOffset()):
			err = fmt.Errorf("batch offsets %d..%d do not follow %d in segment %d", h.BaseOffset, h.LastOffset(), prevLast, s.baseOffset)
		}
		if err != nil {
			var re *readError
			if errors.As(err, &re) {
				return false, err // the disk failed us; this is not corruption
			}
			if pos == resumed && expectLast >= 0 {
				// The batch the index ends at is not there: the index
				// cannot be trusted (torn writes of a power loss, or
				// damage). Check the whole segment.
				stats.bytesScanned += pos - resumed
				if errors.Is(err, errCorruptIndex) {
					ld.corruption("rebuilding index", "segment", s.baseOffset, "reason", err)
					stats.corruptIndex = true
				}
				return ld.recoverSegment(s, true)
			}
			why = err
			break
		}
		s.indexBatch(&h, pos, cfg.IndexIntervalBytes)
		prevLast = h.LastOffset()
		pos += int64(h.Size())
	}
	stats.bytesScanned += pos - resumed
	if pos < size {
		ld.corruption("truncating corrupt or torn segment tail", "segment", s.baseOffset, "offset", prevLast+1,
			"valid_bytes", pos, "truncated_bytes", size-pos, "reason", why)
		if err := s.log.Truncate(pos); err != nil {
			return false, err
		}
		s.size.Store(pos)
		stats.bytesTruncated += size - pos
		stats.tornTail = true
		return true, nil
	}
	return false, nil
}

// resumePoint keeps what a segment's indexes validly cover and returns
// where recovery resumes: the position of the last offset-index entry kept
// and the last offset of its batch, with the max timestamp of the batches
// before it restored from the time index; (0, -1) to scan the whole
// segment. garbled says the index disagrees with its log.
func (s *segment) resumePoint(size int64) (pos, lastOffset int64, garbled error) {
	if s.offsetIdx.validPrefix(size) {
		return 0, -1, fmt.Errorf("%w: offset index of segment %d: entries out of order", errCorruptIndex, s.baseOffset)
	}
	lastOffset, pos = s.offsetIdx.lastEntry()
	ts, tsOffset := s.timeIdx.validPrefix(lastOffset)
	if pos == 0 {
		return 0, -1, nil
	}
	if ts >= 0 {
		// The last time entry is the max timestamp of a batch that ends at
		// its offset: check that against the log. All zeros, it can be a
		// real first entry (timestamp 0 at the base offset) or the unused
		// tail of a preallocated file; if the log says the latter, scan.
		sc := scannerPool.Get().(*headerScanner)
		defer scannerPool.Put(sc)
		sc.n = 0
		_, h, found, err := s.find(sc, tsOffset, size)
		if err != nil || !found || h.LastOffset() != tsOffset || h.MaxTimestamp != ts {
			if ts == 0 && tsOffset == s.baseOffset {
				return 0, -1, nil
			}
			return 0, -1, fmt.Errorf("%w: time index of segment %d: entry (%d, %d) does not match the log",
				errCorruptIndex, s.baseOffset, ts, tsOffset)
		}
	}
	s.statMu.Lock()
	s.maxTimestamp, s.offsetOfMaxTimestamp = ts, tsOffset
	s.statMu.Unlock()
	s.lastIndexEntryPos = pos
	s.rollingBasedTimestamp, s.rollingLoaded = -1, false
	return pos, lastOffset, nil
}

// readError is an I/O error (not corruption) met while reading a segment.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

func isIOEOF(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) }

// batchReader reads and validates batches of one segment through a window.
type batchReader struct {
	f     vfs.File
	size  int64
	buf   []byte
	start int64 // file position of buf[0]
	n     int
}

// fill makes [pos, pos+n) available in the window, n <= len(buf).
func (r *batchReader) fill(pos int64, n int) ([]byte, error) {
	if pos >= r.start && pos+int64(n) <= r.start+int64(r.n) {
		return r.buf[pos-r.start : pos-r.start+int64(n)], nil
	}
	want := int(min(int64(len(r.buf)), r.size-pos))
	got, err := r.f.ReadAt(r.buf[:want], pos)
	if err != nil && !(isIOEOF(err) && got >= n) {
		r.n = 0
		if isIOEOF(err) {
			return nil, fmt.Errorf("%w: file ends at %d", record.ErrShort, pos+int64(got))
		}
		return nil, &readError{err}
	}
	r.start, r.n = pos, got
	if got < n {
		return nil, fmt.Errorf("%w: file ends at %d", record.ErrShort, pos+int64(got))
	}
	return r.buf[:n], nil
}

// validate checks the batch at pos as the record package does on produce,
// and returns its header.
func (r *batchReader) validate(pos int64) (record.Header, error) {
	if r.size-pos < record.HeaderSize {
		return record.Header{}, fmt.Errorf("%w: %d bytes left at %d", record.ErrShort, r.size-pos, pos)
	}
	hb, err := r.fill(pos, record.HeaderSize)
	if err != nil {
		return record.Header{}, err
	}
	h, err := record.ParseHeader(hb)
	if err != nil {
		return h, err
	}
	size := int64(h.Size())
	if pos+size > r.size {
		return h, fmt.Errorf("%w: batch of %d bytes at %d, file ends at %d", record.ErrShort, size, pos, r.size)
	}
	if size <= int64(len(r.buf)) {
		b, err := r.fill(pos, int(size))
		if err != nil {
			return h, err
		}
		return record.Validate(b, 0)
	}
	// Bigger than the window: check the header's fields, then stream the
	// CRC, so a corrupt length never makes us allocate it.
	if err := checkHeaderFields(&h); err != nil {
		return h, err
	}
	crc := uint32(0)
	const attrOffset = 21
	for p := pos + attrOffset; p < pos+size; {
		n := int(min(int64(len(r.buf)), pos+size-p))
		if _, err := r.f.ReadAt(r.buf[:n], p); err != nil {
			r.n = 0
			if isIOEOF(err) {
				return h, fmt.Errorf("%w: file ends before %d", record.ErrShort, p+int64(n))
			}
			return h, &readError{err}
		}
		crc = crc32.Update(crc, castagnoli, r.buf[:n])
		p += int64(n)
	}
	r.n = 0
	if crc != h.CRC {
		return h, fmt.Errorf("%w: stored %08x, computed %08x", record.ErrCRC, h.CRC, crc)
	}
	return h, nil
}

// checkHeaderFields applies record.Validate's checks that need only the
// header.
func checkHeaderFields(h *record.Header) error {
	if h.Codec() > record.CodecZstd {
		return fmt.Errorf("%w: %d", record.ErrCodec, h.Codec())
	}
	if h.NumRecords < 0 || h.LastOffsetDelta < 0 || int64(h.NumRecords) > int64(h.LastOffsetDelta)+1 {
		return fmt.Errorf("%w: %d records, last offset delta %d", record.ErrRecordCount, h.NumRecords, h.LastOffsetDelta)
	}
	return nil
}
