package storage

import (
	"fmt"
	"strconv"
)

// EpochEntry is one leader epoch and the first offset written in it.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// epochCache is Kafka's LeaderEpochFileCache: (epoch, start offset) pairs,
// both increasing. Guarded by Log.mu; its file is written by mutators under
// Log.appendMu.
type epochCache struct {
	entries []EpochEntry
}

// assign records that epoch starts at startOffset. As Kafka does, it is a
// no-op when epoch is already the latest with an earlier or equal start,
// and otherwise first removes every entry with an epoch or start offset not
// below the new one, so the cache stays monotonic. It reports a change.
func (c *epochCache) assign(epoch int32, startOffset int64) bool {
	if n := len(c.entries); n > 0 {
		last := c.entries[n-1]
		if last.Epoch == epoch && startOffset >= last.StartOffset {
			return false
		}
	}
	n := len(c.entries)
	for n > 0 && (c.entries[n-1].Epoch >= epoch || c.entries[n-1].StartOffset >= startOffset) {
		n--
	}
	c.entries = append(c.entries[:n], EpochEntry{epoch, startOffset})
	return true
}

// truncateFromEnd removes the entries starting at or after endOffset.
func (c *epochCache) truncateFromEnd(endOffset int64) bool {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= endOffset {
		n--
	}
	changed := n != len(c.entries)
	c.entries = c.entries[:n]
	return changed
}

// truncateFromStart removes the entries starting at or before startOffset,
// keeping the last of them moved to startOffset (Kafka's rule: the epoch
// still covers the new log start).
func (c *epochCache) truncateFromStart(startOffset int64) bool {
	i := 0
	for i < len(c.entries) && c.entries[i].StartOffset <= startOffset {
		i++
	}
	if i == 0 {
		return false
	}
	kept := EpochEntry{c.entries[i-1].Epoch, startOffset}
	if i == 1 && c.entries[0] == kept {
		return false
	}
	rest := append([]EpochEntry{kept}, c.entries[i:]...)
	c.entries = rest
	return true
}

func (c *epochCache) latest() (int32, bool) {
	if len(c.entries) == 0 {
		return -1, false
	}
	return c.entries[len(c.entries)-1].Epoch, true
}

// endOffsetFor answers OffsetForLeaderEpoch (KIP-101/279), as Kafka's
// LeaderEpochFileCache.endOffsetFor does: for the latest epoch, the log end
// offset; otherwise the largest known epoch <= requested and the start
// offset of the first epoch above the requested one; when the requested
// epoch is below every known epoch, the requested epoch and the first
// entry's start offset; (-1, -1) when the epoch is -1 or above every known
// epoch.
func (c *epochCache) endOffsetFor(requested int32, logEndOffset int64) (int32, int64) {
	if requested < 0 {
		return -1, -1
	}
	if latest, ok := c.latest(); ok && latest == requested {
		return requested, logEndOffset
	}
	higher := -1
	for i, e := range c.entries {
		if e.Epoch > requested {
			higher = i
			break
		}
	}
	if higher < 0 {
		return -1, -1
	}
	if higher == 0 {
		return requested, c.entries[0].StartOffset
	}
	return c.entries[higher-1].Epoch, c.entries[higher].StartOffset
}

func (c *epochCache) encode() []byte {
	lines := make([]string, len(c.entries))
	for i, e := range c.entries {
		lines[i] = fmt.Sprintf("%d %d", e.Epoch, e.StartOffset)
	}
	return encodeCheckpoint(lines)
}

func decodeEpochCheckpoint(name string, data []byte) ([]EpochEntry, error) {
	lines, err := decodeCheckpoint(name, data, 2)
	if err != nil {
		return nil, err
	}
	out := make([]EpochEntry, 0, len(lines))
	for _, f := range lines {
		e, err1 := strconv.ParseInt(f[0], 10, 32)
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || e < 0 || o < 0 {
			return nil, fmt.Errorf("storage: %s: malformed line %q %q", name, f[0], f[1])
		}
		if n := len(out); n > 0 && (int32(e) <= out[n-1].Epoch || o < out[n-1].StartOffset) {
			return nil, fmt.Errorf("storage: %s: entries not increasing at epoch %d", name, e)
		}
		out = append(out, EpochEntry{int32(e), o})
	}
	return out, nil
}
