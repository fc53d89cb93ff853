package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// Log compaction, as Kafka's log cleaner does it (KIP-58 lag, KIP-534
// delete horizon). A compacted log is cut in three:
//
//	| clean section      | dirty section          | uncleanable            |
//	0 ... cleaner checkpoint ... first uncleanable offset ... log end offset
//
// The cleaner checkpoint (cleaner-offset-checkpoint) is where the last
// cleaning's offset map ended. The first uncleanable offset is the lowest
// of the active segment's base offset, the retention bound (the high
// watermark: a record may be replaced only by one that cannot be
// truncated away) and the base offset of the first segment holding a batch
// younger than min.compaction.lag.ms. A cleaning:
//
//  1. reads the dirty section into an offset map, key -> greatest offset
//     (stopping early, at a batch boundary, when the map is full);
//  2. rewrites every segment below the map's end, grouped into runs of at
//     most segment.bytes, keeping a record when a later record of its key
//     exists nowhere in the map, when its offset is past the map, and
//     dropping tombstones whose delete horizon has passed and records
//     without a key (which a compacted topic refuses, as Kafka's cleaner
//     drops them);
//  3. swaps each rewritten run in for the segments it replaces (see
//     swapIn), and moves the checkpoint to the map's end.
//
// Batches keep their headers: base offset, last offset delta, producer id,
// epoch and base sequence, leader epoch, attributes and max timestamp, so
// offsets never change and a consumer reading from the start sees a
// subsequence of what it would have seen, in order. A batch whose records
// all survive, and which needs no delete horizon, is copied byte for byte;
// otherwise only its records section is rebuilt (the surviving records'
// bytes, unchanged) and recompressed with the batch's codec, and its
// length, record count and CRC recomputed. Control batches are kept.
//
// A batch left without records is dropped, as Kafka's cleaner drops it,
// except the last batch of a producer id whose last write is younger than
// producer.id.expiration.ms (so its sequence checks survive a rebuild of
// the producer state): that one keeps its header with no records and codec
// none, as Kafka keeps it (BatchRetention.RETAIN_EMPTY), and reads return
// it like any batch. The last batch of a rewritten run is not dropped
// either, so that the run still ends where the next segment starts, which
// recovery checks (see checkBoundary), but it becomes a boundary marker:
// its header alone, without producer id, epoch and sequence. Kafka has no
// such batch, so reads never return one (see isBoundaryMarker): a client
// sees the log Kafka's cleaner would leave.
//
// Tombstones (KIP-534): a cleaning that keeps a tombstone it deduplicated
// sets the batch's delete-horizon attribute and moves the base timestamp
// to now + delete.retention.ms (rewriting the records' timestamp deltas so
// their timestamps do not change); a later cleaning drops the tombstone
// once that time has passed. A log whose earliest delete horizon passed is
// cleaned even below min.cleanable.dirty.ratio. The horizon is kept in
// memory only: after a restart, expired tombstones go at the next cleaning
// the dirty ratio triggers.
//
// Departures from Kafka: transactions are not implemented, so aborted
// transactional records are not removed and control batches are always
// kept; max.compaction.lag.ms is not implemented.

// CleanOptions say how Clean runs.
type CleanOptions struct {
	// Now is the time tombstone horizons and min.compaction.lag.ms are
	// measured against; the zero value means the log's clock.
	Now time.Time
	// DedupeBufferSize bounds the offset map's memory
	// (log.cleaner.dedupe.buffer.size divided among the cleaner threads;
	// 0 means 128 MiB). A map of 24-byte slots, three quarters full at most:
	// 128 MiB holds about 4 million keys.
	DedupeBufferSize int64
	// ProducerIDExpirationMs is producer.id.expiration.ms (0 means Kafka's
	// default, 86400000): the emptied last batch of a producer that wrote
	// within it keeps its header.
	ProducerIDExpirationMs int64
}

