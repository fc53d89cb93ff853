package vfs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// Every implementation passes the same behavioural suite.
func forEachFS(t *testing.T, fn func(t *testing.T, fs FS, dir string)) {
	t.Run("os", func(t *testing.T) { fn(t, Default, t.TempDir()) })
	t.Run("mem", func(t *testing.T) { fn(t, NewMem(), "/data") })
	t.Run("errorfs", func(t *testing.T) { fn(t, NewErrorFS(NewMem()), "/data") })
}

func TestFSBasics(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs FS, dir string) {
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(fs.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
		name := filepath.Join(dir, "a", "f")
		f, err := fs.Create(name)
		must(err)
		_, err = f.Write([]byte("hello "))
		must(err)
		_, err = f.Write([]byte("world"))
		must(err)
		_, err = f.WriteAt([]byte("W"), 6)
		must(err)
		must(f.Sync())
		st, err := f.Stat()
		must(err)
		if st.Size() != 11 {
			t.Fatalf("size %d", st.Size())
		}
		buf := make([]byte, 20)
		n, err := f.ReadAt(buf, 0)
		if n != 11 || !errors.Is(err, io.EOF) || string(buf[:n]) != "hello World" {
			t.Fatalf("ReadAt = %d, %v, %q", n, err, buf[:n])
		}
		must(f.Truncate(5))
		must(f.Truncate(7))
		got, _ := readAll(f)
		if !bytes.Equal(got, []byte("hello\x00\x00")) {
			t.Fatalf("after truncate %q", got)
		}
		must(f.Close())

		names, err := fs.List(filepath.Join(dir, "a"))
		must(err)
		if !reflect.DeepEqual(names, []string{"b", "f"}) {
			t.Fatalf("List = %v", names)
		}
		must(fs.Rename(name, filepath.Join(dir, "a", "b", "g")))
		if _, err := fs.Stat(name); !os.IsNotExist(err) {
			t.Fatalf("Stat after rename: %v", err)
		}
		data, err := ReadFile(fs, filepath.Join(dir, "a", "b", "g"))
		must(err)
		if string(data) != "hello\x00\x00" {
			t.Fatalf("ReadFile %q", data)
		}
		rw, err := fs.OpenReadWrite(filepath.Join(dir, "new"))
		must(err)
		must(rw.Close())
		if err := fs.Remove(filepath.Join(dir, "a")); err == nil {
			t.Fatal("Remove of a non-empty directory succeeded")
		}
		must(WriteFileAtomic(fs, filepath.Join(dir, "ckpt"), []byte("0\n0\n")))
		data, err = ReadFile(fs, filepath.Join(dir, "ckpt"))
		must(err)
		if string(data) != "0\n0\n" {
			t.Fatalf("atomic file %q", data)
		}
		if Exists(fs, filepath.Join(dir, "ckpt.tmp")) {
			t.Fatal("temporary file left behind")
		}
		must(fs.RemoveAll(filepath.Join(dir, "a")))
		must(fs.RemoveAll(filepath.Join(dir, "a")))
		if _, err := fs.Open(filepath.Join(dir, "a", "b", "g")); !os.IsNotExist(err) {
			t.Fatalf("Open after RemoveAll: %v", err)
		}
	})
}

func readAll(f File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err == io.EOF && n == len(b) {
		err = nil
	}
	return b[:n], err
}

