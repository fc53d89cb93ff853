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

	// Frames up to maxPooledFrame bytes are read into pooled buffers of
	// power-of-two sizes from minPooledFrame; larger frames are allocated
	// as their bytes arrive (readLargeFrame) and left to the GC.
	minPooledShift  = 9 // 512 B
	maxPooledShift  = 20
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

// getFrame returns a frame of n bytes (n <= maxPooledFrame).
func getFrame(n int) *frame {
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
	if n > maxPooledFrame {
		buf, err := readLargeFrame(r, n)
		if err != nil {
			return nil, err
		}
		return &frame{buf: buf, class: -1}, nil
	}
	f := getFrame(n)
	if _, err := io.ReadFull(r, f.buf); err != nil {
		putFrame(f)
		return nil, noEOF(err)
	}
	return f, nil
}

// readLargeFrame reads n bytes, growing its buffer as the bytes arrive, so
// memory follows what the client sent rather than what it announced.
func readLargeFrame(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, maxPooledFrame)
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf), n))
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, noEOF(err)
		}
	}
	return buf, nil
}

// noEOF turns io.EOF inside a frame into io.ErrUnexpectedEOF: the client
// hung up mid-request.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
