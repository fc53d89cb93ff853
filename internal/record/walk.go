package record

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// A record inside the (uncompressed) records section, Kafka's DefaultRecord:
//
//	length          varint  bytes after this field
//	attributes      int8    unused, 0
//	timestampDelta  varlong from the batch's base timestamp
//	offsetDelta     varint  from the batch's base offset
//	keyLength       varint  -1 for a null key
//	key             bytes
//	valueLength     varint  -1 for a null value (a tombstone)
//	value           bytes
//	headerCount     varint
//	headers         headerCount times: keyLength varint (>= 0), key,
//	                valueLength varint (-1 for null), value
//
// A varint is zigzag-encoded, at most 5 bytes for a 32-bit value and 10
// for a 64-bit one (varlong).

// Errors of the records walker: what a malformed record is. They come
// wrapped in ErrRecord and a RecordError naming the record.
var (
	errRecordShort   = errors.New("the records end inside the record")
	errVarint        = errors.New("varint too long or overflowing")
	errRecordLength  = errors.New("invalid record length")
	errFieldLength   = errors.New("key, value or header length invalid or past the record's end")
	errHeaderCount   = errors.New("header count negative or larger than the bytes left")
	errRecordOverrun = errors.New("fields do not fill the record's length")
)

// walker reads the records of a records section: in memory (an
// uncompressed batch, walking its bytes), or streamed from a decoder
// through a fixed window, skipping keys and values without keeping them,
// as Kafka's skip-key-value iterator does. Either way it allocates nothing
// per record.
type walker struct {
	buf  []byte // in memory: the section; streamed: the window's valid bytes
	pos  int    // next byte of buf
	base int64  // position of buf[0] in the section

	// Streaming only.
	src    io.Reader
	window []byte
	taken  int64 // bytes read from src
	limit  int64 // most bytes src may yield
	eof    bool
	err    error // the source's failure (ErrDecompress), which ends the walk

	// In memory only: the CRC of buf[:crcDone], when crcOn.
	crc     uint32
	crcDone int
	crcOn   bool
}

// inMemory starts a walk over records.
func (w *walker) inMemory(records []byte) {
	*w = walker{buf: records}
}

// streamed starts a walk over what src yields, at most limit bytes,
// through window, which must hold at least a varlong
// (binary.MaxVarintLen64 bytes).
func (w *walker) streamed(src io.Reader, limit int64, window []byte) {
	*w = walker{src: src, window: window, buf: window[:0], limit: limit}
}

// offset returns the position of the next byte in the section.
func (w *walker) offset() int64 { return w.base + int64(w.pos) }

// fill tries to have n bytes at hand (fewer at the end of the data),
// moving what is left to the window's front and reading src.
func (w *walker) fill(n int) {
	if w.src == nil || w.eof || len(w.buf)-w.pos >= n {
		return
	}
	left := copy(w.window, w.buf[w.pos:])
	w.base += int64(w.pos)
	w.pos = 0
	w.buf = w.window[:left]
	for len(w.buf) < n && !w.eof {
		w.read()
	}
}

// read appends what src yields next to the window (which must have room).
func (w *walker) read() {
	k, err := w.src.Read(w.window[len(w.buf):])
	w.taken += int64(k)
	w.buf = w.window[:len(w.buf)+k]
	switch {
	case w.taken > w.limit:
		w.fail(tooLarge(w.limit))
	case err == io.EOF:
		w.eof = true
	case err != nil:
		w.fail(fmt.Errorf("%w: %w", ErrDecompress, err))
	case k == 0:
		// A reader may return nothing without an error; count such
		// calls against the limit so that none loops forever.
		w.taken++
	}
}

func (w *walker) fail(err error) {
	if w.err == nil {
		w.err = err
	}
	w.eof = true
	w.buf = w.buf[:w.pos] // nothing more to read
}

