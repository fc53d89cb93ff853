package share

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrCorruptRecord is returned by Store.Replay for a __share_group_state
// record that does not decode; loading the partition fails.
var ErrCorruptRecord = errors.New("share: corrupt __share_group_state record")

// Record types: the version of a __share_group_state key.
const (
	snapshotType int16 = 0
	updateType   int16 = 1
)

// Key names one share-partition's state: a group, a topic, a partition.
type Key struct {
	GroupID   string
	TopicID   [16]byte
	Partition int32
}

// State is the durable state of one share-partition, as the share
// coordinator keeps it: sorted, non-overlapping state batches at or above
// the start offset.
type State struct {
	SnapshotEpoch int32
	StateEpoch    int32
	LeaderEpoch   int32
	StartOffset   int64
	Batches       []StateBatch
	// updates counts the update records since the last snapshot.
	updates int
}

// apply merges a Write (or a replayed record) into s: a snapshot replaces
// the state; an update overrides the offsets its batches cover and moves
// the start (when not -1), and the batches below the start are dropped.
func (s *State) apply(w *Write) {
	if w.Snapshot {
		s.StateEpoch = w.StateEpoch
		s.Batches = nil
		s.updates = 0
	} else {
		s.updates++
	}
	s.LeaderEpoch = w.LeaderEpoch
	if w.StartOffset >= 0 {
		s.StartOffset = w.StartOffset
	}
	for _, nb := range w.Batches {
		kept := s.Batches[:0:0]
		for _, b := range s.Batches {
			if b.LastOffset < nb.FirstOffset || b.FirstOffset > nb.LastOffset {
				kept = append(kept, b)
				continue
			}
			if b.FirstOffset < nb.FirstOffset {
				left := b
				left.LastOffset = nb.FirstOffset - 1
				kept = append(kept, left)
			}
			if b.LastOffset > nb.LastOffset {
				right := b
				right.FirstOffset = nb.LastOffset + 1
				kept = append(kept, right)
			}
		}
		s.Batches = append(kept, nb)
		sort.Slice(s.Batches, func(i, j int) bool { return s.Batches[i].FirstOffset < s.Batches[j].FirstOffset })
	}
	out := s.Batches[:0]
	for _, b := range s.Batches {
		if b.LastOffset < s.StartOffset {
			continue
		}
		b.FirstOffset = max(b.FirstOffset, s.StartOffset)
		if n := len(out); n > 0 && out[n-1].LastOffset+1 == b.FirstOffset &&
			out[n-1].DeliveryState == b.DeliveryState && out[n-1].DeliveryCount == b.DeliveryCount {
			out[n-1].LastOffset = b.LastOffset
			continue
		}
		out = append(out, b)
	}
	s.Batches = out
}

// StoreRecord is a record to append to __share_group_state.
type StoreRecord struct {
	Key, Value []byte
}

// Store is the share coordinator's state of the share-partitions whose
// keys one __share_group_state partition holds: what a coordinator
// Machine keeps. It is not safe for concurrent use.
type Store struct {
	// UpdatesPerSnapshot is
	// share.coordinator.snapshot.update.records.per.snapshot (500): a
	// write after this many updates is a snapshot.
	UpdatesPerSnapshot int
	states             map[Key]*State
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{UpdatesPerSnapshot: 500, states: map[Key]*State{}} }

// Get returns the state of k, nil if it has none. The caller must not
// change it.
func (st *Store) Get(k Key) *State { return st.states[k] }