func TestOSFileHasFd(t *testing.T) {
	f, err := Default.Create(filepath.Join(t.TempDir(), "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Fd() == InvalidFd {
		t.Fatal("OS file has no descriptor")
	}
	m, _ := NewMem().Create("x")
	if m.Fd() != InvalidFd {
		t.Fatal("memory file claims a descriptor")
	}
}

func TestCrashCloneKeepsOnlySynced(t *testing.T) {
	fs := NewMem()
	if err := fs.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	// /d is not yet a durable entry of /.
	if c := fs.CrashClone(); Exists(c, "/d") {
		t.Fatal("unsynced directory survived")
	}
	if err := SyncDir(fs, "/"); err != nil {
		t.Fatal(err)
	}
	f, _ := fs.Create("/d/f")
	f.Write([]byte("synced"))
	f.Sync()
	// The file's data is durable but its name is not.
	if c := fs.CrashClone(); Exists(c, "/d/f") {
		t.Fatal("file with unsynced directory entry survived")
	}
	SyncDir(fs, "/d")
	f.Write([]byte("+lost"))
	c := fs.CrashClone()
	if got, _ := ReadFile(c, "/d/f"); string(got) != "synced" {
		t.Fatalf("after crash %q", got)
	}
	// Overwrites and truncations below the synced length are undone too.
	f.WriteAt([]byte("XX"), 0)
	f.Truncate(3)
	if got, _ := ReadFile(fs.CrashClone(), "/d/f"); string(got) != "synced" {
		t.Fatalf("after crash %q", got)
	}
	f.Sync()
	if got, _ := ReadFile(fs.CrashClone(), "/d/f"); string(got) != "XXn" {
		t.Fatalf("after crash %q", got)
	}
	// Rename is a directory operation: durable only after the dir sync.
	fs.Rename("/d/f", "/d/g")
	c = fs.CrashClone()
	if !Exists(c, "/d/f") || Exists(c, "/d/g") {
		t.Fatal("unsynced rename survived")
	}
	SyncDir(fs, "/d")
	c = fs.CrashClone()
	if Exists(c, "/d/f") || !Exists(c, "/d/g") {
		t.Fatal("synced rename lost")
	}
	// The clone is a separate file system whose state is all durable.
	g, _ := c.OpenReadWrite("/d/g")
	g.Write([]byte("clone"))
	if got, _ := ReadFile(fs, "/d/g"); string(got) != "XXn" {
		t.Fatalf("clone write leaked into the original: %q", got)
	}
	if got, _ := ReadFile(c.CrashClone(), "/d/g"); string(got) != "XXn" {
		t.Fatalf("clone's unsynced write survived: %q", got)
	}
}

func TestCrashCloneTornKeepsAPrefix(t *testing.T) {
	fs := NewMem()
	f, _ := fs.Create("/f")
	SyncDir(fs, "/")
	f.Write([]byte("base"))
	f.Sync()
	f.Write([]byte("0123456789"))
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[int]bool{}
	for range 200 {
		got, _ := ReadFile(fs.CrashCloneTorn(rng), "/f")
		if !bytes.HasPrefix([]byte("base0123456789"), got) || len(got) < 4 {
			t.Fatalf("torn clone %q is not a prefix past the synced data", got)
		}
		seen[len(got)] = true
	}
	if len(seen) < 5 {
		t.Fatalf("torn clone lengths not spread: %v", seen)
	}
}

func TestErrorFSFaults(t *testing.T) {
	mem := NewMem()
	fs := NewErrorFS(mem,
		Fault{Op: OpSync, Path: ".log", Skip: 1, Count: 1},
		Fault{Op: OpWrite, Path: ".index", ShortWrite: 3},
	)
	f, err := fs.Create("/a.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("first sync should pass: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("second sync: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("third sync should pass (Count 1): %v", err)
	}
	ix, _ := fs.Create("/a.index")
	n, err := ix.WriteAt([]byte("abcdef"), 0)
	if n != 3 || !errors.Is(err, ErrInjected) {
		t.Fatalf("short write = %d, %v", n, err)
	}
	if got, _ := ReadFile(mem, "/a.index"); string(got) != "abc" {
		t.Fatalf("short write left %q", got)
	}
	if fs.Fired() != 2 {
		t.Fatalf("Fired = %d", fs.Fired())
	}
	fs.Reset()
	if _, err := ix.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
}

// TestSyncAfterCloseIsErrClosed: a Sync of a closed file says so
// (os.ErrClosed), whatever file its old descriptor number names by then.
func TestSyncAfterCloseIsErrClosed(t *testing.T) {
	dir := t.TempDir()
	f, err := Default.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Likely to take the number the closed file had.
	g, err := Default.Create(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := f.Sync(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Sync after Close: %v, want os.ErrClosed", err)
	}
}