// CleanResult describes a cleaning.
type CleanResult struct {
	// FirstDirtyOffset and CleanedTo are the offsets the offset map
	// covered; CleanedTo is the new cleaner checkpoint.
	FirstDirtyOffset, CleanedTo int64
	Keys                        int // distinct keys in the offset map
	// SegmentsBefore segments, of BytesBefore bytes, were replaced by
	// SegmentsAfter segments of BytesAfter bytes.
	SegmentsBefore, SegmentsAfter int
	BytesBefore, BytesAfter       int64
	RecordsRemoved                int64 // tombstones and keyless records included
	TombstonesRemoved             int64
	KeylessRemoved                int64
	BatchesRemoved                int64
	Duration                      time.Duration
}

// CleanableInfo is a compacted log's state as the cleaner sees it.
type CleanableInfo struct {
	FirstDirtyOffset       int64
	FirstUncleanableOffset int64
	// CleanBytes are the bytes of the segments wholly below the first
	// dirty offset; DirtyBytes those of the other segments below the first
	// uncleanable offset. Ratio is DirtyBytes over both.
	CleanBytes, DirtyBytes int64
	Ratio                  float64
}

// errCleanAborted means a cleaning stopped because the log changed under
// it (a truncation, retention of the segments being cleaned, a close or
// deletion) or it was cancelled; nothing was lost and it may run again.
var errCleanAborted = errors.New("storage: cleaning aborted")

// errUncleanable wraps failures of the log's data (a batch that fails
// validation, records that do not parse or decompress, a batch holding
// more keys than the offset map): the cleaner skips the log until restart,
// as Kafka marks a partition uncleanable.
var errUncleanable = errors.New("storage: log cannot be cleaned")

// cleanerState is what a log keeps for the log cleaner between
// cleanings. It is owned by its Log.
type cleanerState struct {
	// running serializes cleanings; a cleaning holds it across its I/O,
	// and takes the log's appendMu under it only to swap a cleaned segment
	// in.
	running sync.Mutex
	// checkpoint is the offset cleaning has deduplicated up to;
	// truncations counts the log's truncations, so that a cleaning can
	// tell that the segments it rewrote changed under it (both written
	// under the log's appendMu).
	checkpoint, truncations atomic.Int64
	// deleteHorizon is the earliest delete horizon of the tombstones the
	// last cleaning kept; uncleanable is set when a cleaning failed on the
	// data itself.
	deleteHorizon atomic.Int64
	uncleanable   atomic.Bool
}

// cleanState is what one cleaning works from: a snapshot of its log.
type cleanState struct {
	CleanableInfo
	log         *Log
	segs        []*segment
	dir         string
	truncations int64
}

// CleanerCheckpoint returns the offset the log cleaner has deduplicated up
// to (0 before the first cleaning).
func (l *Log) CleanerCheckpoint() int64 { return l.cleaner.checkpoint.Load() }

// newCleanState takes a snapshot of l for a cleaning at now.
func newCleanState(l *Log, now time.Time) cleanState {
	cfg := l.cfg.Load()
	// The truncation count first: a truncation after it shows at the swap.
	c := cleanState{log: l, truncations: l.cleaner.truncations.Load()}
	l.mu.RLock()
	c.segs, c.dir = l.mu.segments, l.mu.dir
	l.mu.RUnlock()
	logStart, leo := l.logStartOffset.Load(), l.logEndOffset.Load()
	c.FirstDirtyOffset = l.cleaner.checkpoint.Load()
	if c.FirstDirtyOffset < logStart || c.FirstDirtyOffset > leo {
		c.FirstDirtyOffset = logStart
	}
	sealed := c.segs[:len(c.segs)-1]
	c.FirstUncleanableOffset = min(c.segs[len(c.segs)-1].baseOffset, l.retentionBound.Load())
	if f := l.txns.firstUnstable.Load(); f >= 0 {
		c.FirstUncleanableOffset = min(c.FirstUncleanableOffset, f)
	}
	if cfg.MinCompactionLagMs > 0 {
		for _, s := range sealed {
			if s.baseOffset >= c.FirstUncleanableOffset {
				break
			}
			if now.UnixMilli()-segmentTimestamp(s) < cfg.MinCompactionLagMs {
				c.FirstUncleanableOffset = s.baseOffset
				break
			}
		}
	}
	for i, s := range sealed {
		if s.baseOffset >= c.FirstUncleanableOffset {
			break
		}
		// A segment is dirty when some of its offsets are in the dirty
		// section; one the high watermark cuts is not, once cleaned up to
		// it, or every round would clean it again.
		if max(s.baseOffset, c.FirstDirtyOffset) < min(c.segs[i+1].baseOffset, c.FirstUncleanableOffset) {
			c.DirtyBytes += s.size.Load()
		} else {
			c.CleanBytes += s.size.Load()
		}
	}
	if total := c.CleanBytes + c.DirtyBytes; total > 0 {
		c.Ratio = float64(c.DirtyBytes) / float64(total)
	}
	return c
}

