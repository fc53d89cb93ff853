package storage

import (
	"log/slog"

	"github.com/strata-io/strata/internal/record"
)

// OffsetForTimestamp returns the first offset (at or after the log start)
// whose record timestamp is >= ts, with that timestamp: ListOffsets by time,
// with Kafka's semantics. It picks the first segment whose max timestamp
// reaches ts, starts at its time-index entry at or below ts, scans batch
// headers to the first batch whose max timestamp reaches ts, and searches
// that batch's records (streaming them, decompressed, if needed). ok is false when no
// record has such a timestamp.
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, timestamp int64, ok bool) {
	leo := l.logEndOffset.Load()
	l.mu.RLock()
	segs := l.mu.segments
	l.mu.RUnlock()
	logStart := l.logStartOffset.Load()
	sc := scannerPool.Get().(*headerScanner)
	defer scannerPool.Put(sc)
	sc.n = 0
	for _, s := range segs {
		if maxTS, _ := s.maxTimestampAndOffset(); maxTS < ts {
			continue
		}
		_, indexed := s.timeIdx.lookup(ts)
		_, pos := s.offsetIdx.lookup(max(indexed, logStart))
		var batchPos int64
		var h record.Header
		found := false
		sc.scan(s.log, pos, s.size.Load(), func(hh *record.Header, p int64) bool {
			if hh.BaseOffset >= leo {
				return false
			}
			if hh.MaxTimestamp >= ts && hh.LastOffset() >= logStart {
				batchPos, h, found = p, *hh, true
				return false
			}
			return true
		})
		if !found {
			continue
		}
		if off, rts, ok := s.recordAtOrAfter(batchPos, &h, ts, logStart, false, l.budget, l.logger); ok {
			return off, rts, true
		}
	}
	return -1, -1, false
}

// MaxTimestamp returns the greatest timestamp in the log and the offset of
// the first record carrying it (ListOffsets -3, KIP-734), or (-1, -1) for a
// log without timestamps.
func (l *Log) MaxTimestamp() (ts int64, offset int64) {
	l.mu.RLock()
	segs := l.mu.segments
	l.mu.RUnlock()
	var best *segment
	bestTS, batchLast := int64(-1), int64(-1)
	for _, s := range segs {
		if t, o := s.maxTimestampAndOffset(); t > bestTS {
			best, bestTS, batchLast = s, t, o
		}
	}
	if best == nil {
		return -1, -1
	}
	sc := scannerPool.Get().(*headerScanner)
	defer scannerPool.Put(sc)
	sc.n = 0
	pos, h, found, err := best.find(sc, batchLast, best.size.Load())
	if err != nil || !found {
		return bestTS, batchLast
	}
	if off, _, ok := best.recordAtOrAfter(pos, &h, bestTS, l.logStartOffset.Load(), true, l.budget, l.logger); ok {
		return bestTS, off
	}
	return bestTS, batchLast
}

// recordAtOrAfter returns the first record of the batch at pos whose
// timestamp is >= ts (== ts when exact) and offset >= minOffset, streaming
// a compressed batch through a bounded decoder. When the records cannot be
// read (the batch fails record.ScanStored: corruption an older version or a
// bug let in), it reports the batch with its offset and answers for the
// whole batch, as Kafka answers for a batch it does not open. budget and
// logger are the log's.
func (s *segment) recordAtOrAfter(pos int64, h *record.Header, ts, minOffset int64, exact bool,
	budget *record.Budget, logger *slog.Logger) (int64, int64, bool) {
	matches := func(t int64) bool { return t == ts || !exact && t > ts }
	if h.Attributes&record.TimestampTypeLogAppend != 0 {
		// Every record carries the batch's timestamp.
		return max(h.BaseOffset, minOffset), h.MaxTimestamp, matches(h.MaxTimestamp)
	}
	batch, err := FileRegion{s.log, pos, int64(h.Size())}.ReadAll(nil)
	if err == nil {
		var off, rts int64
		found := false
		_, err = record.ScanStored(batch, h, budget, func(offset, t int64) bool {
			if offset >= minOffset && matches(t) {
				off, rts, found = offset, t, true
				return false
			}
			return true
		})
		if found {
			return off, rts, true
		}
		if err == nil {
			return -1, -1, false
		}
	}
	logger.Warn("cannot read the records of a batch for a timestamp lookup; answering for the whole batch",
		"base_offset", h.BaseOffset, "last_offset", h.LastOffset(), "err", err)
	if exact {
		return h.LastOffset(), h.MaxTimestamp, true
	}
	return max(h.BaseOffset, minOffset), h.MaxTimestamp, true
}
