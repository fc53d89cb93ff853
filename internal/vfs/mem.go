package vfs

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MemFS is an in-memory file system that remembers what was made durable.
// A file's data is durable up to its last Sync; a directory entry (a
// created, removed or renamed name) is durable once its directory was synced
// through OpenDir. CrashClone returns the file system a machine would find
// after losing power: durable state only.
//
// The root directory always exists. Directories created by MkdirAll are
// entries of their parents like any other, durable only once the parent is
// synced.
type MemFS struct {
	mu   sync.Mutex // guards every directory's children maps
	root *memNode
}

// NewMem returns an empty in-memory file system.
func NewMem() *MemFS {
	return &MemFS{root: newMemDir()}
}

type memNode struct {
	isDir bool

	// Directories; guarded by MemFS.mu.
	children       map[string]*memNode
	syncedChildren map[string]*memNode

	// Files.
	mu      sync.RWMutex
	data    []byte
	synced  []byte // durable contents; never aliases data
	dirty   int    // data[dirty:] (and any shrink below it) is not in synced
	modTime time.Time
}

func newMemDir() *memNode {
	return &memNode{
		isDir:          true,
		children:       map[string]*memNode{},
		syncedChildren: map[string]*memNode{},
		modTime:        time.Now(),
	}
}

func splitPath(name string) []string {
	p := strings.Trim(path.Clean("/"+name), "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// lookupLocked returns the node at name. fs.mu must be held.
func (fs *MemFS) lookupLocked(name string) (*memNode, error) {
	n := fs.root
	for _, part := range splitPath(name) {
		if !n.isDir {
			return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
		}
		c, ok := n.children[part]
		if !ok {
			return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
		}
		n = c
	}
	return n, nil
}

// parentLocked returns the directory holding name and name's last element.
// fs.mu must be held.
func (fs *MemFS) parentLocked(op, name string) (*memNode, string, error) {
	parts := splitPath(name)
	if len(parts) == 0 {
		return nil, "", &os.PathError{Op: op, Path: name, Err: os.ErrInvalid}
	}
	dir, err := fs.lookupLocked(strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", &os.PathError{Op: op, Path: name, Err: os.ErrNotExist}
	}
	if !dir.isDir {
		return nil, "", &os.PathError{Op: op, Path: name, Err: fmt.Errorf("not a directory")}
	}
	return dir, parts[len(parts)-1], nil
}

func (fs *MemFS) open(op, name string, create, truncate, write bool) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.parentLocked(op, name)
	if err != nil {
		return nil, err
	}
	n, ok := dir.children[base]
	switch {
	case ok && n.isDir:
		return nil, &os.PathError{Op: op, Path: name, Err: fmt.Errorf("is a directory")}
	case !ok && !create:
		return nil, &os.PathError{Op: op, Path: name, Err: os.ErrNotExist}
	case !ok:
		n = &memNode{modTime: time.Now()}
		dir.children[base] = n
	case truncate:
		n.mu.Lock()
		n.data = n.data[:0]
		n.dirty = 0
		n.modTime = time.Now()
		n.mu.Unlock()
	}
	return &memFile{fs: fs, node: n, name: name, write: write}, nil
}

// Create implements FS.
func (fs *MemFS) Create(name string) (File, error) { return fs.open("create", name, true, true, true) }

// Open implements FS.
func (fs *MemFS) Open(name string) (File, error) { return fs.open("open", name, false, false, false) }

// OpenReadWrite implements FS.
func (fs *MemFS) OpenReadWrite(name string) (File, error) {
	return fs.open("open", name, true, false, true)
}

// OpenDir implements FS.
func (fs *MemFS) OpenDir(name string) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookupLocked(name)
	if err != nil {
		return nil, err
	}
	if !n.isDir {
		return nil, &os.PathError{Op: "opendir", Path: name, Err: fmt.Errorf("not a directory")}
	}
	return &memFile{fs: fs, node: n, name: name}, nil
}

// Remove implements FS.
func (fs *MemFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.parentLocked("remove", name)
	if err != nil {
		return err
	}
	n, ok := dir.children[base]
	if !ok {
		return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
	}
	if n.isDir && len(n.children) > 0 {
		return &os.PathError{Op: "remove", Path: name, Err: fmt.Errorf("directory not empty")}
	}
	delete(dir.children, base)
	return nil
}

// RemoveAll implements FS.
func (fs *MemFS) RemoveAll(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.parentLocked("removeall", name)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	delete(dir.children, base)
	return nil
}

// Rename implements FS.
func (fs *MemFS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	odir, obase, err := fs.parentLocked("rename", oldname)
	if err != nil {
		return err
	}
	n, ok := odir.children[obase]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: os.ErrNotExist}
	}
	ndir, nbase, err := fs.parentLocked("rename", newname)
	if err != nil {
		return err
	}
	if existing, ok := ndir.children[nbase]; ok && existing.isDir && (!n.isDir || len(existing.children) > 0) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fmt.Errorf("destination is a directory")}
	}
	delete(odir.children, obase)
	ndir.children[nbase] = n
	return nil
}

// MkdirAll implements FS.
func (fs *MemFS) MkdirAll(dir string, _ os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.root
	for _, part := range splitPath(dir) {
		c, ok := n.children[part]
		if !ok {
			c = newMemDir()
			n.children[part] = c
		}
		if !c.isDir {
			return &os.PathError{Op: "mkdir", Path: dir, Err: fmt.Errorf("not a directory")}
		}
		n = c
	}
	return nil
}

