// Package powerfs is a FUSE file system for tests that can lose power.
//
// It passes every operation through to a backing directory, so the
// processes under test (real strata processes, started by the test) read
// and write real files at the mount point, and it remembers, as an undo
// log, what has not been made durable: the bytes each file had at its last
// fsync or fdatasync, and the directory operations made since the last
// directory fsync that covers them. A power cut (FS.Cut) discards exactly
// that, as LazyFS does, and mounts the file system again on the state a
// machine would find after it rebooted.
//
// # What survives a cut
//
// The model is the minimum that Linux's fsync(2) documents, with the
// ordering of ext4's journal for directory operations:
//
//   - A file's contents and size are those at its last fsync or fdatasync
//     (of any descriptor of the file, including msync of a mapping, which
//     reaches the file system as an fsync); bytes written since, through
//     write, a mapping, truncate or fallocate, are undone. A file never
//     synced is empty. Sync in part (sync_file_range) is not modelled.
//   - Directory operations (create, mkdir, mknod, symlink, link, unlink,
//     rmdir, rename) survive only when made durable by an fsync of a
//     directory: an fsync of directory D makes durable every directory
//     operation up to the last one that changed D, earlier operations on
//     other directories included, since ext4's journal commits metadata
//     operations in the order they were made and never reorders them. A
//     rename changes both its directories, so an fsync of either covers
//     it; a rename over an existing name is atomic: after a cut the name
//     holds either the old file or the new one.
//   - An fsync of a regular file does not make its name durable: fsync(2)
//     says "an explicit fsync() on a file descriptor for the directory is
//     also needed". ext4 happens to commit the name with the file (and
//     flushes a file renamed over another, auto_da_alloc); this model does
//     neither, so code that passes here does not lean on them. A file whose
//     data was synced but whose name was not is gone after a cut.
//
// The backing directory itself is never synced: the machine running the
// test does not lose power, and what survives is decided by the model
// above, not by the host's disk.
//
// # Faults at a cut
//
// Cut takes optional faults applied to the state after the cut: Tear
// keeps the first half of the last write made to a file since its last
// sync (a torn write: part of it reached the disk), and FlipBit inverts
// one bit of a file (a corruption the disk did not report).
//
// # Use
//
// Mount(t) mounts a fresh file system in a temporary directory and
// unmounts it when the test ends, failed or not; it skips the test, saying
// why, only where /dev/fuse or fusermount is missing. Processes the test
// starts use FS.Dir() as their data directory. To cut the power, kill
// every process using the mount (SIGKILL, and wait for it), then call Cut:
// it refuses writes and syncs from then on, unmounts, applies the undo log
// and mounts again, so nothing of the kernel's cache of the old mount
// survives either.
//
// # Concurrency and lock order
//
// FS.mu guards the undo log and the per-file states; every operation that
// changes the backing directory holds it for the whole change (writes to
// different files are serialised: this is a test tool). No other lock of
// this package is taken while FS.mu is held; go-fuse's own locks may be
// (NewInode), and go-fuse never calls back into this package while it
// holds one.
package powerfs
