//go:build linux

package wire

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// canSendfile is whether this platform has the zero-copy path.
const canSendfile = true

// maxSendfileChunk keeps each sendfile(2) call under Linux's per-call cap
// (0x7ffff000 bytes) with room to spare.
const maxSendfileChunk = 1 << 30

// sendfile sends r to the socket behind sock with sendfile(2) at explicit
// offsets, so the file's shared position is never read or moved. When the
// socket buffer is full it waits for the poller (returning false from the
// RawConn callback), which honors the connection's write deadline.
func sendfile(sock syscall.RawConn, r FileRegion, fd int) error {
	off, end := r.Pos, r.Pos+r.Len
	var sendErr error
	err := sock.Write(func(s uintptr) bool {
		for off < end {
			pos := off
			n, err := unix.Sendfile(int(s), fd, &pos, int(min(end-off, maxSendfileChunk)))
			if n > 0 {
				off += int64(n)
			}
			switch {
			case errors.Is(err, unix.EAGAIN):
				return false
			case errors.Is(err, unix.EINTR):
			case err != nil:
				sendErr = fmt.Errorf("wire: sendfile at %d: %w", off, err)
				return true
			case n == 0:
				sendErr = &regionError{fmt.Errorf("wire: sendfile at %d: region past end of file: %w", off, io.ErrUnexpectedEOF)}
				return true
			}
		}
		return true
	})
	runtime.KeepAlive(r.File) // fd belongs to r.File
	if err != nil {
		return err
	}
	return sendErr
}
