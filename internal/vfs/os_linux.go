package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

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
