package producer

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"testing"

	"github.com/strata-io/strata/internal/record"
)

// kafkaEntry is one entry of Kafka's producer snapshot, written field by
// field here so the test does not share the encoder it checks.
type kafkaEntry struct {
	pid         int64
	epoch       int16
	lastSeq     int32
	lastOffset  int64
	offsetDelta int32
	timestamp   int64
	coordEpoch  int32
	txnFirst    int64
}

// kafkaSnapshot encodes entries as Kafka's ProducerStateManager.writeSnapshot
// does: version, CRC-32C over the rest, an int32-counted array.
func kafkaSnapshot(entries ...kafkaEntry) []byte {
	b := []byte{0, 1, 0, 0, 0, 0}
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		b = binary.BigEndian.AppendUint64(b, uint64(e.pid))
		b = binary.BigEndian.AppendUint16(b, uint16(e.epoch))
		b = binary.BigEndian.AppendUint32(b, uint32(e.lastSeq))
		b = binary.BigEndian.AppendUint64(b, uint64(e.lastOffset))
		b = binary.BigEndian.AppendUint32(b, uint32(e.offsetDelta))
		b = binary.BigEndian.AppendUint64(b, uint64(e.timestamp))
		b = binary.BigEndian.AppendUint32(b, uint32(e.coordEpoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.txnFirst))
	}
	return fixCRC(b)
}

