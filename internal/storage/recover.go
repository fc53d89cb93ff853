package storage

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recoveryStats summarizes a log's opening.
type recoveryStats struct {
	segmentsScanned int
	bytesScanned    int64
	bytesTruncated  int64
	segmentsDropped int
	indexesRebuilt  int
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

// load opens the segments in l.dir and recovers them. Nothing else has the
// log yet, so no locks are needed.
func (l *Log) load(opts LogOptions) error {
	start := time.Now()
	cfg := l.cfg.Load()
	swapped, err := l.finishSwaps()
	if err != nil {
		return fmt.Errorf("finishing an interrupted cleaning: %w", err)
	}
	names, err := l.fs.List(l.dir)
	if err != nil {
		return err
	}
	present := map[string]bool{}
	var bases []int64
	for _, name := range names {
		path := filepath.Join(l.dir, name)
		switch {
		case strings.HasSuffix(name, deletedSuffix) || strings.HasSuffix(name, tmpSuffix):
			// Leftovers of an interrupted deletion or checkpoint write.
			if err := l.fs.Remove(path); err != nil {
				return err
			}
			continue
		case strings.HasSuffix(name, logSuffix):
			if b, ok := parseOffsetName(name, logSuffix); ok {
				bases = append(bases, b)
			}
		case strings.HasSuffix(name, snapshotSuffix):
			if o, ok := parseOffsetName(name, snapshotSuffix); ok {
				l.snapshots = append(l.snapshots, o)
			}
		}
		present[name] = true
	}
	slices.Sort(bases)
	slices.Sort(l.snapshots)
	// Indexes without a log are orphans of a deletion (Kafka removes them).
	for _, name := range names {
		for _, suf := range []string{indexSuffix, timeIndexSuffix} {
			if b, ok := parseOffsetName(name, suf); ok && !present[segmentName(b)+logSuffix] {
				if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
					return err
				}
			}
		}
	}
	if present[LeaderEpochCheckpointFile] {
		data, err := vfs.ReadFile(l.fs, filepath.Join(l.dir, LeaderEpochCheckpointFile))
		if err != nil {
			return err
		}
		if l.epochs.entries, err = decodeEpochCheckpoint(LeaderEpochCheckpointFile, data); err != nil {
			return err
		}
	}

	now := l.now()
	rebuild := make([]bool, len(bases))
	for i, base := range bases {
		s, err := openSegment(l.fs, l.dir, base, cfg, now)
		if errors.Is(err, errCorruptIndex) {
			l.logger.Warn("rebuilding index", "segment", base, "reason", err)
			rebuild[i] = true
		} else if err != nil {
			return err
		}
		rebuild[i] = rebuild[i] || swapped[base]
		l.segments = append(l.segments, s)
	}
	if len(l.segments) == 0 {
		s, err := createSegment(l.fs, l.dir, max(opts.LogStartOffset, 0), cfg, now)
		if err != nil {
			return err
		}
		l.segments = []*segment{s}
		rebuild = []bool{false}
		l.unflushedDir.Store(true)
	}

	var stats recoveryStats
	firstToRecover := len(l.segments)
	if !opts.CleanShutdown {
		firstToRecover = floorSegment(l.segments, opts.RecoveryPoint)
	}
	recovered := make([]bool, len(l.segments))
	for i := 0; i < len(l.segments); i++ {
		s := l.segments[i]
		last := i == len(l.segments)-1
		if i < firstToRecover && !rebuild[i] {
			if !last {
				continue
			}
			// A trusted active segment: find its end from its last index
			// entry. A batch that does not parse means the marker lied;
			// recover the segment instead.
			if err := s.loadEnd(); err == nil {
				break
			}
			l.logger.Warn("active segment unreadable despite clean shutdown; recovering", "segment", s.baseOffset)
		}
		bad, err := l.recoverSegment(s, &stats)
		if err != nil {
			return err
		}
		recovered[i] = true
		if !bad && !last {
			if why := l.checkBoundary(s, l.segments[i+1]); why != "" {
				l.logger.Warn("dropping segments after a lost segment tail", "segment", s.baseOffset,
					"next_segment", l.segments[i+1].baseOffset, "reason", why)
				bad = true
			}
		}
		if bad && !last {
			// Everything after a corrupt batch is suspect.
			for _, later := range l.segments[i+1:] {
				stats.segmentsDropped++
				stats.bytesTruncated += later.size.Load()
				later.close()
				for _, p := range later.paths(l.dir) {
					if err := l.fs.Remove(p); err != nil {
						return err
					}
				}
			}
			l.segments = l.segments[:i+1]
			recovered = recovered[:i+1]
			l.unflushedDir.Store(true)
		}
	}

	active := l.segments[len(l.segments)-1]
	for i, s := range l.segments {
		if recovered[i] && s != active {
			if err := s.becomeInactive(); err != nil {
				return err
			}
		}
	}
	if err := active.becomeActive(); err != nil {
		return err
	}
	// Recovered data came from the page cache, which a power loss may yet
	// lose: make it durable before calling it recovered.
	for i, s := range l.segments {
		if recovered[i] {
			s.dirtyLog.Store(true)
			s.dirtyIndex.Store(s != active)
			if err := s.flush(s == active); err != nil {
				return err
			}
		}
	}
	if stats.segmentsDropped > 0 || l.unflushedDir.Load() {
		if err := vfs.SyncDir(l.fs, l.dir); err != nil {
			return err
		}
		l.unflushedDir.Store(false)
	}

	leo := active.nextOffset
	logStart := max(opts.LogStartOffset, l.segments[0].baseOffset)
	l.logEndOffset.Store(leo)
	l.logStartOffset.Store(min(logStart, leo))
	l.recoveryPoint.Store(leo)
	if logStart > leo {
		// Recovery truncated below the checkpointed log start.
		if err := l.truncateFullyLocked(logStart); err != nil {
			return err
		}
		leo = logStart
	}
	if l.epochs.truncateFromEnd(leo) || l.epochs.truncateFromStart(l.logStartOffset.Load()) {
		if err := vfs.WriteFileAtomic(l.fs, filepath.Join(l.dir, LeaderEpochCheckpointFile), l.epochs.encode()); err != nil {
			return err
		}
	}
	if err := l.deleteSnapshotsLocked(func(o int64) bool { return o > leo }); err != nil {
		return err
	}

	attrs := []any{"segments", len(l.segments), "log_start_offset", l.logStartOffset.Load(), "log_end_offset", leo,
		"clean_shutdown", opts.CleanShutdown, "duration", time.Since(start).Round(time.Microsecond)}
	if stats.bytesScanned > 0 || stats.bytesTruncated > 0 || stats.segmentsDropped > 0 {
		attrs = append(attrs, "segments_scanned", stats.segmentsScanned, "bytes_scanned", stats.bytesScanned,
			"bytes_truncated", stats.bytesTruncated, "segments_dropped", stats.segmentsDropped)
		l.logger.Info("recovered log", attrs...)
	} else {
		l.logger.Debug("loaded log", attrs...)
	}
	return nil
}

