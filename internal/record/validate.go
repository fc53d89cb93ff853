package record

import (
	"errors"
	"fmt"
	"hash/crc32"
)

// Validating a produce request's records is Kafka's LogValidator for
// magic-v2 batches, without its conversions: Strata stores the batches as
// sent, so what Kafka would rewrite (offsets, a wrong max timestamp) it
// refuses. Every record of every batch is read, in one pass, decompressing
// compressed batches through a streaming, bounded decoder (see
// compression.go); nothing is allocated per record.

// Errors of record-level validation. Each comes inside a *RecordError
// naming the record, except ErrTooLarge, ErrControl and ErrTimestamp,
// which concern the batch.
var (
	// ErrRecord is returned for a record that does not parse: a length,
	// varint, count or offset delta that does not agree with the batch.
	ErrRecord = errors.New("record: malformed record")
	// ErrNullKey is returned, for a compacted topic, for a record
	// without a key, which compaction could never replace or delete.
	ErrNullKey = errors.New("record: compacted topic cannot accept a record without a key")
	// ErrTooLarge is returned for a batch, as sent, larger than
	// max.message.bytes.
	ErrTooLarge = errors.New("record: batch larger than max.message.bytes")
	// ErrControl is returned for a control batch from a producer: only
	// the broker writes transaction markers.
	ErrControl = errors.New("record: producers may not write control batches")
	// ErrTimestamp is returned when a batch's max timestamp is not its
	// records' greatest timestamp.
	ErrTimestamp = errors.New("record: max timestamp does not match the records")
)

// RecordError is a validation failure of one record: Kafka's v8+ produce
// responses name it (RecordErrors' batch index).
type RecordError struct {
	Index int32 // the record's index in its batch, from 0
	Err   error
}

func (e *RecordError) Error() string { return fmt.Sprintf("record %d: %v", e.Index, e.Err) }
func (e *RecordError) Unwrap() error { return e.Err }

// ValidateOptions are the topic's settings that validation applies.
type ValidateOptions struct {
	// MaxMessageBytes is max.message.bytes: the largest batch as sent
	// (compressed, as Kafka applies it). 0 for no limit.
	MaxMessageBytes int
	// RequireKeys is cleanup.policy=compact: every record needs a key.
	RequireKeys bool
	// AllowControl accepts control batches, which the broker writes (as
	// Kafka's coordinator origin does) but producers may not.
	AllowControl bool
	// Budget bounds decompression memory and, with its
	// MaxUncompressed, the output of each batch; nil means
	// DefaultBudget.
	Budget *Budget
}

// Validated is one partition's records of a produce request, validated:
// the batches and their headers, parsed once for the whole produce path.
type Validated struct {
	records []byte
	headers []Header
}

// Records returns the batches' bytes, which alias the request.
func (v *Validated) Records() []byte { return v.records }

// Headers returns the batches' headers, in order. They belong to v: the
// log updates them (offsets, epoch, log-append time) as it edits the
// batches in place.
func (v *Validated) Headers() []Header { return v.headers }

// ValidateProduced checks the records of a produce request for one
// partition (one or more v2 batches, back to back) as Kafka's broker does
// before appending them: for each batch, its size as sent against
// max.message.bytes (ErrTooLarge), its framing, magic and CRC (as
// Validate), one record per offset and at least one (ErrRecordCount), no
// control batch unless opts allow it (ErrControl); then every record (a *RecordError wrapping
// ErrRecord or ErrNullKey): lengths, varints and header counts within
// the record, offset deltas 0..n-1 in order, timestamps that do not
// overflow and whose greatest is the batch's max timestamp (ErrTimestamp,
// for CreateTime batches), no bytes after the last record. No batch at
// all is ErrShort. A compressed
// batch that does not decompress is ErrDecompress; one that decompresses
// to more than the budget's MaxUncompressed is ErrDecompress and
// ErrUncompressedTooLarge. Errors name the batch.
func ValidateProduced(records []byte, opts ValidateOptions) (*Validated, error) {
	if len(records) == 0 {
		return nil, fmt.Errorf("%w: no record batches", ErrShort)
	}
	v := &Validated{records: records, headers: make([]Header, 0, 1)}
	for b, i := records, 0; len(b) > 0; i++ {
		h, err := validateProducedBatch(b, &opts)
		if err != nil {
			return nil, fmt.Errorf("batch %d at byte %d: %w", i, len(records)-len(b), err)
		}
		v.headers = append(v.headers, h)
		b = b[h.Size():]
	}
	return v, nil
}

