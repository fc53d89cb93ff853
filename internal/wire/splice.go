package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
)

// File is a file whose regions a response can splice. *os.File is one.
type File interface {
	io.ReaderAt
	// Fd returns the OS file descriptor, or ^uintptr(0) when the file has
	// none (an in-memory file); wire then copies with ReadAt.
	Fd() uintptr
}

// cookieLen is the size of Splice.Cookie.
const cookieLen = 16

// NoFd is what File.Fd returns for a file without an OS descriptor.
const NoFd = ^uintptr(0)

// FileRegion is Len bytes of File from offset Pos.
type FileRegion struct {
	File     File
	Pos, Len int64
}

// Splice says: where the encoded response body holds Cookie, as the content
// of a bytes field (a fetch partition's records), send Region instead. The
// handler encodes the field as the 16 cookie bytes; wire rewrites the
// field's length to Region.Len. The region must stay readable, at its full
// length, until Response.Done is called; if it comes up short, the frame
// can no longer be completed and wire closes the connection.
type Splice struct {
	Cookie [16]byte
	Region FileRegion
}

// NewCookie returns a random cookie. The generator is seeded from the OS,
// so a client cannot plant a cookie in a request (a topic name, say) that
// the response then echoes.
func NewCookie() [16]byte {
	var c [16]byte
	binary.LittleEndian.PutUint64(c[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(c[8:], rand.Uint64())
	return c
}

var errBadSplice = errors.New("wire: bad splice")

// splicePoint is where one region goes in an encoded response: the bytes
// enc[prefixStart:cookieEnd] (the field's length and the cookie) are
// replaced by prefix[:prefixLen] and the region.
type splicePoint struct {
	prefixStart, cookieEnd int
	prefix                 [binary.MaxVarintLen32]byte
	prefixLen              int
	region                 FileRegion
}

// planSplices finds each splice's cookie in enc (in order, searching from
// start and then from the previous cookie) and computes the new length
// prefixes. A cookie must be the content of a bytes field: in a flexible
// response its compact length uvarint(16+1) precedes it, otherwise the
// int32 16. It returns the points and the size of the whole frame after
// splicing, not counting the 4-byte size prefix (enc includes it).
func planSplices(enc []byte, start int, splices []Splice, flexible bool, points []splicePoint) ([]splicePoint, int64, error) {
	size := int64(len(enc) - 4)
	from := start
	for i := range splices {
		s := &splices[i]
		if s.Region.Len < 0 || s.Region.Pos < 0 || s.Region.Len > math.MaxInt32-1 || s.Region.File == nil {
			return nil, 0, fmt.Errorf("%w %d: region at %d, %d bytes", errBadSplice, i, s.Region.Pos, s.Region.Len)
		}
		at := bytes.Index(enc[from:], s.Cookie[:])
		if at < 0 {
			return nil, 0, fmt.Errorf("%w %d: cookie not in the encoded response", errBadSplice, i)
		}
		at += from
		p := splicePoint{cookieEnd: at + cookieLen, region: s.Region}
		if flexible {
			if at < 1 || enc[at-1] != cookieLen+1 {
				return nil, 0, fmt.Errorf("%w %d: cookie is not a compact bytes field", errBadSplice, i)
			}
			p.prefixStart = at - 1
			p.prefixLen = binary.PutUvarint(p.prefix[:], uint64(s.Region.Len)+1)
		} else {
			if at < 4 || binary.BigEndian.Uint32(enc[at-4:]) != cookieLen {
				return nil, 0, fmt.Errorf("%w %d: cookie is not a bytes field", errBadSplice, i)
			}
			p.prefixStart = at - 4
			p.prefixLen = 4
			binary.BigEndian.PutUint32(p.prefix[:], uint32(s.Region.Len))
		}
		size += int64(p.prefixLen-(p.cookieEnd-p.prefixStart)) + s.Region.Len
		points = append(points, p)
		from = p.cookieEnd
	}
	if size > math.MaxInt32 {
		return nil, 0, fmt.Errorf("%w: spliced response of %d bytes exceeds a frame", errBadSplice, size)
	}
	return points, size, nil
}

// copyBufSize is the chunk in which the copying path moves a region.
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// copyRegion writes r to w through a pooled buffer with ReadAt, never
// touching the file's shared position.
func copyRegion(w io.Writer, r FileRegion) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for off, end := r.Pos, r.Pos+r.Len; off < end; {
		chunk := buf[:min(int64(len(buf)), end-off)]
		n, err := r.File.ReadAt(chunk, off)
		if n < len(chunk) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return &regionError{fmt.Errorf("wire: reading spliced region at %d: %w", off, err)}
		}
		if _, err := w.Write(chunk); err != nil {
			return err
		}
		off += int64(n)
	}
	return nil
}
