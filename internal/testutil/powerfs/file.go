package powerfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// fileHandle is an open regular file whose writes and syncs are recorded.
type fileHandle struct {
	lf  *fs.LoopbackFile
	pfs *FS
}

var (
	_ fs.FileReader    = (*fileHandle)(nil)
	_ fs.FileWriter    = (*fileHandle)(nil)
	_ fs.FileFsyncer   = (*fileHandle)(nil)
	_ fs.FileAllocater = (*fileHandle)(nil)
	_ fs.FileSetattrer = (*fileHandle)(nil)
	_ fs.FileGetattrer = (*fileHandle)(nil)
	_ fs.FileReleaser  = (*fileHandle)(nil)
	_ fs.FileFlusher   = (*fileHandle)(nil)
	_ fs.FileLseeker   = (*fileHandle)(nil)
	_ fs.FileGetlker   = (*fileHandle)(nil)
	_ fs.FileSetlker   = (*fileHandle)(nil)
	_ fs.FileSetlkwer  = (*fileHandle)(nil)
)

func (f *FS) wrap(fh fs.FileHandle) fs.FileHandle {
	return &fileHandle{lf: fh.(*fs.LoopbackFile), pfs: f}
}

// fd is the backing descriptor, valid until Release.
func (h *fileHandle) fd() int {
	fd, _ := h.lf.PassthroughFd()
	return fd
}

func (h *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f := h.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return 0, syscall.EIO
	}
	s, err := f.stateForFdLocked(h.fd())
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	if err := f.saveLocked(s, off, off+int64(len(data))); err != nil {
		return 0, fs.ToErrno(err)
	}
	n, errno := h.lf.Write(ctx, data, off)
	if n > 0 {
		if s.lastWrite == nil {
			s.lastWrite = &extent{}
		}
		s.lastWrite.off = off
		s.lastWrite.data = append(s.lastWrite.data[:0], data[:n]...)
	}
	return n, errno
}

// Fsync makes the file's data and size durable (fsync and fdatasync
// alike); the backing file is not synced (see the package doc).
func (h *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f := h.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return syscall.EIO
	}
	return fs.ToErrno(f.syncedLocked(h.fd()))
}

func (h *fileHandle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	f := h.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return syscall.EIO
	}
	s, err := f.stateForFdLocked(h.fd())
	if err != nil {
		return fs.ToErrno(err)
	}
	switch {
	case mode&(unix.FALLOC_FL_COLLAPSE_RANGE|unix.FALLOC_FL_INSERT_RANGE) != 0:
		err = f.saveLocked(s, int64(off), s.syncedSize)
	case mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0:
		err = f.saveLocked(s, int64(off), int64(off+size))
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	return h.lf.Allocate(ctx, off, size, mode)
}

// Setattr is called by node.Setattr, which saved what a truncate changes.
func (h *fileHandle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Setattr(ctx, in, out)
}

func (h *fileHandle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, buf, off)
}

func (h *fileHandle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}

func (h *fileHandle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }

func (h *fileHandle) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }

func (h *fileHandle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}

func (h *fileHandle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.lf.Getlk(ctx, owner, lk, flags, out)
}

func (h *fileHandle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlk(ctx, owner, lk, flags)
}

func (h *fileHandle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlkw(ctx, owner, lk, flags)
}

// dirStream is what go-fuse's loopback directory stream implements.
type dirStream interface {
	fs.DirStream
	fs.FileReaddirenter
	fs.FileSeekdirer
	fs.FileReleasedirer
	fs.FileFsyncdirer
}

// dirHandle is an open directory whose fsync makes directory operations
// durable.
type dirHandle struct {
	dirStream
	n *node
}

// Fsyncdir makes durable every directory operation up to the last one
// that changed this directory; the backing directory is not synced.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	f := d.n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return syscall.EIO
	}
	f.syncDirLocked(d.n.ino())
	return 0
}
