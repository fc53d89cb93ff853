package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/pierrec/lz4/v4"
)

func TestXXH32(t *testing.T) {
	// Reference values of XXH32 with seed 0.
	for in, want := range map[string]uint32{
		"":    0x02CC5D05,
		"a":   0x550D7456,
		"abc": 0x32D153FF,
		"Nobody inspects the spammish repetition": 0xE2293B2F,
	} {
		if got := xxh32Sum([]byte(in)); got != want {
			t.Errorf("xxh32(%q) = %08x, want %08x", in, got, want)
		}
	}
	// Streaming in pieces of any size gives the same sum.
	data := make([]byte, 1000)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	whole := xxh32Sum(data)
	for _, piece := range []int{1, 3, 15, 16, 17, 100} {
		var x xxh32
		x.reset()
		for b := data; len(b) > 0; b = b[min(piece, len(b)):] {
			x.write(b[:min(piece, len(b))])
		}
		if x.sum() != whole {
			t.Errorf("in pieces of %d: %08x, want %08x", piece, x.sum(), whole)
		}
	}
}

// decodeLz4 decodes src with Strata's frame reader.
func decodeLz4(src []byte) ([]byte, error) {
	block, err := lz4MaxBlock(src)
	if err != nil {
		return nil, err
	}
	var z lz4Reader
	z.reset(src, make([]byte, lz4History+max(block, 64<<10)))
	return io.ReadAll(&z)
}

// TestLz4Frames decodes frames the lz4 command line tool wrote (linked
// blocks of 64 KiB, with block and content checksums and a content size,
// and without; independent blocks) and frames pierrec/lz4 writes, and
// refuses each with a byte of its framing or a checksum changed.
func TestLz4Frames(t *testing.T) {
	const want = "c57c5a6c0452bd666af3ac6c6ef8deb3d875482259a93ba0b6cd150224a0cdbc" // sha256 of the content
	files, _ := filepath.Glob("testdata/lz4/*.lz4")
	if len(files) != 3 {
		t.Fatalf("%d fixtures", len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out, err := decodeLz4(src)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if sum := sha256.Sum256(out); hex.EncodeToString(sum[:]) != want {
			t.Fatalf("%s: decoded %d bytes, not the content", f, len(out))
		}
		// Every checksum is checked: the last four bytes (content or
		// last block checksum, or the end mark), the header checksum.
		for _, at := range []int{len(src) - 1, 6, 4} {
			bad := bytes.Clone(src)
			bad[at] ^= 0x10
			if _, err := decodeLz4(bad); err == nil {
				t.Errorf("%s: byte %d changed, accepted", f, at)
			}
		}
	}
	data := bytes.Repeat([]byte("a fairly compressible line of text, again and again\n"), 30000)
	for _, opts := range [][]lz4.Option{
		nil,
		{lz4.BlockSizeOption(lz4.Block64Kb), lz4.BlockChecksumOption(true)},
		{lz4.BlockSizeOption(lz4.Block256Kb), lz4.SizeOption(uint64(len(data)))},
		{lz4.ChecksumOption(false)},
	} {
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		if err := w.Apply(opts...); err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		w.Close()
		two := append(bytes.Clone(buf.Bytes()), buf.Bytes()...) // two frames
		out, err := decodeLz4(two)
		if err != nil || !bytes.Equal(out, append(bytes.Clone(data), data...)) {
			t.Fatalf("options %v: %d bytes, %v", opts, len(out), err)
		}
	}
}

// FuzzLz4 checks Strata's frame reader against pierrec/lz4's (franz-go's
// consumers' decoder) on any input: what Strata decodes, pierrec decodes
// too, to the same bytes (else a batch Strata accepted would stall those
// consumers), and it never panics.
func FuzzLz4(f *testing.F) {
	files, _ := filepath.Glob("testdata/lz4/*.lz4")
	for _, name := range files {
		b, _ := os.ReadFile(name)
		f.Add(b[:min(len(b), 4096)])
	}
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.BlockChecksumOption(true))
	w.Write(bytes.Repeat([]byte("abcabcabd"), 100))
	w.Close()
	f.Add(buf.Bytes())
	f.Add(binary.LittleEndian.AppendUint32(nil, lz4FrameMagic))
	f.Fuzz(func(t *testing.T, src []byte) {
		ours, err := decodeLz4(src)
		r := lz4.NewReader(bytes.NewReader(src))
		theirs, err2 := io.ReadAll(r)
		if err == nil && (err2 != nil || !bytes.Equal(ours, theirs)) {
			t.Fatalf("decoded %d bytes, pierrec %d: %v", len(ours), len(theirs), err2)
		}
	})
}