// fixCRC sets the CRC of a snapshot (of at least 6 bytes) to match its body.
func fixCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[2:], crc32.Checksum(b[6:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// richLog returns a log whose state has a producer with more batches than
// are cached, one across the sequence wrap, one with a bumped epoch, one
// whose epoch a transaction marker moved (no batches), and plain batches.
func richLog(t testing.TB) *testLog {
	l := newTestLog()
	reqs := [][]record.Header{
		{plain(4)},
		{at(batch(1, 0, 0, 2), 100)},
		{at(batch(2, 3, math.MaxInt32-1, 3), 110)},
		{at(batch(1, 0, 2, 1), 120), at(batch(1, 0, 3, 4), 121)},
		{at(batch(1, 0, 7, 1), 130)},
		{at(batch(1, 0, 8, 1), 140)},
		{at(batch(1, 0, 9, 2), 150)},
		{at(batch(4, 0, 0, 1), 155)},
		{at(batch(4, 1, 0, 1), 156)},
		{plain(1)},
		{at(batch(2, 3, 1, 1), 160)},
	}
	for _, r := range reqs {
		if _, _, err := l.produce(r...); err != nil {
			t.Fatal(err)
		}
	}
	marker := batch(3, 7, -1, 1)
	marker.Attributes = record.AttrControl
	marker.MaxTimestamp = 170
	marker.BaseOffset = l.leo
	l.log = append(l.log, marker)
	l.leo++
	l.state.Update(marker)
	return l
}

func TestSnapshotRoundTrip(t *testing.T) {
	l := richLog(t)
	data := l.state.Snapshot()
	loaded := NewPartitionState()
	if err := loaded.LoadSnapshot(data); err != nil {
		t.Fatal(err)
	}
	equalStates(t, l.state, loaded)
	if string(loaded.Snapshot()) != string(data) {
		t.Fatal("a loaded snapshot does not serialise to the same bytes")
	}
	// Every cached batch survives: retries after a restart are still
	// duplicates.
	l.state = loaded
	for _, tt := range []struct {
		h    record.Header
		base int64
	}{
		{batch(1, 0, 2, 1), 9},
		{batch(1, 0, 3, 4), 10},
		{batch(2, 3, math.MaxInt32-1, 3), 6},
		{batch(1, 0, 9, 2), 16},
	} {
		base, dup, err := l.produce(tt.h)
		if err != nil || !dup || base != tt.base {
			t.Fatalf("retry of %d after reload: base %d dup %v err %v, want duplicate at %d", tt.h.BaseSequence, base, dup, err, tt.base)
		}
	}
	if _, _, err := l.produce(batch(1, 0, 0, 2)); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("retry older than the cache after reload: %v", err)
	}
}

func TestSnapshotEmpty(t *testing.T) {
	data := NewPartitionState().Snapshot()
	if want := kafkaSnapshot(); string(data) != string(want) {
		t.Fatalf("empty snapshot % x, want % x", data, want)
	}
	s := NewPartitionState()
	s.Update(batch(1, 0, 0, 1))
	if err := s.LoadSnapshot(data); err != nil || s.Len() != 0 {
		t.Fatalf("loading an empty snapshot: %v, %d producers", err, s.Len())
	}
}

// TestSnapshotKafkaFormat checks the bytes against Kafka's layout: a
// producer with one cached batch and one with none are written exactly as
// Kafka writes them, and a file Kafka wrote loads.
func TestSnapshotKafkaFormat(t *testing.T) {
	s := NewPartitionState()
	h := at(batch(42, 5, 10, 3), 1234)
	h.BaseOffset = 100
	s.Update(h)
	marker := batch(43, 2, -1, 1)
	marker.Attributes = record.AttrControl
	marker.MaxTimestamp = 999
	s.Update(marker)

	want := kafkaSnapshot(
		kafkaEntry{pid: 42, epoch: 5, lastSeq: 12, lastOffset: 102, offsetDelta: 2, timestamp: 1234, coordEpoch: -1, txnFirst: -1},
		kafkaEntry{pid: 43, epoch: 2, lastSeq: -1, lastOffset: -1, offsetDelta: 0, timestamp: 999, coordEpoch: -1, txnFirst: -1},
	)
	if got := s.Snapshot(); string(got) != string(want) {
		t.Fatalf("snapshot\n got % x\nwant % x", got, want)
	}
	loaded := NewPartitionState()
	if err := loaded.LoadSnapshot(want); err != nil {
		t.Fatal(err)
	}
	equalStates(t, s, loaded)
}

// TestSnapshotReadAsKafka reads a multi-batch snapshot the way Kafka's
// readSnapshot and loadProducerEntry do (the last entry of a producer id
// wins) and checks Kafka would see each producer's latest batch.
func TestSnapshotReadAsKafka(t *testing.T) {
	l := richLog(t)
	data := l.state.Snapshot()
	n := int(binary.BigEndian.Uint32(data[6:]))
	kafka := map[int64]snapshotEntry{}
	for i := range n {
		e := readSnapshotEntry(data[10+46*i:])
		kafka[e.producerID] = e
	}
	for _, p := range l.state.Producers() {
		e := kafka[p.ProducerID]
		if e.epoch != p.ProducerEpoch || e.lastSeq != p.LastSequence || e.timestamp != p.LastTimestamp {
			t.Errorf("Kafka would read producer %d as %+v, state is %+v", p.ProducerID, e, p)
		}
	}
}

func TestSnapshotCorruptionIsRejectedWhole(t *testing.T) {
	data := richLog(t).state.Snapshot()
	check := func(t *testing.T, what string, bad []byte) {
		t.Helper()
		s := NewPartitionState()
		s.Update(batch(77, 1, 5, 1))
		before := s.Snapshot()
		err := s.LoadSnapshot(bad)
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("%s: err %v, want ErrCorruptSnapshot", what, err)
		}
		if string(s.Snapshot()) != string(before) {
			t.Fatalf("%s: a rejected snapshot changed the state", what)
		}
	}
	for i := range data {
		for _, bit := range []byte{0x01, 0x80} {
			bad := append([]byte(nil), data...)
			bad[i] ^= bit
			check(t, "flipped bit", bad)
		}
	}
	for n := range len(data) {
		check(t, "truncated", data[:n])
	}
	check(t, "trailing bytes", fixCRC(append(append([]byte(nil), data...), 0)))
	check(t, "nil", nil)

	valid := kafkaEntry{pid: 1, epoch: 0, lastSeq: 1, lastOffset: 11, offsetDelta: 1, timestamp: 5, coordEpoch: -1, txnFirst: -1}
	next := func(e kafkaEntry, seq int32, off int64) kafkaEntry {
		e.lastSeq, e.lastOffset, e.offsetDelta = seq, off, 0
		return e
	}
	version := kafkaSnapshot(valid)
	version[1] = 2
	count := kafkaSnapshot(valid)
	binary.BigEndian.PutUint32(count[6:], 2)
	negCount := kafkaSnapshot()
	binary.BigEndian.PutUint32(negCount[6:], math.MaxUint32)
	for _, tt := range []struct {
		name string
		data []byte
	}{
		{"unknown version", fixCRC(version)},
		{"count larger than the entries", fixCRC(count)},
		{"negative count", fixCRC(negCount)},
		{"producer entries not consecutive", kafkaSnapshot(valid, next(kafkaEntry{pid: 2, lastOffset: 0, coordEpoch: -1, txnFirst: -1}, 0, 20), next(valid, 2, 30))},
		{"more than five batches", kafkaSnapshot(valid, next(valid, 2, 12), next(valid, 3, 13), next(valid, 4, 14), next(valid, 5, 15), next(valid, 6, 16))},
		{"epochs differ", kafkaSnapshot(valid, func() kafkaEntry { e := next(valid, 2, 12); e.epoch = 1; return e }())},
		{"offsets do not increase", kafkaSnapshot(valid, next(valid, 2, 11))},
		{"batches overlap", kafkaSnapshot(valid, func() kafkaEntry { e := next(valid, 3, 12); e.offsetDelta = 1; return e }())},
		{"negative producer id", kafkaSnapshot(func() kafkaEntry { e := valid; e.pid = -1; return e }())},
		{"negative sequence with a batch", kafkaSnapshot(func() kafkaEntry { e := valid; e.lastSeq = -3; return e }())},
		{"offset delta past offset 0", kafkaSnapshot(func() kafkaEntry { e := valid; e.offsetDelta = 12; return e }())},
		{"negative offset delta", kafkaSnapshot(func() kafkaEntry { e := valid; e.offsetDelta = -1; return e }())},
		{"last offset below -1", kafkaSnapshot(func() kafkaEntry { e := valid; e.lastOffset = -2; return e }())},
		{"no batch but a sequence", kafkaSnapshot(func() kafkaEntry { e := valid; e.lastOffset = -1; return e }())},
		{"a batch after an entry without one", kafkaSnapshot(kafkaEntry{pid: 1, lastSeq: -1, lastOffset: -1, coordEpoch: -1, txnFirst: -1}, valid)},
		{"no batch after an entry with one", kafkaSnapshot(valid, kafkaEntry{pid: 1, lastSeq: -1, lastOffset: -1, coordEpoch: -1, txnFirst: -1})},
		{"transaction offset below -1", kafkaSnapshot(func() kafkaEntry { e := valid; e.txnFirst = -2; return e }())},
	} {
		t.Run(tt.name, func(t *testing.T) { check(t, tt.name, tt.data) })
	}
}

