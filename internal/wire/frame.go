package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
)

const (
	// DefaultMaxRequestSize is Kafka's socket.request.max.bytes default.
	DefaultMaxRequestSize = 104857600

	// minFrameSize is the smallest frame with a request header: v0 is
	// api_key, api_version and correlation_id. A v1 or v2 header also
	// needs its client id, which header parsing checks.
	minFrameSize = 8

	// Frames are read into pooled buffers of power-of-two sizes from 512
	// bytes to maxPooledFrame. Up to maxEagerFrame bytes, the buffer has
	// the announced size at once; a larger frame's buffer grows as its
	// bytes arrive (readLargeFrame), so memory follows what the client
	// sent, not what it announced. Frames beyond maxPooledFrame (up to
	// socket.request.max.bytes) are allocated and left to the GC.
	minPooledShift  = 9 // 512 B
	maxEagerShift   = 20
	maxEagerFrame   = 1 << maxEagerShift
	maxPooledShift  = 26 // 64 MiB
	maxPooledFrame  = 1 << maxPooledShift
	numFrameClasses = maxPooledShift - minPooledShift + 1
)

var (
	errFrameTooLarge = errors.New("wire: frame larger than socket.request.max.bytes")
	errFrameTooSmall = errors.New("wire: frame smaller than a request header")
)

// frame is a request's bytes, without the size prefix. class is its pool
// class, or -1 when it is not pooled.
type frame struct {
	buf   []byte
	class int
}

var framePools [numFrameClasses]sync.Pool

// getFrame returns a frame of n bytes: pooled up to maxPooledFrame, its
// contents whatever the last user left.
func getFrame(n int) *frame {
	if n > maxPooledFrame {
		return &frame{buf: make([]byte, n), class: -1}
	}
	class := 0
	if n > 1<<minPooledShift {
		class = bits.Len(uint(n-1)) - minPooledShift
	}
	if f, ok := framePools[class].Get().(*frame); ok {
		f.buf = f.buf[:n]
		return f
	}
	return &frame{buf: make([]byte, n, 1<<(class+minPooledShift)), class: class}
}

// putFrame recycles f. Nothing may refer to f.buf afterwards.
func putFrame(f *frame) {
	if f == nil || f.class < 0 {
		return
	}
	framePools[f.class].Put(f)
}

// frameSizeError reports a size prefix outside [minFrameSize, max].
type frameSizeError struct {
	size, max int64
	err       error
}

func (e *frameSizeError) Error() string {
	return fmt.Sprintf("%v: size %d, limit %d", e.err, e.size, e.max)
}
func (e *frameSizeError) Unwrap() error { return e.err }

// readFrame reads one size-prefixed frame. The size is checked against
// [minFrameSize, max] before any buffer is allocated for it.
func readFrame(r *bufio.Reader, max int32) (*frame, error) {
	head, err := r.Peek(4)
	if err != nil {
		if len(head) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(head))
	if size > max {
		return nil, &frameSizeError{size: int64(size), max: int64(max), err: errFrameTooLarge}
	}
	if size < minFrameSize {
		return nil, &frameSizeError{size: int64(size), max: int64(max), err: errFrameTooSmall}
	}
	_, _ = r.Discard(4) // cannot fail: Peek returned 4 bytes
	n := int(size)
	if n > maxEagerFrame {
		return readLargeFrame(r, n)
	}
	f := getFrame(n)
	if _, err := io.ReadFull(r, f.buf); err != nil {
		putFrame(f)
		return nil, noEOF(err)
	}
	return f, nil
}

// readLargeFrame reads a frame of n bytes, growing its buffer (from the
// pools, doubling) as the bytes arrive, so memory follows what the client
// sent rather than what it announced. A produce request of several
// megabytes, the common case under load, then costs no fresh zeroed
// allocation per step; what it costs is the copies of the doubling.
func readLargeFrame(r io.Reader, n int) (*frame, error) {
	f := getFrame(maxEagerFrame)
	f.buf = f.buf[:0]
	for len(f.buf) < n {
		if len(f.buf) == cap(f.buf) {
			grown := getFrame(min(2*cap(f.buf), n))
			grown.buf = grown.buf[:len(f.buf)]
			copy(grown.buf, f.buf)
			putFrame(f)
			f = grown
		}
		m, err := io.ReadFull(r, f.buf[len(f.buf):min(cap(f.buf), n)])
		f.buf = f.buf[:len(f.buf)+m]
		if err != nil {
			putFrame(f)
			return nil, noEOF(err)
		}
	}
	return f, nil
}

// noEOF turns io.EOF inside a frame into io.ErrUnexpectedEOF: the client
// hung up mid-request.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