// List implements FS.
func (fs *MemFS) List(dir string) ([]string, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookupLocked(dir)
	if err != nil {
		return nil, err
	}
	if !n.isDir {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: fmt.Errorf("not a directory")}
	}
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// Stat implements FS.
func (fs *MemFS) Stat(name string) (os.FileInfo, error) {
	fs.mu.Lock()
	n, err := fs.lookupLocked(name)
	fs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return n.stat(path.Base(path.Clean("/" + name))), nil
}

// CrashClone returns a new file system holding only this one's durable
// state: each file's contents as of its last Sync, and the directory entries
// as of each directory's last sync. The clone's state is all durable.
func (fs *MemFS) CrashClone() *MemFS {
	return fs.crashClone(nil)
}

// CrashCloneTorn is CrashClone, except that a file whose unsynced changes
// only append to its synced contents keeps a prefix of the appended bytes
// of random length, chosen by rng: the torn tail a power loss may leave
// when the disk wrote some, but not all, of what the page cache held.
func (fs *MemFS) CrashCloneTorn(rng *rand.Rand) *MemFS {
	return fs.crashClone(rng)
}

func (fs *MemFS) crashClone(rng *rand.Rand) *MemFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return &MemFS{root: cloneDurable(fs.root, rng)}
}

func cloneDurable(n *memNode, rng *rand.Rand) *memNode {
	if n.isDir {
		c := newMemDir()
		for name, child := range n.syncedChildren {
			cc := cloneDurable(child, rng)
			c.children[name] = cc
			c.syncedChildren[name] = cc
		}
		return c
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	keep := n.synced
	if rng != nil && len(n.data) > len(n.synced) && n.dirty >= len(n.synced) &&
		bytes.Equal(n.data[:len(n.synced)], n.synced) {
		keep = n.data[:len(n.synced)+rng.IntN(len(n.data)-len(n.synced)+1)]
	}
	data := bytes.Clone(keep)
	if data == nil {
		data = []byte{}
	}
	return &memNode{data: data, synced: bytes.Clone(data), dirty: len(data), modTime: n.modTime}
}

func (n *memNode) stat(name string) os.FileInfo {
	if n.isDir {
		return memFileInfo{name: name, dir: true, modTime: n.modTime}
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	return memFileInfo{name: name, size: int64(len(n.data)), modTime: n.modTime}
}

type memFile struct {
	fs     *MemFS
	node   *memNode
	name   string
	write  bool
	pos    int64
	closed atomic.Bool
}

func (f *memFile) check(op string, write bool) error {
	if f.closed.Load() {
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	}
	if f.node.isDir && op != "sync" && op != "stat" {
		return &os.PathError{Op: op, Path: f.name, Err: fmt.Errorf("is a directory")}
	}
	if write && !f.write {
		return &os.PathError{Op: op, Path: f.name, Err: fmt.Errorf("bad file descriptor")}
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: os.ErrInvalid}
	}
	n := f.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	if off >= int64(len(n.data)) {
		return 0, io.EOF
	}
	c := copy(p, n.data[off:])
	if c < len(p) {
		return c, io.EOF
	}
	return c, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: os.ErrInvalid}
	}
	n := f.node
	n.mu.Lock()
	defer n.mu.Unlock()
	end := off + int64(len(p))
	if end > int64(len(n.data)) {
		n.grow(end)
	}
	copy(n.data[off:], p)
	n.dirty = min(n.dirty, int(off))
	n.modTime = time.Now()
	return len(p), nil
}

// grow extends data to size with zeros. n.mu must be held.
func (n *memNode) grow(size int64) {
	old := len(n.data)
	if int64(cap(n.data)) >= size {
		n.data = n.data[:size]
		clear(n.data[old:])
		return
	}
	nd := make([]byte, size, max(size, int64(2*cap(n.data))))
	copy(nd, n.data)
	n.data = nd
}

func (f *memFile) Write(p []byte) (int, error) {
	c, err := f.WriteAt(p, f.pos)
	f.pos += int64(c)
	return c, err
}

func (f *memFile) Sync() error {
	if err := f.check("sync", false); err != nil {
		return err
	}
	n := f.node
	if n.isDir {
		f.fs.mu.Lock()
		defer f.fs.mu.Unlock()
		n.syncedChildren = make(map[string]*memNode, len(n.children))
		for name, c := range n.children {
			n.syncedChildren[name] = c
		}
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	keep := min(n.dirty, len(n.synced), len(n.data))
	n.synced = append(n.synced[:keep], n.data[keep:]...)
	n.dirty = len(n.data)
	return nil
}

func (f *memFile) Truncate(size int64) error {
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return &os.PathError{Op: "truncate", Path: f.name, Err: os.ErrInvalid}
	}
	n := f.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if size > int64(len(n.data)) {
		n.grow(size)
	} else {
		n.data = n.data[:size]
	}
	n.dirty = min(n.dirty, int(size))
	n.modTime = time.Now()
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	if err := f.check("stat", false); err != nil {
		return nil, err
	}
	return f.node.stat(path.Base(path.Clean("/" + f.name))), nil
}

func (f *memFile) Fd() uintptr { return InvalidFd }

func (f *memFile) Close() error {
	if f.closed.Swap(true) {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	return nil
}

type memFileInfo struct {
	name    string
	size    int64
	dir     bool
	modTime time.Time
}

func (i memFileInfo) Name() string { return i.name }
func (i memFileInfo) Size() int64  { return i.size }
func (i memFileInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (i memFileInfo) ModTime() time.Time { return i.modTime }
func (i memFileInfo) IsDir() bool        { return i.dir }
func (i memFileInfo) Sys() any           { return nil }