// Write fences w against the stored state of k and returns the record
// that persists it, applied to the store. It returns FENCED_STATE_EPOCH
// for an update of an older state epoch, and FENCED_LEADER_EPOCH for a
// write of an older leader epoch (a deposed share-partition leader).
//
// The store is ahead of the log until the record is committed: if the
// append fails, the store no longer matches what a replay would give
// (a later update may even carry a snapshot epoch whose snapshot was
// lost), so its owner must replay the partition before writing again.
func (st *Store) Write(k Key, w *Write, nowMs int64) (StoreRecord, error) {
	cur := st.states[k]
	if cur != nil {
		if w.StateEpoch < cur.StateEpoch || (!w.Snapshot && w.StateEpoch != cur.StateEpoch) {
			return StoreRecord{}, kerr.FencedStateEpoch
		}
		if w.LeaderEpoch < cur.LeaderEpoch {
			return StoreRecord{}, kerr.FencedLeaderEpoch
		}
	}
	if cur == nil || w.Snapshot || cur.updates+1 >= st.UpdatesPerSnapshot {
		next := State{}
		if cur != nil {
			next = *cur
			next.Batches = append([]StateBatch(nil), cur.Batches...)
			next.SnapshotEpoch++
		}
		next.apply(w)
		next.updates = 0
		st.states[k] = &next
		return StoreRecord{Key: encodeKey(snapshotType, k), Value: encodeSnapshot(&next, nowMs)}, nil
	}
	cur.apply(w)
	return StoreRecord{Key: encodeKey(updateType, k), Value: encodeUpdate(cur.SnapshotEpoch, w)}, nil
}

// Delete forgets k (DeleteShareGroupState) and returns its tombstone.
func (st *Store) Delete(k Key) StoreRecord {
	delete(st.states, k)
	return StoreRecord{Key: encodeKey(snapshotType, k)}
}

// Replay applies one committed record. An update of a key without a
// snapshot, or of another snapshot epoch, is ignored, as it belongs to a
// state that a later snapshot replaced.
func (st *Store) Replay(key, value []byte) error {
	typ, k, err := decodeKey(key)
	if err != nil {
		return err
	}
	if value == nil {
		if typ == snapshotType {
			delete(st.states, k)
		}
		return nil
	}
	switch typ {
	case snapshotType:
		s, err := decodeSnapshot(value)
		if err != nil {
			return err
		}
		st.states[k] = s
	case updateType:
		epoch, w, err := decodeUpdate(value)
		if err != nil {
			return err
		}
		if cur := st.states[k]; cur != nil && cur.SnapshotEpoch == epoch {
			w.StateEpoch = cur.StateEpoch
			cur.apply(w)
		}
	}
	return nil
}

// encoding

func encodeKey(typ int16, k Key) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(typ))
	b = binary.BigEndian.AppendUint16(b, uint16(len(k.GroupID)))
	b = append(b, k.GroupID...)
	b = append(b, k.TopicID[:]...)
	return binary.BigEndian.AppendUint32(b, uint32(k.Partition))
}

func appendBatches(b []byte, batches []StateBatch) []byte {
	b = binary.AppendUvarint(b, uint64(len(batches))+1)
	for _, sb := range batches {
		b = binary.BigEndian.AppendUint64(b, uint64(sb.FirstOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(sb.LastOffset))
		b = append(b, byte(sb.DeliveryState))
		b = binary.BigEndian.AppendUint16(b, uint16(sb.DeliveryCount))
		b = append(b, 0) // no tagged fields
	}
	return b
}

func encodeSnapshot(s *State, nowMs int64) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0) // value version
	b = binary.BigEndian.AppendUint32(b, uint32(s.SnapshotEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(s.StateEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(s.LeaderEpoch))
	b = binary.BigEndian.AppendUint64(b, uint64(s.StartOffset))
	b = binary.BigEndian.AppendUint64(b, uint64(nowMs)) // create time
	b = binary.BigEndian.AppendUint64(b, uint64(nowMs)) // write time
	b = appendBatches(b, s.Batches)
	return append(b, 0)
}

func encodeUpdate(snapshotEpoch int32, w *Write) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(snapshotEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(w.LeaderEpoch))
	b = binary.BigEndian.AppendUint64(b, uint64(w.StartOffset))
	b = appendBatches(b, w.Batches)
	return append(b, 0)
}

// reader decodes with every length checked against what remains.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		if r.err == nil {
			r.err = fmt.Errorf("%w: truncated", ErrCorruptRecord)
		}
		return make([]byte, max(n, 0))[:max(n, 0):max(n, 0)]
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) i16() int16 { return int16(binary.BigEndian.Uint16(r.take(2))) }
func (r *reader) i32() int32 { return int32(binary.BigEndian.Uint32(r.take(4))) }
func (r *reader) i64() int64 { return int64(binary.BigEndian.Uint64(r.take(8))) }

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint", ErrCorruptRecord)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// tags skips a tag buffer.
func (r *reader) tags() {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: %d tags in %d bytes", ErrCorruptRecord, n, len(r.b))
		return
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.uvarint() // tag
		size := r.uvarint()
		if size > uint64(len(r.b)) {
			r.err = fmt.Errorf("%w: tag of %d bytes", ErrCorruptRecord, size)
			return
		}
		r.take(int(size))
	}
}