func validateProducedBatch(b []byte, opts *ValidateOptions) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	size := h.Size()
	// Before the CRC, as Kafka does: a too large batch is not read.
	if opts.MaxMessageBytes > 0 && size > opts.MaxMessageBytes {
		return h, fmt.Errorf("%w: %d bytes, max.message.bytes %d", ErrTooLarge, size, opts.MaxMessageBytes)
	}
	if size > len(b) {
		return h, fmt.Errorf("%w: batch of %d bytes, %d present", ErrShort, size, len(b))
	}
	if h.Codec() == CodecNone && size > crcChunk {
		// A large uncompressed batch: its CRC is computed chunk by chunk
		// as the walk passes, while the bytes are in the cache, rather
		// than in a pass of its own. A batch that fails its CRC is
		// ErrCRC whatever else is wrong with it, as when the CRC comes
		// first.
		crc := crc32.Update(0, castagnoli, b[offAttributes:HeaderSize])
		err = checkProducedHeader(&h, opts)
		if err == nil {
			_, err = walkBatch(b[:size], &h, true, opts, nil, &crc)
		} else {
			crc = crc32.Update(crc, castagnoli, b[HeaderSize:size])
		}
		if crc != h.CRC {
			return h, fmt.Errorf("%w: stored %08x, computed %08x", ErrCRC, h.CRC, crc)
		}
		return h, err
	}
	if crc := crc32.Checksum(b[offAttributes:size], castagnoli); crc != h.CRC {
		return h, fmt.Errorf("%w: stored %08x, computed %08x", ErrCRC, h.CRC, crc)
	}
	if err := checkProducedHeader(&h, opts); err != nil {
		return h, err
	}
	_, err = walkBatch(b[:size], &h, true, opts, nil, nil)
	return h, err
}

// crcChunk is how much of a large uncompressed batch the walk passes
// between updates of its CRC.
const crcChunk = 32 << 10

// checkProducedHeader applies ValidateProduced's rules on the header.
func checkProducedHeader(h *Header, opts *ValidateOptions) error {
	if h.Codec() > CodecZstd {
		return fmt.Errorf("%w: %d", ErrCodec, h.Codec())
	}
	if h.NumRecords < 1 || int64(h.NumRecords) != int64(h.LastOffsetDelta)+1 {
		return fmt.Errorf("%w: %d records, last offset delta %d", ErrRecordCount, h.NumRecords, h.LastOffsetDelta)
	}
	if h.IsControl() && !opts.AllowControl {
		return ErrControl
	}
	return nil
}

// ScanStored reads the records of a batch from the log (whole, its header
// parsed into h), compressed or not, checking them as ValidateProduced
// does, but by the rules of a stored batch: compaction may have removed
// records (offset deltas increase within the last offset delta; the max
// timestamp is at least the records'), and delete-horizon or log-append
// time batches' timestamps are not compared. fn, when not nil, is called
// with each record's offset and timestamp and stops the walk by returning
// false. It returns the size of the uncompressed records section (when
// the walk was not stopped), which Decompress then needs. The output is
// limited by the budget's MaxUncompressed, as ValidateProduced's.
func ScanStored(batch []byte, h *Header, budget *Budget, fn func(offset, timestamp int64) bool) (int64, error) {
	if h.Size() > len(batch) {
		return 0, ErrShort
	}
	opts := ValidateOptions{Budget: budget}
	return walkBatch(batch[:h.Size()], h, false, &opts, fn, nil)
}

// errStopped ends a walk that fn stopped.
var errStopped = errors.New("stopped")

