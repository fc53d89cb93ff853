package powerfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// dirOp is a directory operation not yet durable.
type dirOp struct {
	what string
	// dirs are the inode numbers (the mount's) of the directories it
	// changed: an fsync of one of them makes it durable.
	dirs []uint64
	// undo reverts it; it runs only after every later operation was
	// undone, so the names it uses are where it left them.
	undo func() error
	// commit, if set, runs once it is durable (to drop a stashed file).
	commit func()
}

// node is a loopback node whose changes are recorded.
type node struct {
	*fs.LoopbackNode
	pfs *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

// WrapChild makes every node of the tree a recording one.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), pfs: n.pfs}
}

// backingPath is the node's path in the backing directory.
func (n *node) backingPath() string { return filepath.Join(n.pfs.backing, n.Path(nil)) }

// ino is the node's inode number in the mount, which names it in dirOp.
func (n *node) ino() uint64 { return n.StableAttr().Ino }

// recordLocked adds op to the undo log. f.mu must be held.
func (f *FS) recordLocked(op *dirOp) { f.mu.ops = append(f.mu.ops, op) }

// stashNameLocked returns a fresh name in the stash. f.mu must be held.
func (f *FS) stashNameLocked() string {
	f.mu.stashSeq++
	return filepath.Join(f.stash, strconv.Itoa(f.mu.stashSeq))
}

// syncDirLocked makes durable every directory operation up to the last
// one that changed the directory ino. f.mu must be held.
func (f *FS) syncDirLocked(ino uint64) {
	last := -1
	for i, op := range f.mu.ops {
		for _, d := range op.dirs {
			if d == ino {
				last = i
			}
		}
	}
	for _, op := range f.mu.ops[:last+1] {
		if op.commit != nil {
			op.commit()
		}
	}
	f.mu.ops = append([]*dirOp(nil), f.mu.ops[last+1:]...)
}

// created records a new name p in n, undone by removing it.
// f.mu must be held.
func (n *node) createdLocked(what, p string) {
	n.pfs.recordLocked(&dirOp{what: what + " " + p, dirs: []uint64{n.ino()}, undo: func() error { return os.Remove(p) }})
}

// truncatingLocked saves what a truncate of the file at p (or open as
// fh, if not nil) to size will overwrite. f.mu must be held.
func (n *node) truncatingLocked(p string, fh fs.FileHandle, size int64) syscall.Errno {
	f := n.pfs
	var s *fileState
	var err error
	if h, ok := fh.(*fileHandle); ok {
		s, err = f.stateForFdLocked(h.fd())
	} else {
		s, err = f.stateForPathLocked(p)
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	return fs.ToErrno(f.saveLocked(s, size, s.syncedSize))
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return nil, nil, 0, syscall.EIO
	}
	p := filepath.Join(n.backingPath(), name)
	_, err := os.Lstat(p)
	existed := err == nil
	if existed && flags&syscall.O_TRUNC != 0 && flags&syscall.O_EXCL == 0 {
		if errno := n.truncatingLocked(p, nil, 0); errno != 0 {
			return nil, nil, 0, errno
		}
	}
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !existed {
		n.createdLocked("create", p)
	}
	return ch, f.wrap(fh), fuseFlags, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return nil, syscall.EIO
	}
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno == 0 {
		n.createdLocked("mkdir", filepath.Join(n.backingPath(), name))
	}
	return ch, errno
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return nil, syscall.EIO
	}
	ch, errno := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if errno == 0 {
		n.createdLocked("mknod", filepath.Join(n.backingPath(), name))
	}
	return ch, errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return nil, syscall.EIO
	}
	ch, errno := n.LoopbackNode.Symlink(ctx, target, name, out)
	if errno == 0 {
		n.createdLocked("symlink", filepath.Join(n.backingPath(), name))
	}
	return ch, errno
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return nil, syscall.EIO
	}
	ch, errno := n.LoopbackNode.Link(ctx, target, name, out)
	if errno == 0 {
		n.createdLocked("link", filepath.Join(n.backingPath(), name))
	}
	return ch, errno
}

// Unlink moves the file to the stash, from where a cut brings it back
// unless the unlink was made durable.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return syscall.EIO
	}
	p := filepath.Join(n.backingPath(), name)
	fi, err := os.Lstat(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	if fi.IsDir() {
		return syscall.EISDIR
	}
	return n.stashLocked("unlink", p)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return syscall.EIO
	}
	p := filepath.Join(n.backingPath(), name)
	fi, err := os.Lstat(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	if !fi.IsDir() {
		return syscall.ENOTDIR
	}
	if empty, err := isEmptyDir(p); err != nil {
		return fs.ToErrno(err)
	} else if !empty {
		return syscall.ENOTEMPTY
	}
	return n.stashLocked("rmdir", p)
}