// skip passes over n bytes, reporting whether they were there.
func (w *walker) skip(n int64) bool {
	if n <= int64(len(w.buf)-w.pos) {
		w.pos += int(n)
		return true
	}
	if w.src == nil {
		return false
	}
	n -= int64(len(w.buf) - w.pos)
	for {
		w.base += int64(len(w.buf))
		w.buf, w.pos = w.window[:0], 0
		if w.eof {
			return false
		}
		w.read()
		if n <= int64(len(w.buf)) {
			w.pos = int(n)
			return true
		}
		n -= int64(len(w.buf))
	}
}

// byte1 reads one byte.
func (w *walker) byte1() (byte, bool) {
	if w.pos >= len(w.buf) {
		if w.fill(1); w.pos >= len(w.buf) {
			return 0, false
		}
	}
	b := w.buf[w.pos]
	w.pos++
	return b, true
}

// uvarint reads an unsigned varint of at most maxLen bytes (5 or 10) whose
// value fits 32 or 64 bits.
func (w *walker) uvarint(maxLen int) (uint64, error) {
	if len(w.buf)-w.pos < maxLen {
		w.fill(maxLen)
	}
	u, p := uvarintAt(w.buf, w.pos, maxLen)
	if p < 0 {
		return 0, varintError(p)
	}
	w.pos = p
	return u, nil
}

// varint32 reads a zigzag varint of a 32-bit value.
func (w *walker) varint32() (int32, error) {
	u, err := w.uvarint(5)
	return int32(uint32(u)>>1) ^ -int32(u&1), err
}

// varint64 reads a zigzag varlong.
func (w *walker) varint64() (int64, error) {
	u, err := w.uvarint(10)
	return int64(u>>1) ^ -int64(u&1), err
}

// walkedRecord is what the walker reads of a record. Positions are in the
// section (for a streamed walk, only start and end are set).
type walkedRecord struct {
	start, end     int64 // the length prefix's first byte; the byte after the record
	tsStart, tsEnd int64 // the timestamp delta's bytes
	keyAt, valueAt int64 // the key's and the value's first byte
	TimestampDelta int64
	OffsetDelta    int32
	KeyLength      int32 // -1 for a null key
	ValueLength    int32 // -1 for a null value
}

// next reads one record, checking that every length and count lies within
// the record and that its fields fill exactly its length.
func (w *walker) next(r *walkedRecord) error {
	if w.src == nil {
		end, err := recordAt(w.buf, w.pos, r)
		if err != nil {
			return err
		}
		w.pos = end
		if w.crcOn && end-w.crcDone >= crcChunk {
			w.crc = crc32.Update(w.crc, castagnoli, w.buf[w.crcDone:end])
			w.crcDone = end
		}
		return nil
	}
	if len(w.buf)-w.pos < 5 {
		w.fill(5)
	}
	u, p := uvarintAt(w.buf, w.pos, 5)
	if p < 0 {
		return varintError(p)
	}
	length := int32(uint32(u)>>1) ^ -int32(u&1)
	if length < 1 {
		return fmt.Errorf("%w: %d", errRecordLength, length)
	}
	if whole := p - w.pos + int(length); whole <= len(w.window) {
		// The fast path: the whole record into the window, parsed in
		// place.
		w.fill(whole)
		if len(w.buf)-w.pos < whole {
			return errRecordShort
		}
		end, err := recordAt(w.buf, w.pos, r)
		if err != nil {
			return err
		}
		r.start, r.end = w.base+int64(w.pos), w.base+int64(end)
		w.pos = end
		return nil
	}
	r.start = w.offset()
	w.pos = p
	r.end = w.offset() + int64(length)
	return w.nextStreamed(r)
}

