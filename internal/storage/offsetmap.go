package storage

import (
	"hash/maphash"
	"math/bits"
)

// offsetMapSlotSize is the memory one slot of an offsetMap takes.
const offsetMapSlotSize = 24

// offsetMapLoad is the share of slots an offsetMap fills before it counts
// as full: linear probing stays short below it.
const offsetMapLoad = 0.75

// offsetMap is Kafka's SkimpyOffsetMap: a fixed-memory, open-addressing
// table from a 128-bit hash of a key to the greatest offset the key was
// written at. Keys themselves are not kept, so its memory does not depend
// on their size; two keys colliding in 128 bits is as likely as Kafka's
// MD5 colliding, and would cost the older of the two records. It is not
// safe for concurrent use.
type offsetMap struct {
	seed1, seed2 maphash.Seed
	slots        []offsetMapSlot // len is a power of two
	used, limit  int
}

type offsetMapSlot struct {
	h1, h2 uint64
	offset int64 // offset+1; 0 marks an empty slot
}

// newOffsetMap returns a map for at most wantEntries keys that takes no
// more than maxBytes (and at least room for 1024 keys).
func newOffsetMap(maxBytes, wantEntries int64) *offsetMap {
	want := max(int64(float64(wantEntries)/offsetMapLoad)+1, 1024)
	most := max(maxBytes/offsetMapSlotSize, 1024)
	n := min(int64(1)<<bits.Len64(uint64(want-1)), int64(1)<<(bits.Len64(uint64(most))-1))
	return &offsetMap{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), slots: make([]offsetMapSlot, n),
		limit: int(float64(n) * offsetMapLoad)}
}

// free returns how many more keys fit.
func (m *offsetMap) free() int { return m.limit - m.used }

// size returns the number of keys.
func (m *offsetMap) size() int { return m.used }

func (m *offsetMap) find(key []byte) (*offsetMapSlot, uint64, uint64) {
	h1, h2 := maphash.Bytes(m.seed1, key), maphash.Bytes(m.seed2, key)
	mask := uint64(len(m.slots) - 1)
	for i := h1 & mask; ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.offset == 0 || s.h1 == h1 && s.h2 == h2 {
			return s, h1, h2
		}
	}
}

// put records that key was written at offset, the greatest so far. The
// caller checks free first: put panics on a full map.
func (m *offsetMap) put(key []byte, offset int64) {
	s, h1, h2 := m.find(key)
	if s.offset == 0 {
		if m.used >= m.limit {
			panic("storage: offset map put past its limit")
		}
		m.used++
		s.h1, s.h2 = h1, h2
	}
	s.offset = offset + 1
}

// get returns the greatest offset key was written at.
func (m *offsetMap) get(key []byte) (int64, bool) {
	s, _, _ := m.find(key)
	return s.offset - 1, s.offset != 0
}
