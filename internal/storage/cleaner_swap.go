package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// Replacing segments with a cleaned one is Kafka's swap, so that a crash at
// any step leaves either the old segments or the new one, never both or
// neither. For a run of segments whose first is based at B:
//
//  1. the cleaned segment is written as B.log.cleaned, B.index.cleaned and
//     B.timeindex.cleaned, and synced;
//  2. each is renamed to its .swap name, the log last, and the directory
//     synced: B.log.swap existing is the commit point;
//  3. under the append and flush locks, the segment list is changed and
//     the old segments are retired (renamed *.deleted, closed and removed
//     after file.delete.delay.ms, so reads already under way finish);
//  4. the .swap files take their final names, the log last, and the
//     directory is synced.
//
// Opening the log (finishSwaps) removes every .cleaned file; for a
// B.log.swap, it removes every segment file based in [B, the end of the
// swap) and renames the .swap files into place; index .swap files without
// their log's are removed. A swapped-in segment is then recovered in full.

// cleanGroup rewrites a run of sealed segments as one and swaps it in. A
// run that would come out unchanged (one segment, every batch kept as it
// was) is left alone.
func (c *cleanState) cleanGroup(ctx context.Context, group []*segment, f *batchFilter, cfg *Config, now time.Time, res *CleanResult) error {
	l := c.log
	var before int64
	for _, s := range group {
		before += s.size.Load()
	}
	if before == 0 {
		return nil
	}
	base := group[0].baseOffset
	names := (&segment{baseOffset: base}).paths(c.dir)
	discard := func(ns *segment) {
		if ns != nil {
			ns.close()
		}
		for _, p := range names {
			for _, suffix := range []string{cleanedSuffix, swapSuffix} {
				if err := l.fs.Remove(p + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
					l.logger.Warn("removing an abandoned cleaned segment file", "path", p+suffix, "err", err)
				}
			}
		}
	}
	ns, err := createCleanedSegment(l.fs, names, base, cfg, now)
	if err != nil {
		discard(nil)
		return fmt.Errorf("storage: creating cleaned segment %d: %w", base, err)
	}
	w := cleanWriter{f: ns.log, buf: make([]byte, 0, min(cleanerWindow, before))}
	changed := len(group) > 1
	for gi, s := range group {
		end := s.size.Load()
		it := batchIter{f: s.log, end: end, buf: f.window}
		for {
			if err := ctx.Err(); err != nil {
				discard(ns)
				return fmt.Errorf("%w: %w", errCleanAborted, err)
			}
			h, batch, pos, err := it.next()
			if err == nil && batch != nil {
				_, err = record.Validate(batch, 0)
				if err != nil {
					err = fmt.Errorf("%w: batch at %d: %w", errUncleanable, pos, err)
				}
			}
			if err != nil {
				discard(ns)
				return fmt.Errorf("segment %d: %w", s.baseOffset, err)
			}
			if batch == nil {
				f.window = it.buf
				break
			}
			out, err := f.filter(&h, batch, gi == len(group)-1 && pos+int64(h.Size()) == end)
			if err != nil {
				discard(ns)
				return err
			}
			if out == nil {
				changed = true
				continue
			}
			oh := h
			if len(out) != len(batch) || &out[0] != &batch[0] {
				changed = true
				oh, _ = record.ParseHeader(out)
			}
			ns.indexBatch(&oh, w.pos(), cfg.IndexIntervalBytes)
			if err := w.write(out); err != nil {
				discard(ns)
				return err
			}
		}
	}
	if err := w.flush(); err != nil {
		discard(ns)
		return err
	}
	if !changed {
		discard(ns)
		return nil
	}
	ns.size.Store(w.written)
	if err := ns.finishCleaned(); err != nil {
		discard(ns)
		return fmt.Errorf("storage: syncing cleaned segment %d: %w", base, err)
	}
	if err := c.swapIn(group, ns, names, func() { discard(ns) }); err != nil {
		return err
	}
	res.SegmentsBefore += len(group)
	res.SegmentsAfter++
	res.BytesBefore += before
	res.BytesAfter += w.written
	return nil
}