// checkBoundary checks that next, the segment after the recovered segment
// s, starts where s ends. Rolls start the new segment at the log end
// offset, except when the appended offsets cannot be indexed relative to it
// (a follower's jump of more than 2^31 offsets), when the segment starts at
// the first appended batch. Any other gap means the end of s was lost (a
// power loss kept later data but not s's tail, at a batch boundary): the
// later segments must go, or the log would skip offsets. It returns why, or
// "".
func (l *Log) checkBoundary(s, next *segment) string {
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

// recoverSegment scans a segment from its start: every batch must parse,
// pass its CRC and follow its predecessor's offsets. The indexes and the max
// timestamp are rebuilt on the way, and the log is truncated at the first
// batch that fails. bad reports such a truncation.
func (l *Log) recoverSegment(s *segment, stats *recoveryStats) (bad bool, err error) {
	cfg := l.cfg.Load()
	if err := s.offsetIdx.reset(); err != nil {
		return false, err
	}
	if err := s.timeIdx.reset(); err != nil {
		return false, err
	}
	if err := s.becomeActive(); err != nil {
		return false, err
	}
	stats.indexesRebuilt++
	stats.segmentsScanned++
	s.maxTimestamp, s.offsetOfMaxTimestamp = -1, s.baseOffset
	s.lastIndexEntryPos, s.nextOffset = 0, s.baseOffset
	s.rollingBasedTimestamp, s.rollingLoaded = -1, true

	size := s.size.Load()
	r := batchReader{f: s.log, size: size, buf: make([]byte, min(recoveryWindow, size))}
	pos := int64(0)
	prevLast := s.baseOffset - 1
	var why error
	for pos < size {
		h, err := r.validate(pos)
		if err == nil && (h.BaseOffset <= prevLast || !s.canHold(h.LastOffset())) {
			err = fmt.Errorf("batch offsets %d..%d do not follow %d in segment %d", h.BaseOffset, h.LastOffset(), prevLast, s.baseOffset)
		}
		if err != nil {
			var re *readError
			if errors.As(err, &re) {
				return false, err // the disk failed us; this is not corruption
			}
			why = err
			break
		}
		s.indexBatch(&h, pos, cfg.IndexIntervalBytes)
		prevLast = h.LastOffset()
		pos += int64(h.Size())
	}
	stats.bytesScanned += pos
	if pos < size {
		l.logger.Warn("truncating corrupt or torn segment tail", "segment", s.baseOffset,
			"valid_bytes", pos, "truncated_bytes", size-pos, "reason", why)
		if err := s.log.Truncate(pos); err != nil {
			return false, err
		}
		s.size.Store(pos)
		stats.bytesTruncated += size - pos
		return true, nil
	}
	return false, nil
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
