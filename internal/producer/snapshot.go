package producer

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/strata-io/strata/internal/record"
)

// Snapshot file layout; see the package doc.
const (
	snapshotVersion    = 1
	snapshotOffCRC     = 2
	snapshotOffEntries = 6 // the CRC covers bytes from here to the end
	snapshotHeaderSize = 10
	snapshotEntrySize  = 46
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot serialises the state in Kafka's producer snapshot format (version
// 1, one entry per cached batch; see the package doc). Take it under the
// append lock at the offset the file will be named after (the log end
// offset); the bytes are the caller's and may be written after unlocking.
func (s *PartitionState) Snapshot() []byte {
	ids := make([]int64, 0, len(s.producers))
	entries := 0
	for id, e := range s.producers {
		ids = append(ids, id)
		entries += max(e.count, 1)
	}
	slices.Sort(ids)
	b := make([]byte, snapshotHeaderSize, snapshotHeaderSize+entries*snapshotEntrySize)
	binary.BigEndian.PutUint16(b, snapshotVersion)
	binary.BigEndian.PutUint32(b[snapshotOffEntries:], uint32(entries))
	for _, id := range ids {
		e := s.producers[id]
		if e.count == 0 {
			b = appendSnapshotEntry(b, id, e, BatchMetadata{LastSeq: noSequence, FirstOffset: -1})
			continue
		}
		for i, bm := range e.batches[:e.count] {
			if i == e.count-1 {
				// Kafka's one entry carries the producer's last
				// timestamp, which a transaction marker may have
				// moved past its last batch's.
				bm.Timestamp = e.lastTimestamp
			}
			b = appendSnapshotEntry(b, id, e, bm)
		}
	}
	binary.BigEndian.PutUint32(b[snapshotOffCRC:], crc32.Checksum(b[snapshotOffEntries:], castagnoli))
	return b
}

// appendSnapshotEntry appends the entry for one batch of producer id; a batch
// with FirstOffset -1 is written as "no batch" (lastOffset -1, delta 0) with
// the producer's last timestamp, as Kafka writes an empty entry.
func appendSnapshotEntry(b []byte, id int64, e *producerEntry, bm BatchMetadata) []byte {
	lastOffset, delta, ts := bm.LastOffset(), bm.LastOffsetDelta, bm.Timestamp
	if bm.FirstOffset < 0 {
		lastOffset, delta, ts = -1, 0, e.lastTimestamp
	}
	b = binary.BigEndian.AppendUint64(b, uint64(id))
	b = binary.BigEndian.AppendUint16(b, uint16(e.epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(bm.LastSeq))
	b = binary.BigEndian.AppendUint64(b, uint64(lastOffset))
	b = binary.BigEndian.AppendUint32(b, uint32(delta))
	b = binary.BigEndian.AppendUint64(b, uint64(ts))
	b = binary.BigEndian.AppendUint32(b, uint32(e.coordinatorEpoch))
	b = binary.BigEndian.AppendUint64(b, uint64(e.currentTxnFirstOffset))
	return b
}

// snapshotEntry is one decoded entry.
type snapshotEntry struct {
	producerID            int64
	epoch                 int16
	lastSeq               int32
	lastOffset            int64
	offsetDelta           int32
	timestamp             int64
	coordinatorEpoch      int32
	currentTxnFirstOffset int64
}

func readSnapshotEntry(b []byte) snapshotEntry {
	return snapshotEntry{
		producerID:            int64(binary.BigEndian.Uint64(b[0:])),
		epoch:                 int16(binary.BigEndian.Uint16(b[8:])),
		lastSeq:               int32(binary.BigEndian.Uint32(b[10:])),
		lastOffset:            int64(binary.BigEndian.Uint64(b[14:])),
		offsetDelta:           int32(binary.BigEndian.Uint32(b[22:])),
		timestamp:             int64(binary.BigEndian.Uint64(b[26:])),
		coordinatorEpoch:      int32(binary.BigEndian.Uint32(b[34:])),
		currentTxnFirstOffset: int64(binary.BigEndian.Uint64(b[38:])),
	}
}

// decodeSnapshot parses and validates a whole snapshot into a new producer
// map. Any error wraps ErrCorruptSnapshot.
func decodeSnapshot(b []byte) (map[int64]*producerEntry, error) {
	if len(b) < snapshotHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorruptSnapshot, len(b))
	}
	if v := binary.BigEndian.Uint16(b); v != snapshotVersion {
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorruptSnapshot, v)
	}
	stored, computed := binary.BigEndian.Uint32(b[snapshotOffCRC:]), crc32.Checksum(b[snapshotOffEntries:], castagnoli)
	if stored != computed {
		return nil, fmt.Errorf("%w: stored CRC %08x, computed %08x", ErrCorruptSnapshot, stored, computed)
	}
	n := int64(int32(binary.BigEndian.Uint32(b[snapshotOffEntries:])))
	if n < 0 || n*snapshotEntrySize != int64(len(b)-snapshotHeaderSize) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", ErrCorruptSnapshot, n, len(b))
	}
	producers := make(map[int64]*producerEntry, min(n, 1<<16))
	var cur *producerEntry
	var curID int64
	for i := range int(n) {
		se := readSnapshotEntry(b[snapshotHeaderSize+i*snapshotEntrySize:])
		first := cur == nil || se.producerID != curID
		if first {
			if producers[se.producerID] != nil {
				return nil, fmt.Errorf("%w: producer %d's entries are not consecutive", ErrCorruptSnapshot, se.producerID)
			}
			ne := newEntry()
			cur, curID = &ne, se.producerID
			producers[curID] = cur
		}
		if problem := cur.load(&se, first); problem != "" {
			return nil, fmt.Errorf("%w: entry %d, producer %d: %s", ErrCorruptSnapshot, i, se.producerID, problem)
		}
	}
	return producers, nil
}