// recordAt parses the record whose length prefix is at b[p], which b must
// hold whole, setting r (positions in b) and returning the position after
// it. It is the produce path's inner loop: each varint's one- and two-byte
// cases are written out where it is read.
func recordAt(b []byte, p int, r *walkedRecord) (int, error) {
	start := p
	var u uint64
	if p < len(b) && b[p] < 0x80 {
		u, p = uint64(b[p]), p+1
	} else if p+1 < len(b) && b[p+1] < 0x80 {
		u, p = uint64(b[p]&0x7F)|uint64(b[p+1])<<7, p+2
	} else if u, p = uvarintSlow(b, p, 5); p < 0 {
		return 0, varintError(p)
	}
	length := int32(uint32(u)>>1) ^ -int32(u&1)
	if length < 1 {
		return 0, fmt.Errorf("%w: %d", errRecordLength, length)
	}
	if int(length) > len(b)-p {
		return 0, fmt.Errorf("%w: %d bytes, %d left", errRecordShort, length, len(b)-p)
	}
	body := b[:p+int(length)] // positions stay b's
	end := len(body)
	p++ // attributes, unused
	tsStart := p
	if p < end && body[p] < 0x80 {
		u, p = uint64(body[p]), p+1
	} else if u, p = uvarintSlow(body, p, 10); p < 0 {
		return 0, varintError(p)
	}
	tsDelta := int64(u>>1) ^ -int64(u&1)
	tsEnd := p
	if p < end && body[p] < 0x80 {
		u, p = uint64(body[p]), p+1
	} else if u, p = uvarintSlow(body, p, 5); p < 0 {
		return 0, varintError(p)
	}
	offsetDelta := int32(uint32(u)>>1) ^ -int32(u&1)
	// The key, then the value: written out twice, so that each has its
	// own branches to predict.
	if p < end && body[p] < 0x80 {
		u, p = uint64(body[p]), p+1
	} else if p+1 < end && body[p+1] < 0x80 {
		u, p = uint64(body[p]&0x7F)|uint64(body[p+1])<<7, p+2
	} else if u, p = uvarintSlow(body, p, 5); p < 0 {
		return 0, varintError(p)
	}
	keyLength, keyAt := int32(uint32(u)>>1)^-int32(u&1), p
	if keyLength < -1 || int(keyLength) > end-p {
		return 0, fieldError(keyLength)
	}
	p += max(int(keyLength), 0)
	if p < end && body[p] < 0x80 {
		u, p = uint64(body[p]), p+1
	} else if p+1 < end && body[p+1] < 0x80 {
		u, p = uint64(body[p]&0x7F)|uint64(body[p+1])<<7, p+2
	} else if u, p = uvarintSlow(body, p, 5); p < 0 {
		return 0, varintError(p)
	}
	valueLength, valueAt := int32(uint32(u)>>1)^-int32(u&1), p
	if valueLength < -1 || int(valueLength) > end-p {
		return 0, fieldError(valueLength)
	}
	p += max(int(valueLength), 0)
	if p < end && body[p] < 0x80 {
		u, p = uint64(body[p]), p+1
	} else if u, p = uvarintSlow(body, p, 5); p < 0 {
		return 0, varintError(p)
	}
	if headers := int32(uint32(u)>>1) ^ -int32(u&1); headers != 0 {
		// A header takes at least two bytes (two one-byte lengths).
		if left := end - p; headers < 0 || int(headers) > left/2 {
			return 0, fmt.Errorf("%w: %d headers, %d bytes left", errHeaderCount, headers, left)
		}
		for range headers {
			var err error
			if p, err = skipField(body, p, 0); err != nil {
				return 0, err
			}
			if p, err = skipField(body, p, -1); err != nil {
				return 0, err
			}
		}
	}
	if p != end {
		return 0, fmt.Errorf("%w: length %d, fields take %d", errRecordOverrun, length, p-(end-int(length)))
	}
	// Field by field: a composite literal would be built, then copied.
	r.start, r.end, r.tsStart, r.tsEnd = int64(start), int64(end), int64(tsStart), int64(tsEnd)
	r.keyAt, r.valueAt = int64(keyAt), int64(valueAt)
	r.TimestampDelta, r.OffsetDelta, r.KeyLength, r.ValueLength = tsDelta, offsetDelta, keyLength, valueLength
	return end, nil
}

func fieldError(n int32) error { return fmt.Errorf("%w: %d", errFieldLength, n) }

