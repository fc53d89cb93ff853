package storage

import (
	"bytes"
	"math"
	"testing"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// FuzzRecover opens a log whose active segment holds a valid prefix cut at
// an arbitrary point followed by arbitrary bytes, with an arbitrary offset
// index. Opening must succeed; without a clean marker every visible batch
// must be valid and follow its predecessor; reads and appends must work.
func FuzzRecover(f *testing.F) {
	var valid []byte
	{
		fs := newMem(f, "/d")
		l := openTestLog(f, fs, "/d/t-0", testConfig(), LogOptions{})
		for i := range 8 {
			codec := i % 5
			mustAppend(f, l, makeBatch(f, spec{records: 1 + i%3, valueSize: 30, ts: int64(i), codec: codec}), leader(int32(i/4)))
		}
		l.Close()
		valid, _ = vfs.ReadFile(fs, "/d/t-0/00000000000000000000.log")
	}
	f.Add(valid, uint16(len(valid)), []byte{}, false)
	f.Add([]byte{}, uint16(len(valid)), []byte{}, true)
	f.Add(valid[:40], uint16(len(valid)), []byte{0, 0, 0, 5, 0, 0, 0, 100}, false)
	f.Add(bytes.Repeat([]byte{0xff}, 100), uint16(100), []byte{}, false)
	f.Add(make([]byte, 200), uint16(0), make([]byte, 64), true)
	garbled := bytes.Clone(valid)
	garbled[len(garbled)/2] ^= 1
	f.Add(garbled, uint16(0), []byte{}, false)
	// A batch whose length claims more than the file holds.
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 99, 0x7f, 0xff, 0xff, 0xff}, uint16(len(valid)), []byte{}, false)

	f.Fuzz(func(t *testing.T, tail []byte, cut uint16, index []byte, clean bool) {
		fs := newMem(t, "/d/t-0")
		prefix := valid[:int(cut)%(len(valid)+1)]
		write := func(name string, data []byte) {
			w, err := fs.Create("/d/t-0/" + name)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(data)
			w.Close()
		}
		write("00000000000000000000.log", concat(prefix, tail))
		write("00000000000000000000.index", index)
		l, err := OpenLog(fs, "/d/t-0", testConfig(), LogOptions{Logger: quietLogger(), LogStartOffset: -1,
			CleanShutdown: clean, RecoveryPoint: int64(cut)})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer l.Close()
		leo := l.LogEndOffset()
		next := int64(-1)
		n := 0
		err = l.ReadBatches(0, 0, func(h record.Header, b []byte) bool {
			if !clean {
				if _, err := record.Validate(b, 0); err != nil {
					t.Fatalf("corrupt batch visible after recovery: %v", err)
				}
				if h.BaseOffset <= next {
					t.Fatalf("batch at %d after %d", h.BaseOffset, next)
				}
			}
			next = h.LastOffset()
			n++
			return true
		})
		if err != nil && !clean {
			t.Fatalf("reading recovered log: %v", err)
		}
		if !clean && n > 0 && next+1 != leo {
			t.Fatalf("last batch ends at %d, log end %d", next, leo)
		}
		for off := int64(0); off < min(leo, 64); off++ {
			l.Read(off, 1000, math.MaxInt64, true)
		}
		l.OffsetForTimestamp(3)
		if _, err := l.Append(makeBatch(t, spec{}), leader(9)); err != nil && !clean {
			t.Fatalf("append after recovery: %v", err)
		}
	})
}