// load adds one snapshot entry of the entry's producer, first telling
// whether it is the producer's first, and returns what is wrong with it, or
// "".
func (e *producerEntry) load(se *snapshotEntry, first bool) string {
	switch {
	case se.producerID < 0:
		return "negative producer id"
	case se.currentTxnFirstOffset < -1:
		return "invalid transaction first offset"
	case se.lastOffset < -1:
		return "invalid last offset"
	case se.lastOffset < 0 && (se.lastSeq != noSequence || se.offsetDelta != 0):
		return "sequence or delta without a batch"
	case se.lastOffset >= 0 && (se.lastSeq < 0 || se.offsetDelta < 0 || int64(se.offsetDelta) > se.lastOffset):
		return "invalid sequence or offset delta"
	}
	if !first {
		switch {
		case e.count == 0:
			return "entry after one without a batch"
		case se.lastOffset < 0:
			return "entry without a batch after one with"
		case se.epoch != e.epoch:
			return "epochs differ between batches"
		case e.count == NumBatchesToRetain:
			return "more batches than are cached"
		case se.lastOffset-int64(se.offsetDelta) <= e.batches[e.count-1].LastOffset():
			return "batch offsets do not increase"
		}
	}
	e.epoch = se.epoch
	e.coordinatorEpoch = se.coordinatorEpoch
	e.currentTxnFirstOffset = se.currentTxnFirstOffset
	e.lastTimestamp = se.timestamp
	if se.lastOffset >= 0 {
		e.batches[e.count] = BatchMetadata{
			FirstSeq:        decrementSequence(se.lastSeq, se.offsetDelta),
			LastSeq:         se.lastSeq,
			FirstOffset:     se.lastOffset - int64(se.offsetDelta),
			LastOffsetDelta: se.offsetDelta,
			Timestamp:       se.timestamp,
		}
		e.count++
	}
	return ""
}

// LoadSnapshot replaces the state with the one in a snapshot. On error,
// which wraps ErrCorruptSnapshot, the state is left as it was.
func (s *PartitionState) LoadSnapshot(data []byte) error {
	producers, err := decodeSnapshot(data)
	if err != nil {
		return err
	}
	s.producers = producers
	s.retrack()
	s.append.reset()
	return nil
}

// Rebuild replaces the state with the one the log describes: the snapshot
// (nil for none: the state of an empty log) plus every batch that scan feeds
// to apply, in log order, from the snapshot's offset to the log end. scan
// returns early when apply returns false (it never does; the signature fits
// storage's ScanBatchHeaders). Either the whole rebuild succeeds or the state
// is left as it was: a corrupt snapshot is ErrCorruptSnapshot, and an error
// from scan is returned as is.
func (s *PartitionState) Rebuild(snapshot []byte, scan func(apply func(record.Header) bool) error) error {
	fresh := NewPartitionState()
	if snapshot != nil {
		if err := fresh.LoadSnapshot(snapshot); err != nil {
			return err
		}
	}
	if scan != nil {
		err := scan(func(h record.Header) bool {
			fresh.Update(h)
			return true
		})
		if err != nil {
			return err
		}
	}
	s.producers = fresh.producers
	s.retrack()
	s.append.reset()
	return nil
}
