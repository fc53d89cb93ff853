package vfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// ErrInjected is the error an ErrorFS returns when a Fault has no Err.
var ErrInjected = errors.New("vfs: injected error")

// Op is a kind of file-system operation an ErrorFS can fail.
type Op uint8

// The operations. OpWrite covers Write and WriteAt.
const (
	OpCreate Op = iota
	OpOpen      // Open, OpenReadWrite and OpenDir
	OpRemove    // Remove and RemoveAll
	OpRename
	OpMkdirAll
	OpList
	OpStat // FS.Stat and File.Stat
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpClose
	numOps
)

var opNames = [numOps]string{"create", "open", "remove", "rename", "mkdirall", "list", "stat",
	"read", "write", "sync", "truncate", "close"}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", o)
}

// Fault describes when an ErrorFS fails an operation. Faults are counted,
// never random, so a test that fails replays exactly.
type Fault struct {
	Op Op
	// Path selects the paths the fault applies to: it matches when the
	// operation's path contains it ("" matches every path). For Rename the
	// old name is matched.
	Path string
	// Skip lets this many matching operations through before failing.
	Skip int
	// Count is how many operations fail after that; 0 means all of them.
	Count int
	// Err is the error returned; nil means ErrInjected. It is wrapped in an
	// *os.PathError naming the operation and path.
	Err error
	// ShortWrite, for OpWrite, is how many bytes of the failing write
	// reach the file before the error, as a write interrupted by a full
	// disk or a crash leaves them. Zero writes nothing.
	ShortWrite int
}

type faultState struct {
	Fault
	seen, fired int
}

// ErrorFS wraps an FS and fails the operations its faults select.
type ErrorFS struct {
	fs FS

	mu     sync.Mutex
	faults []*faultState
	fired  int
}

// NewErrorFS wraps fs with the given faults; more can be added with Add.
func NewErrorFS(fs FS, faults ...Fault) *ErrorFS {
	e := &ErrorFS{fs: fs}
	for _, f := range faults {
		e.Add(f)
	}
	return e
}

// Add arms another fault.
func (e *ErrorFS) Add(f Fault) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = append(e.faults, &faultState{Fault: f})
}

// Reset disarms every fault.
func (e *ErrorFS) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = nil
}

// Fired returns how many operations have been failed so far.
func (e *ErrorFS) Fired() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fired
}

// check returns the fault that fails op on path now, if any.
func (e *ErrorFS) check(op Op, path string) *Fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.faults {
		if f.Op != op || !strings.Contains(path, f.Path) {
			continue
		}
		f.seen++
		if f.seen <= f.Skip || f.Count > 0 && f.fired >= f.Count {
			continue
		}
		f.fired++
		e.fired++
		return &f.Fault
	}
	return nil
}

func (e *ErrorFS) fail(op Op, path string) error {
	if f := e.check(op, path); f != nil {
		return faultErr(f, path)
	}
	return nil
}

func faultErr(f *Fault, path string) error {
	err := f.Err
	if err == nil {
		err = ErrInjected
	}
	return &os.PathError{Op: f.Op.String(), Path: path, Err: err}
}

func (e *ErrorFS) wrap(name string, f File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, fs: e, name: name}, nil
}

// Create implements FS.
func (e *ErrorFS) Create(name string) (File, error) {
	if err := e.fail(OpCreate, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Create(name)
	return e.wrap(name, f, err)
}

// Open implements FS.
func (e *ErrorFS) Open(name string) (File, error) {
	if err := e.fail(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Open(name)
	return e.wrap(name, f, err)
}

// OpenReadWrite implements FS.
func (e *ErrorFS) OpenReadWrite(name string) (File, error) {
	if err := e.fail(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenReadWrite(name)
	return e.wrap(name, f, err)
}

// OpenDir implements FS.
func (e *ErrorFS) OpenDir(name string) (File, error) {
	if err := e.fail(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenDir(name)
	return e.wrap(name, f, err)
}

// Remove implements FS.
func (e *ErrorFS) Remove(name string) error {
	if err := e.fail(OpRemove, name); err != nil {
		return err
	}
	return e.fs.Remove(name)
}

// RemoveAll implements FS.
func (e *ErrorFS) RemoveAll(name string) error {
	if err := e.fail(OpRemove, name); err != nil {
		return err
	}
	return e.fs.RemoveAll(name)
}

// Rename implements FS.
func (e *ErrorFS) Rename(oldname, newname string) error {
	if err := e.fail(OpRename, oldname); err != nil {
		return err
	}
	return e.fs.Rename(oldname, newname)
}

// MkdirAll implements FS.
func (e *ErrorFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := e.fail(OpMkdirAll, dir); err != nil {
		return err
	}
	return e.fs.MkdirAll(dir, perm)
}

// List implements FS.
func (e *ErrorFS) List(dir string) ([]string, error) {
	if err := e.fail(OpList, dir); err != nil {
		return nil, err
	}
	return e.fs.List(dir)
}

// Stat implements FS.
func (e *ErrorFS) Stat(name string) (os.FileInfo, error) {
	if err := e.fail(OpStat, name); err != nil {
		return nil, err
	}
	return e.fs.Stat(name)
}

type errorFile struct {
	File
	fs   *ErrorFS
	name string
}

func (f *errorFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.fail(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *errorFile) Write(p []byte) (int, error) {
	if ft := f.fs.check(OpWrite, f.name); ft != nil {
		n := 0
		if k := min(ft.ShortWrite, len(p)); k > 0 {
			n, _ = f.File.Write(p[:k])
		}
		return n, faultErr(ft, f.name)
	}
	return f.File.Write(p)
}

func (f *errorFile) WriteAt(p []byte, off int64) (int, error) {
	if ft := f.fs.check(OpWrite, f.name); ft != nil {
		n := 0
		if k := min(ft.ShortWrite, len(p)); k > 0 {
			n, _ = f.File.WriteAt(p[:k], off)
		}
		return n, faultErr(ft, f.name)
	}
	return f.File.WriteAt(p, off)
}

func (f *errorFile) Sync() error {
	if err := f.fs.fail(OpSync, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *errorFile) Truncate(size int64) error {
	if err := f.fs.fail(OpTruncate, f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *errorFile) Stat() (os.FileInfo, error) {
	if err := f.fs.fail(OpStat, f.name); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *errorFile) Close() error {
	if err := f.fs.fail(OpClose, f.name); err != nil {
		f.File.Close()
		return err
	}
	return f.File.Close()
}