// createCleanedSegment creates the .cleaned files of a segment being
// written by the cleaner. Its indexes live in memory until finishCleaned
// writes them.
func createCleanedSegment(fs vfs.FS, names [3]string, base int64, cfg *Config, now time.Time) (*segment, error) {
	s := &segment{baseOffset: base, created: now, maxTimestamp: -1, offsetOfMaxTimestamp: base,
		nextOffset: base, rollingBasedTimestamp: -1, rollingLoaded: true}
	var err error
	if s.log, err = fs.Create(names[0] + cleanedSuffix); err != nil {
		return nil, err
	}
	oi, err := createIndexFile(fs, names[1]+cleanedSuffix, offsetIndexEntrySize, cfg.SegmentIndexBytes, false)
	if err != nil {
		s.log.Close()
		return nil, err
	}
	s.offsetIdx = &offsetIndex{indexFile: oi, baseOffset: base}
	ti, err := createIndexFile(fs, names[2]+cleanedSuffix, timeIndexEntrySize, cfg.SegmentIndexBytes, false)
	if err != nil {
		s.log.Close()
		s.offsetIdx.close()
		return nil, err
	}
	s.timeIdx = &timeIndex{indexFile: ti, baseOffset: base}
	return s, nil
}

// finishCleaned writes the final time-index entry and the indexes, and
// syncs all three files.
func (s *segment) finishCleaned() error {
	if err := s.becomeInactive(); err != nil {
		return err
	}
	s.dirtyIndex.Store(false)
	if err := s.log.Sync(); err != nil {
		return err
	}
	if err := s.offsetIdx.flush(); err != nil {
		return err
	}
	return s.timeIdx.flush()
}

// swapIn replaces group with ns, whose files are complete and synced under
// their .cleaned names (steps 2 to 4 above). discard removes ns's files
// when the swap does not happen.
func (c *cleanState) swapIn(group []*segment, ns *segment, names [3]string, discard func()) error {
	l := c.log
	for _, i := range [...]int{1, 2, 0} {
		if err := l.fs.Rename(names[i]+cleanedSuffix, names[i]+swapSuffix); err != nil {
			discard()
			return fmt.Errorf("storage: committing cleaned segment %d: %w", ns.baseOffset, err)
		}
	}
	if err := vfs.SyncDir(l.fs, c.dir); err != nil {
		discard()
		return fmt.Errorf("storage: committing cleaned segment %d: %w", ns.baseOffset, err)
	}

	l.appendMu.Lock()
	i, ok := c.liveGroupLocked(group)
	if !ok {
		l.appendMu.Unlock()
		discard()
		return fmt.Errorf("%w: the log changed while segment %d was cleaned", errCleanAborted, ns.baseOffset)
	}
	l.commit.syncMu.Lock()
	l.mu.Lock()
	segs := l.mu.segments
	next := make([]*segment, 0, len(segs)-len(group)+1)
	next = append(append(append(next, segs[:i]...), ns), segs[i+len(group):]...)
	l.mu.segments = next
	l.mu.Unlock()
	err := l.deletes.retire(group)
	for _, j := range [...]int{1, 2, 0} {
		if err != nil {
			break
		}
		if e := l.fs.Rename(names[j]+swapSuffix, names[j]); e != nil {
			err = l.fail("installing cleaned segment "+segmentName(ns.baseOffset), e)
		}
	}
	l.commit.syncMu.Unlock()
	l.appendMu.Unlock()
	if err != nil {
		return err
	}
	if err := vfs.SyncDir(l.fs, c.dir); err != nil {
		return l.fail("syncing directory", err)
	}
	return nil
}

