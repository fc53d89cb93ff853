//go:build !linux

package vfs

import "os"

func datasync(f *os.File, _ uintptr) error { return f.Sync() }
