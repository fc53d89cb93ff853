package storage

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkRecoveryCold is BenchmarkRecovery with the segment files evicted
// from the page cache before each open (fsync, then
// posix_fadvise(DONTNEED)): it measures reading from the disk.
func BenchmarkRecoveryCold(b *testing.B) {
	benchRecovery(b, func(b *testing.B, dir string) {
		names, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, name := range names {
			f, err := os.Open(name)
			if err != nil {
				b.Fatal(err)
			}
			f.Sync()
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
}
