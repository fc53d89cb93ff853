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

func datasync(f *os.File, fd uintptr) error {
	for {
		err := unix.Fdatasync(int(fd))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
		return nil
	}
}