// batchSize is the least encoded size of a state batch.
const batchSize = 8 + 8 + 1 + 2 + 1

func (r *reader) batches() []StateBatch {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n == 0 || n-1 > uint64(len(r.b)/batchSize) {
		r.err = fmt.Errorf("%w: %d state batches in %d bytes", ErrCorruptRecord, int64(n)-1, len(r.b))
		return nil
	}
	out := make([]StateBatch, 0, n-1)
	for i := uint64(1); i < n && r.err == nil; i++ {
		b := StateBatch{FirstOffset: r.i64(), LastOffset: r.i64(), DeliveryState: DeliveryState(r.take(1)[0]), DeliveryCount: r.i16()}
		r.tags()
		if r.err != nil {
			break
		}
		if err := checkBatch(b); err != nil {
			r.err = err
			break
		}
		out = append(out, b)
	}
	return out
}

func checkBatch(b StateBatch) error {
	switch {
	case b.FirstOffset < 0 || b.LastOffset < b.FirstOffset || b.LastOffset == math.MaxInt64:
		return fmt.Errorf("%w: state batch %d-%d", ErrCorruptRecord, b.FirstOffset, b.LastOffset)
	case b.DeliveryState != Available && b.DeliveryState != Acquired && b.DeliveryState != Acknowledged && b.DeliveryState != Archived:
		return fmt.Errorf("%w: delivery state %d", ErrCorruptRecord, b.DeliveryState)
	case b.DeliveryCount < 0:
		return fmt.Errorf("%w: delivery count %d", ErrCorruptRecord, b.DeliveryCount)
	}
	return nil
}

func (r *reader) end() error {
	r.tags()
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrCorruptRecord, len(r.b))
	}
	return r.err
}

func decodeKey(key []byte) (int16, Key, error) {
	r := reader{b: key}
	typ := r.i16()
	var k Key
	k.GroupID = string(r.take(int(uint16(r.i16()))))
	copy(k.TopicID[:], r.take(16))
	k.Partition = r.i32()
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: key: %d trailing bytes", ErrCorruptRecord, len(r.b))
	}
	if r.err == nil && typ != snapshotType && typ != updateType {
		r.err = fmt.Errorf("%w: key type %d", ErrCorruptRecord, typ)
	}
	return typ, k, r.err
}

func decodeSnapshot(value []byte) (*State, error) {
	r := reader{b: value}
	if v := r.i16(); r.err == nil && v != 0 {
		return nil, fmt.Errorf("%w: snapshot version %d", ErrCorruptRecord, v)
	}
	s := &State{SnapshotEpoch: r.i32(), StateEpoch: r.i32(), LeaderEpoch: r.i32(), StartOffset: r.i64()}
	r.i64() // create time
	r.i64() // write time
	batches := r.batches()
	if err := r.end(); err != nil {
		return nil, err
	}
	if s.StartOffset < 0 || s.StartOffset == math.MaxInt64 {
		return nil, fmt.Errorf("%w: snapshot start offset %d", ErrCorruptRecord, s.StartOffset)
	}
	s.apply(&Write{Snapshot: true, StateEpoch: s.StateEpoch, LeaderEpoch: s.LeaderEpoch, StartOffset: s.StartOffset, Batches: batches})
	return s, nil
}

func decodeUpdate(value []byte) (int32, *Write, error) {
	r := reader{b: value}
	if v := r.i16(); r.err == nil && v != 0 {
		return 0, nil, fmt.Errorf("%w: update version %d", ErrCorruptRecord, v)
	}
	epoch := r.i32()
	w := &Write{LeaderEpoch: r.i32(), StartOffset: r.i64()}
	w.Batches = r.batches()
	if err := r.end(); err != nil {
		return 0, nil, err
	}
	if w.StartOffset < -1 || w.StartOffset == math.MaxInt64 {
		return 0, nil, fmt.Errorf("%w: update start offset %d", ErrCorruptRecord, w.StartOffset)
	}
	return epoch, w, nil
}
