package producer

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// highWaterFile plays the controller: it keeps the next unreserved producer
// id in a file, durably, as the metadata log's producer-ids record does.
type highWaterFile struct {
	path      string
	blockSize int64
	calls     int
}

func (h *highWaterFile) reserve() (int64, error) {
	h.calls++
	next := int64(0)
	b, err := os.ReadFile(h.path)
	switch {
	case err == nil && len(b) == 8:
		next = int64(binary.BigEndian.Uint64(b))
	case err == nil:
		return 0, errors.New("torn high-water file")
	case !errors.Is(err, os.ErrNotExist):
		return 0, err
	}
	tmp := h.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, err
	}
	if _, err := f.Write(binary.BigEndian.AppendUint64(nil, uint64(next+h.blockSize))); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return next, os.Rename(tmp, h.path)
}

func TestIDsUniqueAcrossRestarts(t *testing.T) {
	hw := &highWaterFile{path: filepath.Join(t.TempDir(), "producer-ids"), blockSize: DefaultIDBlockSize}
	seen := map[int64]bool{}
	take := func(a *IDAllocator, n int) {
		t.Helper()
		last := int64(-1)
		for range n {
			id, epoch, err := a.InitIdempotent()
			if err != nil {
				t.Fatal(err)
			}
			if epoch != 0 || id <= last || seen[id] {
				t.Fatalf("id %d epoch %d after %d (seen %v)", id, epoch, last, seen[id])
			}
			seen[id], last = true, id
		}
	}
	// Each "restart" is a new allocator on the same file; the rest of the
	// block the last one held is lost, never reused.
	for _, n := range []int{2500, 1, 999, 1000, 1001} {
		take(NewIDAllocator(DefaultIDBlockSize, hw.reserve), n)
	}
	if hw.calls != 3+1+1+1+2 {
		t.Fatalf("%d reservations", hw.calls)
	}
}

func TestIDsConcurrent(t *testing.T) {
	hw := &highWaterFile{path: filepath.Join(t.TempDir(), "producer-ids"), blockSize: 7}
	a := NewIDAllocator(7, hw.reserve)
	const workers, each = 8, 300
	ids := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				id, err := a.NextID()
				if err != nil {
					t.Error(err)
					return
				}
				ids[w] = append(ids[w], id)
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, list := range ids {
		for _, id := range list {
			if seen[id] {
				t.Fatalf("id %d handed out twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != workers*each || hw.calls != (workers*each+6)/7 {
		t.Fatalf("%d ids from %d reservations", len(seen), hw.calls)
	}
}

func TestIDReservationFailures(t *testing.T) {
	errController := errors.New("no quorum")
	blocks := []struct {
		first int64
		err   error
	}{
		{0, errController},
		{100, nil},
		{50, nil},                // overlaps ids already handed out
		{math.MaxInt64 - 1, nil}, // would end past MaxInt64
		{200, nil},
	}
	i := 0
	a := NewIDAllocator(2, func() (int64, error) {
		b := blocks[i]
		i++
		return b.first, b.err
	})
	id, _, err := a.InitIdempotent()
	if !errors.Is(err, ErrIDsUnavailable) || !errors.Is(err, errController) || id != -1 {
		t.Fatalf("failed reservation: id %d err %v", id, err)
	}
	if ErrorCode(err) != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("failed reservation answers %d", ErrorCode(err))
	}
	for _, want := range []int64{100, 101} {
		if id, err := a.NextID(); err != nil || id != want {
			t.Fatalf("id %d err %v, want %d", id, err, want)
		}
	}
	for range 2 {
		if _, err := a.NextID(); !errors.Is(err, ErrIDsExhausted) {
			t.Fatalf("bad block: %v", err)
		}
	}
	if id, err := a.NextID(); err != nil || id != 200 {
		t.Fatalf("after bad blocks: id %d err %v", id, err)
	}
}