// stashLocked removes the name p by moving it into the stash.
// f.mu must be held.
func (n *node) stashLocked(what, p string) syscall.Errno {
	stash := n.pfs.stashNameLocked()
	if err := os.Rename(p, stash); err != nil {
		return fs.ToErrno(err)
	}
	n.pfs.recordLocked(&dirOp{
		what:   what + " " + p,
		dirs:   []uint64{n.ino()},
		undo:   func() error { return os.Rename(stash, p) },
		commit: func() { os.Remove(stash) },
	})
	return 0
}

func isEmptyDir(p string) (bool, error) {
	d, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

// Rename keeps a file it replaces in the stash (a hard link, so the
// rename stays atomic for the processes under test).
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return syscall.EIO
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	p1 := filepath.Join(n.backingPath(), name)
	p2 := filepath.Join(np.backingPath(), newName)
	op := &dirOp{what: "rename " + p1 + " " + p2, dirs: []uint64{n.ino(), np.ino()}}
	switch flags {
	case 0:
		st1, err := os.Lstat(p1)
		if err != nil {
			return fs.ToErrno(err)
		}
		st2, err := os.Lstat(p2)
		if err != nil {
			if err := os.Rename(p1, p2); err != nil {
				return fs.ToErrno(err)
			}
			op.undo = func() error { return os.Rename(p2, p1) }
			break
		}
		if os.SameFile(st1, st2) {
			return fs.ToErrno(os.Rename(p1, p2)) // changes nothing
		}
		stash := f.stashNameLocked()
		if st2.IsDir() {
			if !st1.IsDir() {
				return syscall.EISDIR
			}
			if empty, err := isEmptyDir(p2); err != nil {
				return fs.ToErrno(err)
			} else if !empty {
				return syscall.ENOTEMPTY
			}
			if err := os.Rename(p2, stash); err != nil {
				return fs.ToErrno(err)
			}
			if err := os.Rename(p1, p2); err != nil {
				os.Rename(stash, p2)
				return fs.ToErrno(err)
			}
		} else {
			if st1.IsDir() {
				return syscall.ENOTDIR
			}
			if err := os.Link(p2, stash); err != nil {
				return fs.ToErrno(err)
			}
			if err := os.Rename(p1, p2); err != nil {
				os.Remove(stash)
				return fs.ToErrno(err)
			}
		}
		op.undo = func() error {
			if err := os.Rename(p2, p1); err != nil {
				return err
			}
			return os.Rename(stash, p2)
		}
		op.commit = func() { os.Remove(stash) }
	case unix.RENAME_NOREPLACE:
		if err := unix.Renameat2(unix.AT_FDCWD, p1, unix.AT_FDCWD, p2, unix.RENAME_NOREPLACE); err != nil {
			return fs.ToErrno(err)
		}
		op.undo = func() error { return os.Rename(p2, p1) }
	case unix.RENAME_EXCHANGE:
		if err := unix.Renameat2(unix.AT_FDCWD, p1, unix.AT_FDCWD, p2, unix.RENAME_EXCHANGE); err != nil {
			return fs.ToErrno(err)
		}
		op.undo = func() error { return unix.Renameat2(unix.AT_FDCWD, p1, unix.AT_FDCWD, p2, unix.RENAME_EXCHANGE) }
	default:
		return syscall.EINVAL
	}
	f.recordLocked(op)
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.dead {
		return nil, 0, syscall.EIO
	}
	if flags&syscall.O_TRUNC != 0 {
		if errno := n.truncatingLocked(n.backingPath(), nil, 0); errno != 0 {
			return nil, 0, errno
		}
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return f.wrap(fh), fuseFlags, 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f := n.pfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if size, ok := in.GetSize(); ok {
		if f.mu.dead {
			return syscall.EIO
		}
		if errno := n.truncatingLocked(n.backingPath(), fh, int64(size)); errno != 0 {
			return errno
		}
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

// CopyFileRange is refused, so the kernel copies through reads and
// writes, which are recorded.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, errno := fs.NewLoopbackDirStream(n.backingPath())
	if errno != 0 {
		return nil, 0, errno
	}
	inner, ok := ds.(dirStream)
	if !ok {
		ds.Close()
		return nil, 0, syscall.ENOTSUP
	}
	return &dirHandle{dirStream: inner, n: n}, 0, 0
}
