package powerfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted power-cut file system. Its methods may be called from
// any goroutine, but Cut and Unmount not concurrently with each other.
type FS struct {
	backing string // the files, as the processes under test see them
	stash   string // files unlinked or replaced by a rename not yet durable
	mnt     string

	server *fuse.Server

	mu struct {
		sync.Mutex
		// dead is set by Cut: from then on every write, sync and
		// directory operation fails with EIO, until the mount is new.
		dead bool
		// ops are the directory operations not yet durable, oldest first.
		ops []*dirOp
		// files are the regular files changed since their last sync, by
		// backing inode number.
		files     map[uint64]*fileState
		stashSeq  int
		cuts      int
		undoBytes int64 // saved bytes over files, for Stats
	}
}

// Available reports why a FUSE file system cannot be mounted here: nil
// where /dev/fuse and fusermount (fusermount3) are present.
func Available() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("powerfs: no /dev/fuse: %w", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		if _, err := exec.LookPath("fusermount"); err != nil {
			return errors.New("powerfs: neither fusermount3 nor fusermount is installed (Debian: apt-get install fuse3)")
		}
	}
	return nil
}

// Mount mounts a new, empty file system in a temporary directory of t and
// unmounts it when t ends. It skips t where FUSE is not available (see
// Available) and fails it if the mount fails for another reason.
func Mount(t testing.TB) *FS {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("power-cut file system not available: %v", err)
	}
	f, err := New(t.TempDir())
	if err != nil {
		t.Fatalf("mounting the power-cut file system: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmounting the power-cut file system: %v", err)
		}
	})
	return f
}

// New mounts a file system at base/mnt whose files live in base/data;
// base must exist and be empty (base/stash holds unlinked files until
// their unlink is durable). The caller must call Unmount.
func New(base string) (*FS, error) {
	f := &FS{
		backing: filepath.Join(base, "data"),
		stash:   filepath.Join(base, "stash"),
		mnt:     filepath.Join(base, "mnt"),
	}
	for _, d := range []string{f.backing, f.stash, f.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, fmt.Errorf("powerfs: %w", err)
		}
	}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// Dir is the mount point: the directory the processes under test use.
func (f *FS) Dir() string { return f.mnt }

// BackingDir is where the files are kept; reading it while mounted shows
// what the processes wrote, synced or not.
func (f *FS) BackingDir() string { return f.backing }

func (f *FS) mount() error {
	root, err := fs.NewLoopbackRoot(f.backing)
	if err != nil {
		return fmt.Errorf("powerfs: %w", err)
	}
	f.mu.Lock()
	f.mu.dead = false
	f.mu.ops = nil
	f.mu.files = map[uint64]*fileState{}
	f.mu.undoBytes = 0
	f.mu.Unlock()
	// The mount is the only writer of the backing directory while it is
	// mounted, so the kernel may cache names and attributes.
	timeout := time.Second
	server, err := fs.Mount(f.mnt, &node{LoopbackNode: root.(*fs.LoopbackNode), pfs: f}, &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{FsName: "powerfs", Name: "powerfs", MaxBackground: 64},
	})
	if err != nil {
		return fmt.Errorf("powerfs: mounting at %s: %w", f.mnt, err)
	}
	f.server = server
	return nil
}

// Unmount unmounts the file system (lazily if a process still uses it)
// and keeps the backing files as they are, synced or not. It is a no-op
// when not mounted.
func (f *FS) Unmount() error {
	if f.server == nil {
		return nil
	}
	server := f.server
	f.server = nil
	if err := server.Unmount(); err != nil {
		// A process still has a file open: detach the mount so the test
		// can end, and say so.
		out, lerr := exec.Command(fusermountBinary(), "-u", "-z", f.mnt).CombinedOutput()
		if lerr != nil {
			return fmt.Errorf("powerfs: unmounting %s: %v; lazily: %v: %s", f.mnt, err, lerr, out)
		}
		return fmt.Errorf("powerfs: unmounting %s: %v (unmounted lazily)", f.mnt, err)
	}
	server.Wait()
	return nil
}

func fusermountBinary() string {
	if p, err := exec.LookPath("fusermount3"); err == nil {
		return p
	}
	return "fusermount"
}

// A Fault is something that happens to the disk at a power cut, besides
// losing what was not synced.
type Fault struct {
	path   string
	tear   bool
	offset int64
	bit    uint
}