// segmentTimestamp is the segment's max timestamp, or its file's
// modification time when no batch has one (as retention and Kafka's
// largestTimestamp do).
func segmentTimestamp(s *segment) int64 {
	ts, _ := s.maxTimestampAndOffset()
	if ts < 0 {
		if st, err := s.log.Stat(); err == nil {
			ts = st.ModTime().UnixMilli()
		}
	}
	return ts
}

// Clean compacts the log once (see the comment at the top of this file):
// it deduplicates the dirty section and rewrites every segment below the
// end of the offset map, never the active one. It does nothing unless the
// log is compacted (Config.Compact), and runs regardless of the dirty
// ratio (the Manager's cleaner applies it).
//
// Clean may run concurrently with everything else: appends go on (only
// sealed segments are rewritten), and the append lock is held only to swap
// a rewritten segment in. Reads of replaced segments keep working for
// file.delete.delay.ms. Cleanings of one log are serialized. If the log is
// truncated, closed or deleted, or the segments being cleaned are deleted,
// Clean stops without harm and returns an error wrapping errCleanAborted.
// So it does when ctx is done before the first rewritten segment is
// swapped in (with ctx's error); after that, it finishes the cleaning and
// moves the checkpoint, so that what it deduplicated is never above the
// checkpoint it leaves: a cancelled cleaning takes at most the rewrite of
// the segments below the map's end.
func (l *Log) Clean(ctx context.Context, opts CleanOptions) (CleanResult, error) {
	l.cleaner.running.Lock()
	defer l.cleaner.running.Unlock()
	start := time.Now()
	cfg := l.cfg.Load()
	if !cfg.Compact {
		return CleanResult{}, nil
	}
	now := opts.Now
	if now.IsZero() {
		now = l.now()
	}
	if opts.DedupeBufferSize <= 0 {
		opts.DedupeBufferSize = 128 << 20
	}
	if opts.ProducerIDExpirationMs <= 0 {
		opts.ProducerIDExpirationMs = 86400000
	}
	c := newCleanState(l, now)
	if err := c.usable(); err != nil {
		return CleanResult{}, err
	}
	res := CleanResult{FirstDirtyOffset: c.FirstDirtyOffset, CleanedTo: c.FirstDirtyOffset}

	offsets := newOffsetMap(opts.DedupeBufferSize, max(c.FirstUncleanableOffset-c.FirstDirtyOffset, 0))
	mapEnd, err := c.buildOffsetMap(ctx, offsets)
	if err != nil {
		return res, c.failed(err)
	}
	res.Keys, res.CleanedTo = offsets.size(), mapEnd

	// Rewrite the sealed segments that start below the map's end.
	n := 0
	for n < len(c.segs)-1 && c.segs[n].baseOffset < mapEnd {
		n++
	}
	f := &batchFilter{log: l, offsets: offsets, mapEnd: mapEnd, now: now.UnixMilli(),
		deleteRetentionMs: cfg.DeleteRetentionMs, producerExpirationMs: opts.ProducerIDExpirationMs,
		earliestHorizon: math.MaxInt64}
	for _, group := range groupSegments(c.segs, n, cfg) {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("%w: %w", errCleanAborted, err)
		}
		if err := c.cleanGroup(ctx, group, f, cfg, now, &res); err != nil {
			return res, c.failed(err)
		}
		if res.SegmentsAfter > 0 {
			// A run swapped in was deduplicated against the whole offset
			// map, up to mapEnd: stopping now would leave records above
			// the checkpoint removed, and the runs still to come, below
			// mapEnd, never deduplicated against the keys the map held.
			// From the first swap on, a cancellation waits for the end.
			ctx = context.WithoutCancel(ctx)
		}
	}
	res.RecordsRemoved, res.TombstonesRemoved = f.recordsRemoved, f.tombstonesRemoved
	res.KeylessRemoved, res.BatchesRemoved = f.keylessRemoved, f.batchesRemoved

	// The checkpoint moves only if no truncation could have moved the log
	// end below it meanwhile (TruncateTo lowers it under appendMu).
	l.appendMu.Lock()
	if l.cleaner.truncations.Load() == c.truncations {
		l.cleaner.checkpoint.Store(mapEnd)
	}
	l.appendMu.Unlock()
	l.cleaner.deleteHorizon.Store(f.earliestHorizon)
	res.Duration = time.Since(start)
	l.logger.Info("cleaned log", "segments", res.SegmentsBefore, "new_segments", res.SegmentsAfter,
		"bytes_before", res.BytesBefore, "bytes_after", res.BytesAfter, "keys", res.Keys,
		"records_removed", res.RecordsRemoved, "tombstones_removed", res.TombstonesRemoved,
		"first_dirty_offset", res.FirstDirtyOffset, "cleaned_to", res.CleanedTo,
		"duration", res.Duration.Round(time.Microsecond))
	if res.KeylessRemoved > 0 {
		l.logger.Warn("cleaning removed records without a key", "records", res.KeylessRemoved)
	}
	return res, nil
}

