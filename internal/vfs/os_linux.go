package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// openFile opens a regular file or directory with open(2) and wraps the
// descriptor, which os.OpenFile would first register with the network
// poller (which refuses regular files) and switch between non-blocking and
// blocking modes: four system calls fewer an open, which counts when a
// broker opens tens of thousands of segment files at start-up.
func openFile(name string, flag int) (*os.File, error) {
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, 0o644)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
}

// datasync is fdatasync(2) on f's descriptor, holding a reference to it
// (RawConn.Control): a Close meanwhile does not release the number until
// the call returns, so it is never reused under us, and a Sync after Close
// fails with os.ErrClosed instead of syncing whatever file the number
// names by then (a roll flusher may sync a segment that retention is
// closing).
func datasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		// Control fails only when the file is closed.
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: os.ErrClosed}
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}
