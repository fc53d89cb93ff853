//go:build linux || darwin || freebsd

package storage

import "golang.org/x/sys/unix"

const canMmap = true

// mmapFile maps size bytes of the file shared and writable.
func mmapFile(fd uintptr, size int) ([]byte, error) {
	return unix.Mmap(int(fd), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

func munmap(b []byte) error { return unix.Munmap(b) }