// usable returns why the log cannot be cleaned, or nil.
func (c *cleanState) usable() error {
	l := c.log
	if err := l.Offline(); err != nil {
		return err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed || l.mu.deleted {
		return fmt.Errorf("%w: %w: %s", errCleanAborted, ErrClosed, l)
	}
	return nil
}

// failed marks the log uncleanable when err is about its data. A
// failure of a log closed, deleted or taken offline meanwhile is an abort.
func (c *cleanState) failed(err error) error {
	l := c.log
	if errors.Is(err, errCleanAborted) {
		return err
	}
	if usable := c.usable(); usable != nil {
		return fmt.Errorf("%w: %w (%w)", errCleanAborted, usable, err)
	}
	if errors.Is(err, errUncleanable) && l.cleaner.uncleanable.CompareAndSwap(false, true) {
		l.logger.Error("log cannot be cleaned; skipping it until restart", "err", err)
	}
	return err
}

// buildOffsetMap reads the dirty section into m: for every record with a
// key and an offset in [first dirty, first uncleanable), the greatest
// offset of its key. It returns the map's end: every such record below it
// is in the map. It stops at a batch boundary when the map is full.
func (c *cleanState) buildOffsetMap(ctx context.Context, m *offsetMap) (int64, error) {
	l := c.log
	from, to := c.FirstDirtyOffset, c.FirstUncleanableOffset
	if from >= to {
		return from, nil
	}
	mapEnd := from
	var buf []byte
	for i := floorSegment(c.segs, from); i < len(c.segs)-1 && c.segs[i].baseOffset < to; i++ {
		s := c.segs[i]
		_, pos := s.offsetIdx.lookup(from)
		it := batchIter{f: s.log, pos: pos, end: s.size.Load(), buf: buf}
		for {
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("%w: %w", errCleanAborted, err)
			}
			h, batch, _, err := it.next()
			if err != nil {
				return 0, fmt.Errorf("segment %d: %w", s.baseOffset, err)
			}
			if batch == nil {
				break
			}
			if h.LastOffset() < from {
				continue
			}
			if h.BaseOffset >= to {
				return to, nil
			}
			if h.IsControl() || h.IsTransactional() && l.txns.isAborted(h.ProducerID, h.BaseOffset) {
				// Markers hold no keys; an aborted transaction's
				// records shadow nothing (and are removed).
				mapEnd = min(h.NextOffset(), to)
				continue
			}
			if m.free() < int(h.NumRecords) {
				if mapEnd == from && m.size() == 0 {
					return 0, fmt.Errorf("%w: a batch of %d records at %d does not fit the offset map of %d keys (log.cleaner.dedupe.buffer.size)",
						errUncleanable, h.NumRecords, h.BaseOffset, m.free())
				}
				return max(mapEnd, from), nil
			}
			sec, err := recordsSection(l.budget, &h, batch)
			if err != nil {
				return 0, err
			}
			err = record.ScanRecords(sec, h.NumRecords, func(r *record.RawRecord) error {
				if off := h.BaseOffset + int64(r.OffsetDelta); r.Key != nil && off >= from && off < to {
					m.put(r.Key, off)
				}
				return nil
			})
			if err != nil {
				return 0, fmt.Errorf("%w: batch at %d: %w", errUncleanable, h.BaseOffset, err)
			}
			mapEnd = min(h.NextOffset(), to)
		}
		buf = it.buf
	}
	return to, nil
}

