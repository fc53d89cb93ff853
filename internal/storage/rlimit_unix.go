//go:build unix

package storage

import (
	"errors"
	"syscall"
)

// openFileLimit returns the soft RLIMIT_NOFILE (Go raises it to the hard
// limit at start-up).
func openFileLimit() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == ^uint64(0) {
		return 0, false
	}
	return uint64(lim.Cur), true
}

// tooManyFiles reports whether err is the open-file limit's.
func tooManyFiles(err error) bool { return errors.Is(err, syscall.EMFILE) }