// skipField reads a length (at least least) at b[p:] and passes over that
// many bytes, which b must hold.
func skipField(b []byte, p int, least int32) (int, error) {
	u, p := uvarintAt(b, p, 5)
	if p < 0 {
		return 0, varintError(p)
	}
	n := int32(uint32(u)>>1) ^ -int32(u&1)
	if n < least || int(n) > len(b)-p {
		return 0, fieldError(n)
	}
	return p + max(int(n), 0), nil
}

// Negative positions uvarintAt returns for failures.
const (
	posShort  = -1
	posVarint = -2
)

func varintError(p int) error {
	if p == posShort {
		return errRecordShort
	}
	return errVarint
}

// uvarintAt reads an unsigned varint of at most maxLen bytes (5 or 10) at
// b[p:], whose value fits 32 or 64 bits, and returns it and the position
// after it, or a negative position.
func uvarintAt(b []byte, p, maxLen int) (uint64, int) {
	if uint(p) < uint(len(b)) {
		if c := b[p]; c < 0x80 {
			return uint64(c), p + 1
		}
	}
	return uvarintSlow(b, p, maxLen)
}

func uvarintSlow(b []byte, p, maxLen int) (uint64, int) {
	if uint(p+1) < uint(len(b)) && b[p+1] < 0x80 {
		return uint64(b[p]&0x7F) | uint64(b[p+1])<<7, p + 2 // the common two bytes
	}
	var x uint64
	for i := 0; i < maxLen; i++ {
		if p+i >= len(b) {
			return 0, posShort
		}
		c := b[p+i]
		if c < 0x80 {
			// The last byte may carry only the bits that fit.
			if i == maxLen-1 && (maxLen == 5 && c > 0x0F || maxLen == 10 && c > 1) {
				return 0, posVarint
			}
			return x | uint64(c)<<(7*i), p + i + 1
		}
		x |= uint64(c&0x7F) << (7 * i)
	}
	return 0, posVarint
}

// nextStreamed reads the rest of a record larger than the window, after
// its length (r.start and r.end are set), field by field through refills.
func (w *walker) nextStreamed(r *walkedRecord) error {
	bodyStart := w.offset()
	var err error
	if _, ok := w.byte1(); !ok { // attributes, unused
		return errRecordShort
	}
	if r.TimestampDelta, err = w.varint64(); err != nil {
		return err
	}
	if r.OffsetDelta, err = w.varint32(); err != nil {
		return err
	}
	if r.KeyLength, err = w.field(r.end, -1); err != nil {
		return err
	}
	if r.ValueLength, err = w.field(r.end, -1); err != nil {
		return err
	}
	headers, err := w.varint32()
	if err != nil {
		return err
	}
	if left := r.end - w.offset(); headers < 0 || int64(headers) > left/2 {
		return fmt.Errorf("%w: %d headers, %d bytes left", errHeaderCount, headers, max(left, 0))
	}
	for range headers {
		if _, err := w.field(r.end, 0); err != nil {
			return err
		}
		if _, err := w.field(r.end, -1); err != nil {
			return err
		}
	}
	if at := w.offset(); at != r.end {
		return fmt.Errorf("%w: length %d, fields take %d", errRecordOverrun, r.end-bodyStart, at-bodyStart)
	}
	return nil
}

// field reads a length (at least least) and passes over that many bytes,
// which must end by end.
func (w *walker) field(end int64, least int32) (int32, error) {
	n, err := w.varint32()
	if err != nil {
		return 0, err
	}
	if n < least || int64(n) > end-w.offset() {
		return 0, fmt.Errorf("%w: %d", errFieldLength, n)
	}
	if n > 0 && !w.skip(int64(n)) {
		return 0, errRecordShort
	}
	return n, nil
}

// atEnd reports whether the section has no bytes left (for a stream, the
// decoder ends, its trailer checked), and how many it has otherwise (for a
// stream, at least).
func (w *walker) atEnd() (bool, int64) {
	w.fill(1)
	left := int64(len(w.buf) - w.pos)
	return left == 0 && w.err == nil, left
}
