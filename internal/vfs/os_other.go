//go:build !linux

package vfs

import "os"

func datasync(f *os.File) error { return f.Sync() }

func openFile(name string, flag int) (*os.File, error) { return os.OpenFile(name, flag, 0o644) }
