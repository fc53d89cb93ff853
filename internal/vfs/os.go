package vfs

import (
	"os"
	"sort"
)

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	return openOS(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, false)
}

func (osFS) Open(name string) (File, error) {
	return openOS(name, os.O_RDONLY, false)
}

func (osFS) OpenReadWrite(name string) (File, error) {
	return openOS(name, os.O_RDWR|os.O_CREATE, false)
}

func (osFS) OpenDir(name string) (File, error) {
	return openOS(name, os.O_RDONLY, true)
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                 { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) List(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

func openOS(name string, flag int, dir bool) (File, error) {
	f, err := openFile(name, flag)
	if err != nil {
		return nil, err
	}
	// Fd puts the file in blocking mode, which regular files and
	// directories are in anyway; take it once so that later calls are
	// plain field reads.
	return &osFile{File: f, fd: f.Fd(), dir: dir}, nil
}

// osFile is an *os.File whose Sync, for a regular file, is fdatasync(2):
// it makes the data and the size durable without forcing a journal commit
// for the modification time, which is what a log append needs.
type osFile struct {
	*os.File
	fd  uintptr
	dir bool
}

func (f *osFile) Fd() uintptr { return f.fd }

func (f *osFile) Sync() error {
	if f.dir {
		return f.File.Sync()
	}
	return datasync(f.File)
}
