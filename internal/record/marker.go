package record

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A transaction marker is a control batch (attributes transactional and
// control) of one record, written by a partition's leader when the
// transaction coordinator ends a transaction (WriteTxnMarkers). Its key and
// value are Kafka's EndTransactionMarker, all integers big-endian:
//
//	key    offset size field
//	            0    2 version       0
//	            2    2 type          0 ABORT, 1 COMMIT
//	value       0    2 version       0
//	            2    4 coordinatorEpoch
//
// The batch carries the producer id and epoch of the transaction, base
// sequence -1.

// Control record types.
const (
	ControlAbort  int16 = 0
	ControlCommit int16 = 1
)

// ErrMarker is returned by ParseMarker for a control record that is not a
// well-formed transaction marker.
var ErrMarker = errors.New("record: malformed transaction marker")

// BuildMarker appends to dst a transaction marker batch for producerID at
// epoch, with base offset 0 (the log assigns it) and a valid CRC.
func BuildMarker(dst []byte, producerID int64, epoch int16, commit bool, coordinatorEpoch int32, timestamp int64) []byte {
	typ := ControlAbort
	if commit {
		typ = ControlCommit
	}
	key := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0), uint16(typ))
	value := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, 0), uint32(coordinatorEpoch))
	kr := kmsg.Record{Key: key, Value: value}
	enc := kr.AppendTo(nil)[1:]
	body := binary.AppendVarint(nil, int64(len(enc)))
	body = append(body, enc...)
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                CurrentMagic,
		Attributes:           AttrTransactional | AttrControl,
		FirstTimestamp:       timestamp,
		MaxTimestamp:         timestamp,
		ProducerID:           producerID,
		ProducerEpoch:        epoch,
		FirstSequence:        -1,
		NumRecords:           1,
		Records:              body,
	}
	start := len(dst)
	dst = b.AppendTo(dst)
	batch := dst[start:]
	binary.BigEndian.PutUint32(batch[offLength:], uint32(len(batch)-LogOverhead))
	binary.BigEndian.PutUint32(batch[offCRC:], Checksum(batch))
	return dst
}

// Marker is a parsed transaction marker.
type Marker struct {
	Commit           bool
	CoordinatorEpoch int32
}

// ParseMarker reads the marker of a control batch (whole, uncompressed).
func ParseMarker(batch []byte) (Marker, error) {
	var m Marker
	found := false
	err := Records(batch, func(_, _ int64, r *kmsg.Record) error {
		if found {
			return fmt.Errorf("%w: more than one record", ErrMarker)
		}
		found = true
		if len(r.Key) < 4 || binary.BigEndian.Uint16(r.Key) != 0 {
			return fmt.Errorf("%w: key of %d bytes", ErrMarker, len(r.Key))
		}
		switch int16(binary.BigEndian.Uint16(r.Key[2:])) {
		case ControlAbort:
		case ControlCommit:
			m.Commit = true
		default:
			return fmt.Errorf("%w: type %d", ErrMarker, int16(binary.BigEndian.Uint16(r.Key[2:])))
		}
		if len(r.Value) >= 6 {
			m.CoordinatorEpoch = int32(binary.BigEndian.Uint32(r.Value[2:]))
		}
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("%w: no record", ErrMarker)
	}
	return m, err
}
