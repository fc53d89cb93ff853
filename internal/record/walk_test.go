package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"testing/iotest"
)

// walkResult is everything a walk observes, to compare two walks.
func walkResult(w *walker, h *Header, produced bool) string {
	var out []string
	err := walkRecords(w, h, produced, false, func(offset, timestamp int64) bool {
		out = append(out, fmt.Sprint(offset, timestamp))
		return true
	})
	if err != nil {
		// Where a failed walk stopped, and its message, may differ; the
		// record it names may not.
		var re *RecordError
		if !errors.As(err, &re) {
			return fmt.Sprintf("%v %v", out, err) // the batch's timestamps
		}
		return fmt.Sprintf("%v failed at record %v", out, re.Index)
	}
	end, _ := w.atEnd()
	return fmt.Sprintf("%v end=%v at=%d", out, end, w.offset())
}

// FuzzWalker checks that the streaming walker, through windows small
// enough that every field straddles a refill and a reader that yields one
// byte at a time, sees exactly what the in-memory walker sees.
func FuzzWalker(f *testing.F) {
	var section []byte
	for i := range 4 {
		body := []byte{0}
		body = binary.AppendVarint(body, int64(i*1000))
		body = binary.AppendVarint(body, int64(i))
		body = binary.AppendVarint(body, 2)
		body = append(body, 'k', byte(i))
		body = binary.AppendVarint(body, int64(i*40))
		body = append(body, bytes.Repeat([]byte{'v'}, i*40)...)
		body = binary.AppendVarint(body, 1)
		body = binary.AppendVarint(body, 1)
		body = append(body, 'h')
		body = binary.AppendVarint(body, -1)
		section = append(binary.AppendVarint(section, int64(len(body))), body...)
	}
	f.Add(section, int32(4), int64(0))
	f.Add(section[:len(section)-3], int32(4), int64(5))
	f.Add(append(bytes.Clone(section), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), int32(5), int64(-1))
	f.Add([]byte{0x02, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03}, int32(1), int64(1<<62))
	f.Add([]byte{}, int32(0), int64(0))
	f.Fuzz(func(t *testing.T, section []byte, count int32, base int64) {
		if count < 0 || count > 1<<16 {
			return
		}
		h := Header{NumRecords: count, LastOffsetDelta: max(count-1, 0), BaseTimestamp: base, MaxTimestamp: base + 3000}
		var mem walker
		mem.inMemory(section)
		want := walkResult(&mem, &h, true)
		for _, size := range []int{10, 11, 17, 64} {
			for _, oneByte := range []bool{false, true} {
				var src = bytes.NewReader(section)
				var w walker
				if oneByte {
					w.streamed(iotest.OneByteReader(src), int64(len(section)), make([]byte, size))
				} else {
					w.streamed(src, int64(len(section)), make([]byte, size))
				}
				if got := walkResult(&w, &h, true); got != want {
					t.Fatalf("window %d one byte %v:\n got %s\nwant %s", size, oneByte, got, want)
				}
			}
		}
		// The limit stops a stream one byte short of the section.
		if len(section) > 0 {
			var w walker
			w.streamed(bytes.NewReader(section), int64(len(section)-1), make([]byte, 16))
			walkRecords(&w, &h, true, false, nil)
			if w.skip(1 << 40); w.err == nil {
				t.Fatal("a stream one byte over its limit was read whole")
			}
		}
	})
}

// BenchmarkWalkInMemory measures the walk of an uncompressed batch's 100
// records of 100 bytes, without the CRC. b.N is records.
func BenchmarkWalkInMemory(b *testing.B) {
	var section []byte
	for i := range 100 {
		body := []byte{0}
		body = binary.AppendVarint(body, 0)
		body = binary.AppendVarint(body, int64(i))
		body = binary.AppendVarint(body, -1)
		body = binary.AppendVarint(body, 100)
		body = append(body, bytes.Repeat([]byte{'v'}, 100)...)
		body = binary.AppendVarint(body, 0)
		section = append(binary.AppendVarint(section, int64(len(body))), body...)
	}
	h := Header{NumRecords: 100, LastOffsetDelta: 99}
	b.SetBytes(int64(len(section)) / 100)
	for i := 0; i < b.N; i += 100 {
		var w walker
		w.inMemory(section)
		if err := walkRecords(&w, &h, true, false, nil); err != nil {
			b.Fatal(err)
		}
	}
}
