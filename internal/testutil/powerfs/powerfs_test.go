package powerfs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-io/strata/internal/testutil/powerfs"
)

// A small vocabulary over the mount, failing the test on any error.

func write(t *testing.T, path string, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(0, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func writeAt(t *testing.T, path string, data string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(data), off); err != nil {
		t.Fatal(err)
	}
}

func syncPath(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// content returns the file's content, or "<absent>".
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func cut(t *testing.T, p *powerfs.FS, faults ...powerfs.Fault) {
	t.Helper()
	if err := p.Cut(faults...); err != nil {
		t.Fatal(err)
	}
}

func want(t *testing.T, path, want string) {
	t.Helper()
	if got := content(t, path); got != want {
		t.Fatalf("%s after the cut: %q, want %q", filepath.Base(path), got, want)
	}
}

func TestSyncedDataSurvivesUnsyncedIsGone(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	a := filepath.Join(d, "a")
	write(t, a, "synced;", true)
	syncPath(t, d) // a's name
	write(t, a, "not synced", false)
	if got := content(t, a); got != "synced;not synced" {
		t.Fatalf("before the cut: %q", got)
	}
	cut(t, p)
	want(t, a, "synced;")
	// The file system works after a cut, and a second cut takes only
	// what came after the first.
	write(t, a, "again;", true)
	write(t, a, "lost", false)
	cut(t, p)
	want(t, a, "synced;again;")
}

func TestOverwriteAndTruncateOfSyncedDataUndone(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	a := filepath.Join(d, "a")
	orig := strings.Repeat("0123456789", 1000)
	write(t, a, orig, true)
	syncPath(t, d)
	writeAt(t, a, "xxxx", 5)
	writeAt(t, a, "yyyyyyyy", 3) // over the first overwrite
	if err := os.Truncate(a, 100); err != nil {
		t.Fatal(err)
	}
	write(t, a, "tail", false)
	if err := os.Truncate(a, 20000); err != nil {
		t.Fatal(err)
	}
	cut(t, p)
	want(t, a, orig)
}

func TestFdatasyncAndMmapSync(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	a := filepath.Join(d, "a")
	write(t, a, strings.Repeat("\x00", 8192), true)
	syncPath(t, d)
	f, err := os.OpenFile(a, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, 8192, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	copy(m, "mapped")
	// msync reaches the file system as an fsync.
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	copy(m[4096:], "mapped, not synced")
	if _, err := f.WriteAt([]byte("written"), 100); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	copy(m[6000:], "mapped, not synced")
	syscall.Munmap(m)
	f.Close()
	cut(t, p)
	got := content(t, a)
	if !strings.HasPrefix(got, "mapped") || got[100:107] != "written" {
		t.Fatalf("synced through the mapping and fdatasync: %q..., %q at 100", got[:10], got[100:107])
	}
	if got[4096:4100] != "mapp" {
		// Written back by the fdatasync after it: durable.
		t.Fatalf("at 4096: %q, want what fdatasync flushed", got[4096:4110])
	}
	if got[6000] != 0 {
		t.Fatalf("at 6000: %q, want the zeros synced before", got[6000:6010])
	}
}

func TestNewFileNeedsItsDirectorySynced(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	a, b, c := filepath.Join(d, "a"), filepath.Join(d, "b"), filepath.Join(d, "c")
	write(t, a, "data synced, name not", true)
	write(t, b, "name synced, data not", false)
	syncPath(t, d)
	write(t, c, "after the directory sync", true)
	cut(t, p)
	want(t, a, "data synced, name not")
	want(t, b, "")
	want(t, c, "<absent>")
}

func TestUnlinkUndoneUntilDirectorySync(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
	write(t, a, "a", true)
	write(t, b, "b", true)
	syncPath(t, d)
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	syncPath(t, d)
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	want(t, b, "<absent>")
	cut(t, p)
	want(t, a, "<absent>")
	want(t, b, "b")
}

// TestRenameOverCheckpoint is the checkpoint pattern: write a temporary
// file, sync it, rename it over the old one, sync the directory. Before the
// directory sync a cut leaves the old checkpoint; after it, the new one;
// never a mix or nothing. Without the temporary file's sync the new name
// survives with what was synced of it: nothing (ext4's auto_da_alloc
// would have saved it; this model does not).
func TestRenameOverCheckpoint(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	ckpt, tmp := filepath.Join(d, "ckpt"), filepath.Join(d, "ckpt.tmp")
	write(t, ckpt, "old", true)
	syncPath(t, d)

	write(t, tmp, "new", true)
	if err := os.Rename(tmp, ckpt); err != nil {
		t.Fatal(err)
	}
	cut(t, p)
	want(t, ckpt, "old")
	want(t, tmp, "<absent>")

	write(t, tmp, "new", true)
	if err := os.Rename(tmp, ckpt); err != nil {
		t.Fatal(err)
	}
	syncPath(t, d)
	cut(t, p)
	want(t, ckpt, "new")
	want(t, tmp, "<absent>")

	write(t, tmp, "newer, never synced", false)
	if err := os.Rename(tmp, ckpt); err != nil {
		t.Fatal(err)
	}
	syncPath(t, d)
	cut(t, p)
	want(t, ckpt, "")
}

// TestDirectoryOperationsKeepTheirOrder: an fsync of one directory makes
// durable every earlier directory operation, in other directories too
// (ext4's journal), and none made after the last one that changed it.
func TestDirectoryOperationsKeepTheirOrder(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	one, two := filepath.Join(d, "one"), filepath.Join(d, "two")
	for _, dir := range []string{one, two} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	syncPath(t, d)
	write(t, filepath.Join(one, "a"), "a", true)
	write(t, filepath.Join(two, "b"), "b", true)
	write(t, filepath.Join(one, "c"), "c", true)
	syncPath(t, two) // a and b, not c
	if err := os.Mkdir(filepath.Join(two, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(two, "sub", "e"), "e", true)
	syncPath(t, filepath.Join(two, "sub")) // the mkdir came before e
	if err := os.Rename(filepath.Join(one, "a"), filepath.Join(two, "a")); err != nil {
		t.Fatal(err)
	}
	syncPath(t, one) // a rename changes both directories
	if err := os.Rename(filepath.Join(two, "b"), filepath.Join(one, "b")); err != nil {
		t.Fatal(err)
	}
	cut(t, p)
	want(t, filepath.Join(one, "a"), "<absent>")
	want(t, filepath.Join(two, "a"), "a")
	want(t, filepath.Join(two, "b"), "b")
	want(t, filepath.Join(one, "b"), "<absent>")
	want(t, filepath.Join(one, "c"), "c")
	want(t, filepath.Join(two, "sub", "e"), "e")
}

func TestRmdirAndMkdirUndone(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	old, fresh := filepath.Join(d, "old"), filepath.Join(d, "fresh")
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	syncPath(t, d)
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(fresh, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(fresh, "f"), "f", true)
	if err := os.Remove(d); err == nil {
		t.Fatal("removed a non-empty directory")
	}
	cut(t, p)
	if fi, err := os.Stat(old); err != nil || !fi.IsDir() {
		t.Fatalf("old directory after the cut: %v", err)
	}
	want(t, fresh, "<absent>")
}

func TestTearAndFlipBit(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
	write(t, a, "synced;", true)
	write(t, b, "bits", true)
	syncPath(t, d)
	if p.Unsynced("a") {
		t.Fatal("a synced file reported unsynced")
	}
	write(t, a, "first;", false)
	write(t, a, "01234567", false)
	if !p.Unsynced("a") {
		t.Fatal("a written file reported synced")
	}
	cut(t, p, powerfs.Tear("a"), powerfs.FlipBit("b", 1, 0))
	// The earlier unsynced write is lost; the torn one's first half lands
	// past it: a hole of zeros between.
	want(t, a, "synced;\x00\x00\x00\x00\x00\x000123")
	want(t, b, "bhts")
	// Nothing to tear: the cut says so.
	if err := p.Cut(powerfs.Tear("a")); err == nil {
		t.Fatal("tearing a file with no unsynced write succeeded")
	}
}

func TestWritesFailOnceCut(t *testing.T) {
	p := powerfs.Mount(t)
	a := filepath.Join(p.Dir(), "a")
	write(t, a, "x", true)
	f, err := os.OpenFile(a, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A process that still holds a file when the power goes: the cut
	// cannot unmount, says so, and the mount is gone (lazily).
	if err := p.Cut(); err == nil {
		t.Fatal("a cut with a file open succeeded")
	}
	if _, err := f.Write([]byte("after")); err == nil {
		t.Fatal("a write after the cut succeeded")
	}
	if err := f.Sync(); err == nil {
		t.Fatal("a sync after the cut succeeded")
	}
}

func TestBackingStateIsTheModel(t *testing.T) {
	p := powerfs.Mount(t)
	a := filepath.Join(p.Dir(), "a")
	write(t, a, "abc", false)
	b, err := os.ReadFile(filepath.Join(p.BackingDir(), "a"))
	if err != nil || !bytes.Equal(b, []byte("abc")) {
		t.Fatalf("backing file: %q, %v", b, err)
	}
	if s := p.Stats(); s.DirtyFiles != 1 || s.PendingDirOps != 1 {
		t.Fatalf("stats %+v, want one dirty file and one pending create", s)
	}
}

func TestRenameExchangeAndNoReplaceUndone(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	a, b, c := filepath.Join(d, "a"), filepath.Join(d, "b"), filepath.Join(d, "c")
	write(t, a, "a", true)
	write(t, b, "b", true)
	syncPath(t, d)
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, c, unix.RENAME_NOREPLACE); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, b, unix.AT_FDCWD, c, unix.RENAME_NOREPLACE); err == nil {
		t.Fatal("RENAME_NOREPLACE replaced a name")
	}
	want(t, b, "a")
	want(t, c, "b")
	cut(t, p)
	want(t, a, "a")
	want(t, b, "b")
	want(t, c, "<absent>")
}

func TestRenameOverEmptyDirectoryUndone(t *testing.T) {
	p := powerfs.Mount(t)
	d := p.Dir()
	one, two := filepath.Join(d, "one"), filepath.Join(d, "two")
	for _, dir := range []string{one, two} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(one, "f"), "f", true)
	syncPath(t, one)
	// rename(2) itself: os.Rename refuses any directory as the target.
	if err := unix.Rename(two, one); err != unix.ENOTEMPTY {
		t.Fatalf("renaming over a non-empty directory: %v, want ENOTEMPTY", err)
	}
	if err := unix.Rename(one, two); err != nil {
		t.Fatal(err)
	}
	want(t, filepath.Join(two, "f"), "f")
	cut(t, p)
	want(t, filepath.Join(one, "f"), "f")
	if fi, err := os.Stat(two); err != nil || !fi.IsDir() {
		t.Fatalf("the directory renamed over, after the cut: %v", err)
	}
}
