//go:build !(linux || darwin || freebsd)

package storage

import "errors"

const canMmap = false

func mmapFile(uintptr, int) ([]byte, error) { return nil, errors.ErrUnsupported }

func munmap([]byte) error { return nil }
