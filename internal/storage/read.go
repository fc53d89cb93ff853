package storage

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// FileRegion is a byte range of a segment file: what a fetch response sends
// with sendfile(2) (File.Fd) at an explicit offset, never through the
// file's shared position. File belongs to the log; it stays open at least
// file.delete.delay.ms after its segment is deleted, so a region may be sent
// after a concurrent retention or truncation. (A truncation inside the
// active segment shortens the file in place, as in Kafka: a region read
// concurrently with one may come up short.)
type FileRegion struct {
	File vfs.File
	Pos  int64
	Len  int64
}

// ReadAll appends the region's bytes to dst: for internal readers that need
// the data in memory.
func (r FileRegion) ReadAll(dst []byte) ([]byte, error) {
	if r.Len == 0 {
		return dst, nil
	}
	n := len(dst)
	dst = slices.Grow(dst, int(r.Len))[:n+int(r.Len)]
	k, err := r.File.ReadAt(dst[n:], r.Pos)
	if err != nil && !(errors.Is(err, io.EOF) && k == int(r.Len)) {
		return dst[:n+k], err
	}
	return dst, nil
}

// ReadResult is what Read found.
type ReadResult struct {
	// Region holds consecutive whole batches from one segment; Len is 0
	// when there is nothing to read.
	Region FileRegion
	// FirstBatchOffset is the base offset of the region's first batch,
	// which may be below the offset asked for (a read that starts inside
	// a batch returns the whole batch; clients skip the earlier records),
	// or -1.
	FirstBatchOffset int64
	// More reports that batches below maxOffset follow the region in its
	// segment, left out by maxBytes: at least maxBytes could be read.
	More bool
	// LaterSegment reports that maxOffset lies in a later segment than
	// the region's: batches below it follow the region's segment. Kafka's
	// DelayedFetch answers a fetch of an older segment at once, however
	// few bytes it read.
	LaterSegment bool
}

// Read returns the batches from the one containing offset on, as one file
// region of one segment: only batches whose last offset is below maxOffset
// (the high watermark, or the log end offset), and at most maxBytes of
// them, except that with minOneBatch a first batch bigger than maxBytes is
// returned alone (KIP-74). Nothing is copied. The cleaner's boundary
// markers are never returned (a read that would start at one starts after
// it), so a reader sees the batches Kafka's cleaner would have kept.
//
// An offset below the log start offset or above the log end offset is
// ErrOffsetOutOfRange; at the log end offset, or with nothing below
// maxOffset, the result is empty.
func (l *Log) Read(offset int64, maxBytes int, maxOffset int64, minOneBatch bool) (ReadResult, error) {
	empty := ReadResult{FirstBatchOffset: -1}
	leo := l.logEndOffset.Load()
	l.mu.RLock()
	segs := l.mu.segments
	l.mu.RUnlock()
	if start := l.logStartOffset.Load(); offset < start || offset > leo {
		return empty, fmt.Errorf("%w: offset %d not in [%d, %d] of %s", ErrOffsetOutOfRange, offset, start, leo, l)
	}
	maxOffset = min(maxOffset, leo)
	if offset >= maxOffset {
		return empty, nil
	}
	sc := scannerPool.Get().(*headerScanner)
	defer scannerPool.Put(sc)
	sc.n = 0
	for i := floorSegment(segs, offset); i < len(segs); i++ {
		laterSegment := i+1 < len(segs) && segs[i+1].baseOffset <= maxOffset
		res, ok, err := segs[i].read(sc, offset, maxBytes, maxOffset, minOneBatch, laterSegment)
		if err != nil {
			return empty, fmt.Errorf("storage: reading %s segment %d: %w", l, segs[i].baseOffset, err)
		}
		if ok {
			return res, nil
		}
	}
	return empty, nil
}

