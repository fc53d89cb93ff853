// Package vfs is the small file-system interface the storage engine does all
// its I/O through, so that tests can inject faults and simulate power loss
// (the model is cockroachdb/pebble's vfs).
//
// Three implementations:
//
//   - Default, the operating system's file system. Its files expose their
//     descriptors (Fd) for mmap(2) and sendfile(2).
//   - NewMem, an in-memory file system that tracks what was synced: its
//     CrashClone keeps only file data that was synced and directory entries
//     whose directory was synced, the state a machine finds after power loss.
//   - NewErrorFS, a wrapper that fails chosen operations on chosen paths,
//     deterministically (counted, never random), including short writes.
//
// Paths are slash-separated and passed through unchanged to the OS
// implementation; the in-memory one cleans them and treats relative and
// absolute paths alike.
package vfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// InvalidFd is what File.Fd returns for a file with no operating-system
// descriptor (an in-memory file). Callers that would mmap or sendfile fall
// back to ReadAt/WriteAt.
const InvalidFd = ^uintptr(0)

// File is an open file.
//
// ReadAt, WriteAt, Sync, Stat and Fd may be called concurrently with each
// other; Write uses and advances the handle's own position and must not be
// called concurrently with itself. Slices passed in are not retained.
type File interface {
	io.Closer
	io.ReaderAt
	io.Writer
	io.WriterAt
	// Sync makes the file's data (and its size) durable. For a directory
	// opened with OpenDir it makes the directory's entries durable.
	Sync() error
	// Truncate changes the file's size, extending it with zeros.
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	// Fd returns the operating-system descriptor, or InvalidFd. The
	// descriptor belongs to the File: it is valid until Close.
	Fd() uintptr
}

// FS is a file system. All methods may be called concurrently.
type FS interface {
	// Create creates the named file for reading and writing, truncating it
	// if it exists.
	Create(name string) (File, error)
	// Open opens the named file for reading.
	Open(name string) (File, error)
	// OpenReadWrite opens the named file for reading and writing, creating
	// it (empty) if it does not exist.
	OpenReadWrite(name string) (File, error)
	// OpenDir opens a directory so that its entries can be synced.
	OpenDir(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes a path and everything below it; a missing path is
	// not an error.
	RemoveAll(name string) error
	// Rename renames oldname to newname, replacing newname if it is a file.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and any missing parents.
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the names (not paths) of a directory's entries, sorted.
	List(dir string) ([]string, error)
	// Stat describes the named file.
	Stat(name string) (os.FileInfo, error)
}

// ReadFile reads a whole file.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size())
	n, err := f.ReadAt(buf, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(buf)) {
		return nil, err
	}
	return buf[:n], nil
}

// WriteFileAtomic replaces name with data so that after a crash the file
// holds either its old contents or data, never a mix: it writes name+".tmp",
// syncs it, renames it over name and syncs the directory.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, name); err != nil {
		return err
	}
	return SyncDir(fs, filepath.Dir(name))
}

// SyncDir makes a directory's entries durable.
func SyncDir(fs FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// Exists reports whether name exists. Errors other than not-exist count as
// existing, so that callers go on to fail on the real operation.
func Exists(fs FS, name string) bool {
	_, err := fs.Stat(name)
	return err == nil || !errors.Is(err, os.ErrNotExist)
}