// recordsSection reads the batch's records as a stored batch
// (record.ScanStored) and returns its records section, decompressed when
// compressed, within the log's decompression budget. A batch that fails is
// errUncleanable, naming its offset: the cleaner reports it and leaves the
// log alone until a restart, rather than retry it.
func recordsSection(budget *record.Budget, h *record.Header, batch []byte) ([]byte, error) {
	batch = batch[:h.Size()]
	size, err := record.ScanStored(batch, h, budget, nil)
	if err == nil && h.Codec() != record.CodecNone {
		batch, err = record.Decompress(batch, size, budget)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: batch at offset %d: %w", errUncleanable, h.BaseOffset, err)
	}
	return batch[record.HeaderSize:], nil
}

// groupSegments splits segs[:n] into runs to be rewritten as one segment
// each, as Kafka's groupSegmentsBySize does: at most segment.bytes and
// segment.index.bytes of indexes, and offsets a segment can index. segs[n]
// must exist (the run's end is the next segment's base offset).
func groupSegments(segs []*segment, n int, cfg *Config) [][]*segment {
	maxOffsetEntries := cfg.SegmentIndexBytes / offsetIndexEntrySize
	maxTimeEntries := cfg.SegmentIndexBytes/timeIndexEntrySize - 1
	var groups [][]*segment
	for i := 0; i < n; {
		first := segs[i]
		size := first.size.Load()
		offsetEntries, timeEntries := first.offsetIdx.entryCount(), first.timeIdx.entryCount()
		j := i + 1
		for ; j < n; j++ {
			s := segs[j]
			size += s.size.Load()
			offsetEntries += s.offsetIdx.entryCount()
			timeEntries += s.timeIdx.entryCount()
			if size > cfg.SegmentBytes || offsetEntries > maxOffsetEntries || timeEntries > maxTimeEntries ||
				segs[j+1].baseOffset-1-first.baseOffset > math.MaxInt32 {
				break
			}
		}
		groups = append(groups, segs[i:j])
		i = j
	}
	return groups
}

// entryCount returns the number of entries.
func (ix *indexFile) entryCount() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.entries
}

// batchFilter decides, batch by batch, what a cleaning keeps.
type batchFilter struct {
	log                  *Log
	offsets              *offsetMap
	mapEnd               int64
	now                  int64 // ms
	deleteRetentionMs    int64
	producerExpirationMs int64

	// producerLast is each producer id's last batch's last offset in the
	// log, read on first need.
	producerLast map[int64]int64
	producerErr  error

	earliestHorizon                                                   int64
	recordsRemoved, tombstonesRemoved, keylessRemoved, batchesRemoved int64

	// Scratch, reused from batch to batch.
	section, compressed, out []byte
	keep                     []bool
	window                   []byte // for batchIter
}