// liveGroupLocked returns where group starts in the segment list, and
// false when the cleaning must not swap: the log changed since c was taken
// (truncated, closed, deleted, moved, or the segments were deleted), or the
// run now reaches the active segment. l.appendMu must be held.
func (c *cleanState) liveGroupLocked(group []*segment) (int, bool) {
	l := c.log
	if c.usable() != nil || l.cleaner.truncations.Load() != c.truncations {
		return -1, false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.dir != c.dir {
		return -1, false
	}
	segs := l.mu.segments
	i := slices.Index(segs, group[0])
	if i < 0 || i+len(group) >= len(segs) {
		return -1, false
	}
	for k, s := range group {
		if segs[i+k] != s {
			return -1, false
		}
	}
	return i, true
}

// cleanWriter writes a cleaned segment's log through a buffer.
type cleanWriter struct {
	f       vfs.File
	buf     []byte
	written int64 // bytes in the file
}

func (w *cleanWriter) pos() int64 { return w.written + int64(len(w.buf)) }

func (w *cleanWriter) write(b []byte) error {
	if len(w.buf)+len(b) > cap(w.buf) {
		if err := w.flush(); err != nil {
			return err
		}
	}
	if len(b) > cap(w.buf) {
		if _, err := w.f.WriteAt(b, w.written); err != nil {
			return err
		}
		w.written += int64(len(b))
		return nil
	}
	w.buf = append(w.buf, b...)
	return nil
}

func (w *cleanWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.f.WriteAt(w.buf, w.written); err != nil {
		return err
	}
	w.written += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// finishSwaps completes or rolls back the swaps a crash interrupted (see
// the top of this file), before the log's segments are opened; names is
// the directory's listing. It returns the base offsets of the segments it
// swapped in, which must be recovered, and the listing after its changes.
// dirChanged says the directory changed (a flush must sync it). Nothing
// else has the log yet.
func finishSwaps(fs vfs.FS, dir string, logger *slog.Logger, names []string) (swapped map[int64]bool, after []string, dirChanged bool, err error) {
	changed := false
	var swaps []int64
	for _, name := range names {
		if strings.HasSuffix(name, cleanedSuffix) {
			if err := fs.Remove(filepath.Join(dir, name)); err != nil {
				return nil, nil, false, err
			}
			changed = true
			continue
		}
		if stem, ok := strings.CutSuffix(name, swapSuffix); ok {
			if b, ok := parseOffsetName(stem, logSuffix); ok {
				swaps = append(swaps, b)
			}
		}
	}
	done := map[int64]bool{}
	for _, b := range swaps {
		stem := filepath.Join(dir, segmentName(b))
		end, err := swapEnd(fs, stem+logSuffix+swapSuffix)
		if err != nil {
			return nil, nil, false, err
		}
		changed = true
		if end < 0 {
			// Synced before its rename, so only a disk's corruption gets
			// here: keep what the old segments left.
			logger.Warn("removing a cleaned segment with no valid batch", "segment", b)
			continue // its .swap files go below
		}
		for _, name := range names {
			for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				if o, ok := parseOffsetName(name, suffix); ok && o >= b && o < end {
					if err := fs.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
						return nil, nil, false, err
					}
				}
			}
		}
		for _, suffix := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
			if vfs.Exists(fs, stem+suffix+swapSuffix) {
				if err := fs.Rename(stem+suffix+swapSuffix, stem+suffix); err != nil {
					return nil, nil, false, err
				}
			}
		}
		logger.Info("completed an interrupted cleaning", "segment", b, "end_offset", end)
		done[b] = true
	}
	if !changed && !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, swapSuffix) }) {
		return done, names, false, nil
	}
	names, err = fs.List(dir)
	if err != nil {
		return nil, nil, false, err
	}
	for _, name := range names {
		if strings.HasSuffix(name, swapSuffix) {
			if err := fs.Remove(filepath.Join(dir, name)); err != nil {
				return nil, nil, false, err
			}
			changed = true
		}
	}
	if changed {
		if names, err = fs.List(dir); err != nil {
			return nil, nil, false, err
		}
	}
	return done, names, changed, nil
}

// swapEnd returns the offset after the last valid batch of a .swap log, or
// -1 when it has none.
func swapEnd(fs vfs.FS, path string) (int64, error) {
	f, err := fs.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	r := batchReader{f: f, size: size, buf: make([]byte, min(recoveryWindow, size))}
	end := int64(-1)
	for pos := int64(0); pos < size; {
		h, err := r.validate(pos)
		if err != nil {
			var re *readError
			if errors.As(err, &re) {
				return 0, err
			}
			break
		}
		end = h.NextOffset()
		pos += int64(h.Size())
	}
	return end, nil
}
