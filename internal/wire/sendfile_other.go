//go:build !linux

package wire

import "syscall"

// canSendfile is whether this platform has the zero-copy path; elsewhere
// spliced regions are always copied.
const canSendfile = false

func sendfile(syscall.RawConn, FileRegion, int) error {
	panic("wire: sendfile called on a platform without it")
}