func TestRebuild(t *testing.T) {
	l := richLog(t)
	mid := len(l.log) / 2
	pre := newTestLog()
	for _, h := range l.log[:mid] {
		pre.state.Update(h)
	}
	snapshot, snapshotOffset := pre.state.Snapshot(), l.log[mid].BaseOffset
	scan := func(from int64) func(func(record.Header) bool) error {
		return func(apply func(record.Header) bool) error {
			for _, h := range l.log {
				if h.BaseOffset >= from && !apply(h) {
					return nil
				}
			}
			return nil
		}
	}

	s := NewPartitionState()
	if err := s.Rebuild(snapshot, scan(snapshotOffset)); err != nil {
		t.Fatal(err)
	}
	equalStates(t, l.state, s)

	s = NewPartitionState()
	if err := s.Rebuild(nil, scan(0)); err != nil {
		t.Fatal(err)
	}
	equalStates(t, l.state, s)

	// A corrupt snapshot or a failing scan leaves the state alone.
	before := s.Snapshot()
	bad := append([]byte(nil), snapshot...)
	bad[len(bad)-1] ^= 1
	if err := s.Rebuild(bad, scan(snapshotOffset)); !errors.Is(err, ErrCorruptSnapshot) {
		t.Fatalf("corrupt snapshot: %v", err)
	}
	errScan := errors.New("disk on fire")
	err := s.Rebuild(nil, func(apply func(record.Header) bool) error {
		apply(batch(99, 0, 0, 1))
		return errScan
	})
	if !errors.Is(err, errScan) {
		t.Fatalf("failing scan: %v", err)
	}
	if string(s.Snapshot()) != string(before) {
		t.Fatal("a failed Rebuild changed the state")
	}
}