// Tear keeps the first half of the last write made to the file at path
// (relative to Dir) since its last sync: the write was torn. The file's
// other unsynced writes are lost as usual (a gap between its synced end and
// the torn write reads as zeros). Cut fails if
// that file had no write since its last sync.
func Tear(path string) Fault { return Fault{path: path, tear: true} }

// FlipBit inverts bit (0 to 7) of the byte at offset of the file at path
// (relative to Dir), after the cut.
func FlipBit(path string, offset int64, bit uint) Fault {
	return Fault{path: path, offset: offset, bit: bit % 8}
}

// Cut cuts the power: every process using the mount must have been killed
// (and waited for) first. It refuses all writes and syncs from now on,
// unmounts, discards what was not durable (see the package doc), applies
// faults, and mounts the file system again at the same place.
func (f *FS) Cut(faults ...Fault) error {
	f.mu.Lock()
	f.mu.dead = true
	f.mu.Unlock()
	if err := f.Unmount(); err != nil {
		return err
	}
	f.mu.Lock()
	err := f.undoLocked(faults)
	f.mu.cuts++
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.mount()
}

// undoLocked discards what is not durable and applies faults.
// f.mu must be held, and the file system unmounted.
func (f *FS) undoLocked(faults []Fault) error {
	var errs []error
	for i := len(f.mu.ops) - 1; i >= 0; i-- {
		if err := f.mu.ops[i].undo(); err != nil {
			errs = append(errs, fmt.Errorf("undoing %s: %w", f.mu.ops[i].what, err))
		}
	}
	f.mu.ops = nil
	// Which inode each torn file is, now that its name is back where it
	// was at the last durable directory operation.
	tears := map[uint64]string{}
	for _, ft := range faults {
		if !ft.tear {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(f.backing, ft.path), &st); err != nil {
			errs = append(errs, fmt.Errorf("tearing %s: %w", ft.path, err))
			continue
		}
		tears[st.Ino] = ft.path
	}
	for ino, st := range f.mu.files {
		_, tear := tears[ino]
		if err := st.restore(tear); err != nil {
			errs = append(errs, err)
		}
		if tear && st.lastWrite == nil {
			errs = append(errs, fmt.Errorf("tearing %s: no write since its last sync", tears[ino]))
		}
		delete(tears, ino)
	}
	for _, path := range tears {
		errs = append(errs, fmt.Errorf("tearing %s: no write since its last sync", path))
	}
	f.mu.files = nil
	if err := os.RemoveAll(f.stash); err != nil {
		errs = append(errs, err)
	}
	if err := os.Mkdir(f.stash, 0o755); err != nil {
		errs = append(errs, err)
	}
	for _, ft := range faults {
		if !ft.tear {
			if err := flipBit(filepath.Join(f.backing, ft.path), ft.offset, ft.bit); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("powerfs: power cut: %w", errors.Join(errs...))
	}
	return nil
}

func flipBit(path string, offset int64, bit uint) error {
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("flipping a bit: %w", err)
	}
	defer file.Close()
	b := make([]byte, 1)
	if _, err := file.ReadAt(b, offset); err != nil {
		return fmt.Errorf("flipping a bit of %s at %d: %w", path, offset, err)
	}
	b[0] ^= 1 << bit
	if _, err := file.WriteAt(b, offset); err != nil {
		return fmt.Errorf("flipping a bit of %s at %d: %w", path, offset, err)
	}
	return nil
}

// Unsynced reports whether the file at path (relative to Dir) was written
// since its last sync: whether Tear has something to tear.
func (f *FS) Unsynced(path string) bool {
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(f.backing, path), &st); err != nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.mu.files[st.Ino]
	return s != nil && s.lastWrite != nil
}

// Stats are figures of the undo log, for a test's log.
type Stats struct {
	Cuts          int   // power cuts so far
	PendingDirOps int   // directory operations not yet durable
	DirtyFiles    int   // files with writes since their last sync
	SavedBytes    int64 // bytes kept to restore overwritten synced data
}

// Stats returns the current figures.
func (f *FS) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Stats{Cuts: f.mu.cuts, PendingDirOps: len(f.mu.ops), DirtyFiles: len(f.mu.files), SavedBytes: f.mu.undoBytes}
}