// walkBatch reads every record of batch, whose header is h. produced
// selects ValidateProduced's rules, else ScanStored's. When crc is set
// (uncompressed batches only), the records section's bytes are added to
// it as the walk passes them, and all of them however the walk ends.
func walkBatch(batch []byte, h *Header, produced bool, opts *ValidateOptions, fn func(offset, timestamp int64) bool, crc *uint32) (int64, error) {
	var w walker
	section := batch[HeaderSize:]
	if h.Codec() != CodecNone {
		budget := opts.Budget
		if budget == nil {
			budget = DefaultBudget
		}
		limit := budget.MaxUncompressed()
		d, err := openDecoder(h.Codec(), section, limit, 0, budget)
		if err != nil {
			return 0, err
		}
		defer d.close(0)
		w.streamed(d, limit, d.window)
		return w.walk(h, produced, opts.RequireKeys, fn)
	}
	w.inMemory(section)
	if crc == nil {
		return w.walk(h, produced, opts.RequireKeys, fn)
	}
	w.crc, w.crcOn = *crc, true
	n, err := w.walk(h, produced, opts.RequireKeys, fn)
	*crc = crc32.Update(w.crc, castagnoli, section[w.crcDone:])
	return n, err
}

// walk reads every record, then checks nothing follows the last, and
// returns the section's size.
func (w *walker) walk(h *Header, produced, requireKeys bool, fn func(offset, timestamp int64) bool) (int64, error) {
	err := walkRecords(w, h, produced, requireKeys, fn)
	if errors.Is(err, errStopped) {
		return 0, nil
	}
	if w.err != nil {
		return 0, w.err // the decoder failed or passed its limit
	}
	if err != nil {
		return 0, err
	}
	if end, left := w.atEnd(); !end {
		if w.err != nil {
			return 0, w.err
		}
		return 0, fmt.Errorf("%w: %d or more bytes after the last of %d records", ErrRecord, left, h.NumRecords)
	}
	return w.offset(), nil
}

func walkRecords(w *walker, h *Header, produced, requireKeys bool, fn func(offset, timestamp int64) bool) error {
	var r walkedRecord
	maxTimestamp, prevDelta := int64(-1<<63), int32(-1)
	logAppendTime := h.Attributes&TimestampTypeLogAppend != 0
	for i := int32(0); i < h.NumRecords; i++ {
		if err := w.next(&r); err != nil {
			return &RecordError{Index: i, Err: fmt.Errorf("%w: %w", ErrRecord, err)}
		}
		switch {
		case produced && r.OffsetDelta != i:
			return &RecordError{Index: i, Err: fmt.Errorf("%w: offset delta %d, want %d", ErrRecord, r.OffsetDelta, i)}
		case !produced && (r.OffsetDelta <= prevDelta || r.OffsetDelta > h.LastOffsetDelta):
			return &RecordError{Index: i, Err: fmt.Errorf("%w: offset delta %d after %d, last offset delta %d", ErrRecord, r.OffsetDelta, prevDelta, h.LastOffsetDelta)}
		case requireKeys && r.KeyLength < 0:
			return &RecordError{Index: i, Err: ErrNullKey}
		}
		prevDelta = r.OffsetDelta
		ts := h.BaseTimestamp + r.TimestampDelta
		if (r.TimestampDelta > 0) != (ts > h.BaseTimestamp) {
			return &RecordError{Index: i, Err: fmt.Errorf("%w: timestamp delta %d overflows from %d", ErrRecord, r.TimestampDelta, h.BaseTimestamp)}
		}
		maxTimestamp = max(maxTimestamp, ts)
		if fn != nil {
			if logAppendTime {
				ts = h.MaxTimestamp
			}
			if !fn(h.BaseOffset+int64(r.OffsetDelta), ts) {
				return errStopped
			}
		}
	}
	if h.NumRecords == 0 || logAppendTime || h.HasDeleteHorizon() {
		return nil
	}
	if maxTimestamp != h.MaxTimestamp && (produced || maxTimestamp > h.MaxTimestamp) {
		return fmt.Errorf("%w: max timestamp %d, the records' %d", ErrTimestamp, h.MaxTimestamp, maxTimestamp)
	}
	return nil
}