// filter returns what to write for the batch: batch itself when it is kept
// as it is, a rebuilt batch (valid until the next call), or nil to drop
// it. last says it is the last batch of the run being rewritten.
func (f *batchFilter) filter(h *record.Header, batch []byte, last bool) ([]byte, error) {
	if h.IsControl() {
		return batch, nil
	}
	sec, err := recordsSection(f.log.budget, h, batch)
	if err != nil {
		return nil, err
	}
	f.keep = f.keep[:0]
	kept, tombstones := int32(0), false
	err = record.ScanRecords(sec, h.NumRecords, func(r *record.RawRecord) error {
		keep, tombstone := f.retain(h, r)
		f.keep = append(f.keep, keep)
		if keep {
			kept++
			tombstones = tombstones || tombstone
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: batch at %d: %w", errUncleanable, h.BaseOffset, err)
	}
	setHorizon := tombstones && !h.HasDeleteHorizon()
	if tombstones {
		horizon := h.BaseTimestamp
		if setHorizon {
			horizon = f.now + f.deleteRetentionMs
		}
		f.earliestHorizon = min(f.earliestHorizon, horizon)
	}
	f.recordsRemoved += int64(h.NumRecords - kept)
	keepProducer := false
	if kept == 0 {
		keepProducer = f.keepEmpty(h)
		if !last && !keepProducer {
			f.batchesRemoved++
			return nil, nil
		}
		if h.NumRecords == 0 && (keepProducer || isBoundaryMarker(h)) {
			return batch, nil // emptied by an earlier cleaning
		}
	} else if kept == h.NumRecords && !setHorizon {
		return batch, nil
	}
	nh := *h
	nh.NumRecords = kept
	if kept == 0 {
		// Kafka's empty batch: the header alone, uncompressed; without
		// records, no delete horizon. A boundary marker also loses its
		// producer, which a later batch of the producer's (or its
		// expiry) makes useless.
		nh.Attributes &^= record.CodecMask | record.AttrDeleteHorizon
		if h.HasDeleteHorizon() {
			nh.BaseTimestamp = h.MaxTimestamp
		}
		if !keepProducer {
			nh.Attributes &^= record.AttrTransactional
			nh.ProducerID, nh.ProducerEpoch, nh.BaseSequence = -1, -1, -1
		}
		f.out = record.AppendBatch(f.out[:0], &nh, nil)
		return f.out, nil
	}
	if setHorizon {
		nh.Attributes |= record.AttrDeleteHorizon
		nh.BaseTimestamp = f.now + f.deleteRetentionMs
	}
	f.section = f.section[:0]
	i := 0
	record.ScanRecords(sec, h.NumRecords, func(r *record.RawRecord) error {
		if f.keep[i] {
			if setHorizon {
				f.section = record.AppendRetimed(f.section, r, h.BaseTimestamp+r.TimestampDelta-nh.BaseTimestamp)
			} else {
				f.section = append(f.section, r.Bytes...)
			}
		}
		i++
		return nil
	})
	if f.compressed, err = record.Compress(f.compressed[:0], h.Codec(), f.section); err != nil {
		return nil, fmt.Errorf("storage: recompressing batch at %d: %w", h.BaseOffset, err)
	}
	f.out = record.AppendBatch(f.out[:0], &nh, f.compressed)
	return f.out, nil
}

// retain decides one record: it is kept when no later record of its key
// is in the offset map (or it lies past the map), unless it is a tombstone
// whose batch's delete horizon has passed or it has no key. tombstone
// reports a kept tombstone that the map covered, which the batch's delete
// horizon then applies to.
func (f *batchFilter) retain(h *record.Header, r *record.RawRecord) (keep, tombstone bool) {
	off := h.BaseOffset + int64(r.OffsetDelta)
	if off >= f.mapEnd {
		return true, false
	}
	if h.IsTransactional() && f.log.txns.isAborted(h.ProducerID, h.BaseOffset) {
		return false, false
	}
	if r.Key == nil {
		f.keylessRemoved++
		return false, false
	}
	if latest, ok := f.offsets.get(r.Key); ok && off < latest {
		return false, false
	}
	if r.Value == nil {
		if h.HasDeleteHorizon() && f.now >= h.BaseTimestamp {
			f.tombstonesRemoved++
			return false, false
		}
		return true, true
	}
	return true, false
}

// keepEmpty reports whether an emptied batch is the last of a producer
// that has not expired, whose header must stay.
func (f *batchFilter) keepEmpty(h *record.Header) bool {
	if !h.HasProducerID() || f.now-h.MaxTimestamp >= f.producerExpirationMs {
		return false
	}
	if f.producerLast == nil && f.producerErr == nil {
		f.producerLast = map[int64]int64{}
		f.producerErr = f.log.ScanBatchHeaders(0, func(bh record.Header, _ int64) bool {
			if bh.HasProducerID() {
				f.producerLast[bh.ProducerID] = bh.LastOffset()
			}
			return true
		})
	}
	if f.producerErr != nil {
		return true // cannot tell: keep it, which costs only a header
	}
	return f.producerLast[h.ProducerID] == h.LastOffset()
}

// batchIter reads the whole batches of a segment's log in order, through
// a window.
type batchIter struct {
	f        vfs.File
	pos, end int64
	buf      []byte // the window; may be shared by iterators used in turn
	start    int64  // file position of buf[0]
	n        int
	big      []byte // a batch larger than the window
}

// next returns the batch at the iterator's position and its position, and
// advances; batch is nil at the end. The batch is valid until the next
// call. A batch that does not parse or ends past the log is errUncleanable.
func (it *batchIter) next() (h record.Header, batch []byte, pos int64, err error) {
	pos = it.pos
	if pos >= it.end {
		return h, nil, pos, nil
	}
	if it.end-pos < record.HeaderSize {
		return h, nil, pos, fmt.Errorf("%w: %d bytes at %d, less than a batch header", errUncleanable, it.end-pos, pos)
	}
	hb, err := it.window(pos, record.HeaderSize)
	if err != nil {
		return h, nil, pos, err
	}
	if h, err = record.ParseHeader(hb); err != nil {
		return h, nil, pos, fmt.Errorf("%w: batch at %d: %w", errUncleanable, pos, err)
	}
	size := int64(h.Size())
	if pos+size > it.end {
		return h, nil, pos, fmt.Errorf("%w: batch of %d bytes at %d past the end %d", errUncleanable, size, pos, it.end)
	}
	if size <= cleanerWindow {
		if batch, err = it.window(pos, int(size)); err != nil {
			return h, nil, pos, err
		}
	} else {
		if int64(cap(it.big)) < size {
			it.big = make([]byte, size)
		}
		it.big = it.big[:size]
		if _, err := it.f.ReadAt(it.big, pos); err != nil {
			return h, nil, pos, err
		}
		batch = it.big
	}
	it.pos = pos + size
	return h, batch, pos, nil
}

// cleanerWindow is how much of a segment a cleaning reads at a time.
const cleanerWindow = 1 << 20

// window returns [pos, pos+n) from the window, refilling it at pos; n is
// at most cleanerWindow and pos+n at most the end. The window grows to
// cleanerWindow as the segments read need it.
func (it *batchIter) window(pos int64, n int) ([]byte, error) {
	if pos >= it.start && pos+int64(n) <= it.start+int64(it.n) {
		return it.buf[pos-it.start : pos-it.start+int64(n)], nil
	}
	want := int(min(cleanerWindow, it.end-pos))
	if cap(it.buf) < want {
		it.buf = make([]byte, want)
	}
	it.buf = it.buf[:cap(it.buf)]
	got, err := it.f.ReadAt(it.buf[:want], pos)
	if got < n {
		it.n = 0
		if err == nil || isIOEOF(err) {
			return nil, fmt.Errorf("%w: the log ends at %d", errUncleanable, pos+int64(got))
		}
		return nil, err
	}
	it.start, it.n = pos, got
	return it.buf[:n], nil
}