// read is Read within one segment: the batches from the one containing
// offset on, as one region of the segment's file. ok is false when the
// segment holds no batch at or after offset that a read may return (the
// read goes on in the next segment); res is empty when there is nothing to
// read below maxOffset or within maxBytes. laterSegment, for the result,
// says maxOffset lies in a later segment. A segment of the remote tier
// would answer the same question from its own storage.
func (s *segment) read(sc *headerScanner, offset int64, maxBytes int, maxOffset int64, minOneBatch, laterSegment bool) (res ReadResult, ok bool, err error) {
	empty := ReadResult{FirstBatchOffset: -1}
	end := s.size.Load()
	pos, h, found, err := s.find(sc, offset, end)
	if err != nil || !found {
		return empty, false, err // !found: offset is past this segment's last batch
	}
	if isBoundaryMarker(&h) {
		// The cleaner writes a marker last in a segment, so this usually
		// moves on to the next segment.
		next := int64(-1)
		err = sc.scan(s.log, pos+int64(h.Size()), end, func(hh *record.Header, p int64) bool {
			if isBoundaryMarker(hh) {
				return true
			}
			next, h = p, *hh
			return false
		})
		if err != nil || next < 0 {
			return empty, false, err
		}
		pos = next
	}
	if h.LastOffset() >= maxOffset {
		return empty, true, nil
	}
	limit := pos + int64(max(maxBytes, 0))
	endPos := pos + int64(h.Size())
	if endPos > limit {
		if !minOneBatch {
			return ReadResult{FirstBatchOffset: -1, More: true, LaterSegment: laterSegment}, true, nil
		}
		return ReadResult{Region: FileRegion{s.log, pos, endPos - pos}, FirstBatchOffset: h.BaseOffset, More: true, LaterSegment: laterSegment}, true, nil
	}
	// Jump with the index to the last indexed batch that fits, then scan
	// the few batches after it.
	if _, ipos, indexed := s.offsetIdx.floor(limit, maxOffset); indexed && ipos > endPos {
		endPos = ipos
	}
	more := false
	err = sc.scan(s.log, endPos, end, func(hh *record.Header, p int64) bool {
		e := p + int64(hh.Size())
		if e <= limit && hh.LastOffset() < maxOffset && !isBoundaryMarker(hh) {
			endPos = e
			return true
		}
		more = e > limit && hh.LastOffset() < maxOffset && !isBoundaryMarker(hh)
		return false
	})
	if err != nil {
		return empty, false, err
	}
	return ReadResult{Region: FileRegion{s.log, pos, endPos - pos}, FirstBatchOffset: h.BaseOffset, More: more, LaterSegment: laterSegment}, true, nil
}

// isBoundaryMarker reports whether h is a batch the log cleaner keeps only
// to end a segment it wrote where the next one starts (see cleaner.go): no
// records and no producer. Kafka's cleaner drops such a batch, and clients
// that read Kafka's compacted logs do not expect one (kafka-go's reader
// stops for good at a batch without records), so reads skip it.
func isBoundaryMarker(h *record.Header) bool { return h.NumRecords == 0 && !h.HasProducerID() }

// readChunk bounds how much ReadBatches holds in memory at once.
const readChunk = 1 << 20

// ReadBatches calls fn with each batch from the one containing from up to
// the log end offset, copying them into memory in chunks, until fn returns
// false or maxBytes have been passed (at least one batch is; maxBytes <= 0
// means no limit). batch is valid only until fn returns. It is for internal
// readers (replaying __consumer_offsets or the metadata log), not fetches.
func (l *Log) ReadBatches(from int64, maxBytes int, fn func(h record.Header, batch []byte) bool) error {
	if maxBytes <= 0 {
		maxBytes = math.MaxInt
	}
	var buf []byte
	total := 0
	for offset := from; ; {
		res, err := l.Read(offset, min(maxBytes-total, readChunk), math.MaxInt64, true)
		if err != nil {
			return err
		}
		if res.Region.Len == 0 {
			return nil
		}
		if buf, err = res.Region.ReadAll(buf[:0]); err != nil {
			return err
		}
		stop := false
		err = record.Batches(buf, func(h record.Header, batch []byte) bool {
			if total > 0 && total+len(batch) > maxBytes {
				stop = true
				return false
			}
			total += len(batch)
			offset = h.NextOffset()
			if !fn(h, batch) {
				stop = true
				return false
			}
			return true
		})
		if err != nil {
			return fmt.Errorf("storage: reading %s: %w", l, err)
		}
		if stop || total >= maxBytes {
			return nil
		}
	}
}

// ScanBatchHeaders calls fn with the header and file position of each batch
// from the one containing from (the log start offset, if from is below it)
// to the log end offset, until fn returns false. It reads headers only (the
// producer-state rebuild needs no records).
func (l *Log) ScanBatchHeaders(from int64, fn func(h record.Header, pos int64) bool) error {
	leo := l.logEndOffset.Load()
	l.mu.RLock()
	segs := l.mu.segments
	l.mu.RUnlock()
	from = max(from, l.logStartOffset.Load())
	sc := scannerPool.Get().(*headerScanner)
	defer scannerPool.Put(sc)
	sc.n = 0
	stopped := false
	for i := floorSegment(segs, from); i < len(segs) && !stopped; i++ {
		s := segs[i]
		end := s.size.Load()
		pos, _, found, err := s.find(sc, from, end)
		if err != nil {
			return fmt.Errorf("storage: scanning %s segment %d: %w", l, s.baseOffset, err)
		}
		if !found {
			continue
		}
		err = sc.scan(s.log, pos, end, func(h *record.Header, p int64) bool {
			if h.BaseOffset >= leo {
				stopped = true
				return false
			}
			if !fn(*h, p) {
				stopped = true
				return false
			}
			return true
		})
		if err != nil {
			return fmt.Errorf("storage: scanning %s segment %d: %w", l, s.baseOffset, err)
		}
	}
	return nil
}
