package powerfs

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"syscall"
)

// fileState is what a regular file was at its last sync, kept from its
// first change after that sync until the next one.
type fileState struct {
	// file is the backing inode, opened for reading and writing by this
	// package (whatever modes the processes under test opened it with),
	// so it can be restored under any name, or none.
	file *os.File
	// syncedSize is the size at the last sync.
	syncedSize int64
	// saved holds the synced bytes overwritten since, each range once:
	// sorted by offset, disjoint, all below syncedSize.
	saved []extent
	// lastWrite is the last write since the sync, for Tear.
	lastWrite *extent
}

type extent struct {
	off  int64
	data []byte
}

func (e extent) end() int64 { return e.off + int64(len(e.data)) }

// stateForFdLocked returns fd's inode's state, starting one (the inode as
// it is now counts as synced) at its first change since a sync.
// f.mu must be held.
func (f *FS) stateForFdLocked(fd int) (*fileState, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if s := f.mu.files[st.Ino]; s != nil {
		return s, nil
	}
	// /proc/self/fd reopens the inode itself, even unlinked, and with a
	// mode of our choosing.
	file, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	s := &fileState{file: file, syncedSize: st.Size}
	f.mu.files[st.Ino] = s
	return s, nil
}

// stateForPathLocked is stateForFdLocked for a backing path.
// f.mu must be held.
func (f *FS) stateForPathLocked(path string) (*fileState, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	return f.stateForFdLocked(fd)
}

// syncedLocked forgets fd's inode's state: what it holds now is durable.
// f.mu must be held.
func (f *FS) syncedLocked(fd int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	if s := f.mu.files[st.Ino]; s != nil {
		for _, e := range s.saved {
			f.mu.undoBytes -= int64(len(e.data))
		}
		s.file.Close()
		delete(f.mu.files, st.Ino)
	}
	return nil
}

// saveLocked keeps the synced bytes in [off, end) not kept already, before
// they are overwritten. f.mu must be held.
func (f *FS) saveLocked(s *fileState, off, end int64) error {
	end = min(end, s.syncedSize)
	if off >= end {
		return nil
	}
	var gaps [][2]int64
	at := off
	for _, e := range s.saved {
		if e.end() <= at {
			continue
		}
		if e.off >= end {
			break
		}
		if e.off > at {
			gaps = append(gaps, [2]int64{at, e.off})
		}
		at = max(at, e.end())
	}
	if at < end {
		gaps = append(gaps, [2]int64{at, end})
	}
	for _, g := range gaps {
		data := make([]byte, g[1]-g[0])
		n, err := s.file.ReadAt(data, g[0])
		if err != nil && n < len(data) {
			// The file is shorter than its synced size (a truncate
			// since): what is past its end is already saved.
			data = data[:n]
		}
		if len(data) == 0 {
			continue
		}
		s.saved = append(s.saved, extent{off: g[0], data: data})
		f.mu.undoBytes += int64(len(data))
	}
	sort.Slice(s.saved, func(i, j int) bool { return s.saved[i].off < s.saved[j].off })
	return nil
}

// restore puts the file back as it was at its last sync; with tear, the
// first half of the last write since lands on top.
func (s *fileState) restore(tear bool) error {
	defer s.file.Close()
	if err := s.file.Truncate(s.syncedSize); err != nil {
		return fmt.Errorf("restoring %s: %w", s.file.Name(), err)
	}
	for _, e := range s.saved {
		if _, err := s.file.WriteAt(e.data, e.off); err != nil {
			return fmt.Errorf("restoring %s: %w", s.file.Name(), err)
		}
	}
	if tear && s.lastWrite != nil {
		w := s.lastWrite
		if _, err := s.file.WriteAt(w.data[:len(w.data)/2], w.off); err != nil {
			return fmt.Errorf("tearing %s: %w", s.file.Name(), err)
		}
	}
	return nil
}
