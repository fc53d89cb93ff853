package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/pierrec/lz4/v4"
)

// LZ4 frames (lz4_Frame_format.md), as Kafka's clients write them:
//
//	magic           4 bytes LE  0x184D2204 (0x184D2A5x: a skippable frame)
//	FLG             1 byte      version 01, block independence, block
//	                            checksum, content size, content checksum,
//	                            reserved, dictionary id
//	BD              1 byte      block maximum size: 4 (64 KiB) to 7 (4 MiB)
//	content size    8 bytes     when the flag is set
//	dictionary id   4 bytes     when the flag is set (refused here)
//	HC              1 byte      (xxh32 of FLG..dictionary id >> 8) & 0xFF
//	blocks          4-byte LE size (high bit: stored uncompressed), data,
//	                4-byte xxh32 of the data when block checksums are on
//	end mark        4 bytes of 0
//	content xxh32   4 bytes when the flag is set
//
// Strata decodes the frames itself, block by block with the LZ4 library's
// block decoder, so that it owns every buffer: one of the frame's block
// size (and 64 KiB of history when blocks are linked), reused from the
// decompression budget's pool; stored blocks are served from the input as
// they are. Every checksum is checked, as consumers' decoders check them.

var errLZ4Frame = errors.New("malformed LZ4 frame")

const (
	lz4FrameMagic     = 0x184D2204
	lz4SkippableMagic = 0x184D2A50 // the low four bits are free
	lz4History        = 64 << 10   // what a linked block may refer back to
)

// lz4BlockSize returns the block maximum size a BD byte declares.
func lz4BlockSize(bd byte) (int, bool) {
	if bd&0x8F != 0 || bd>>4 < 4 {
		return 0, false
	}
	return 1 << (2*int(bd>>4) + 8), true // 4: 64 KiB … 7: 4 MiB
}

// lz4MaxBlock walks the LZ4 frames of src without decoding them and
// returns the largest block size their descriptors declare, which is the
// buffer a lz4Reader needs. Legacy frames (which Kafka never writes),
// dictionaries and unknown flags are refused.
func lz4MaxBlock(src []byte) (int, error) {
	largest := 0
	for p := 0; p < len(src); {
		if len(src)-p < 8 {
			return 0, errLZ4Frame
		}
		magic := binary.LittleEndian.Uint32(src[p:])
		if magic&^0xF == lz4SkippableMagic {
			n := int64(binary.LittleEndian.Uint32(src[p+4:]))
			if n > int64(len(src)-p-8) {
				return 0, errLZ4Frame
			}
			p += 8 + int(n)
			continue
		}
		if magic != lz4FrameMagic {
			return 0, errLZ4Frame
		}
		flg := src[p+4]
		block, ok := lz4BlockSize(src[p+5])
		if flg>>6 != 1 || flg&0x03 != 0 || !ok {
			return 0, errLZ4Frame
		}
		largest = max(largest, block)
		p += 6 + 1 // magic, FLG, BD, header checksum
		if flg&0x08 != 0 {
			p += 8 // content size
		}
		for {
			if len(src)-p < 4 {
				return 0, errLZ4Frame
			}
			n := binary.LittleEndian.Uint32(src[p:])
			p += 4
			if n == 0 {
				break // end mark
			}
			size := int(n &^ (1 << 31))
			if size > block || size > len(src)-p {
				return 0, errLZ4Frame
			}
			p += size
			if flg&0x10 != 0 {
				p += 4 // block checksum
			}
		}
		if flg&0x04 != 0 {
			p += 4 // content checksum
		}
		if p > len(src) {
			return 0, errLZ4Frame
		}
	}
	return largest, nil
}

// lz4Reader decodes LZ4 frames from memory: an io.Reader of their content.
type lz4Reader struct {
	src []byte // what is left of the frames
	buf []byte // history (linked blocks) then a block; owned by the decoder
	out []byte // decoded bytes not yet read: buf's, or a stored block of src

	inFrame  bool
	flg      byte
	block    int    // the frame's block maximum size
	size     uint64 // the content size the frame declares, if it does
	produced uint64
	content  xxh32
	// Linked blocks: the history is buf[lz4History-history:lz4History],
	// and last the block decoded before, to add to it once read.
	history int
	last    []byte
}

// reset starts reading src with buf (at least the frames' largest block,
// plus lz4History), which lz4MaxBlock sized.
func (z *lz4Reader) reset(src, buf []byte) {
	*z = lz4Reader{src: src, buf: buf}
}

func (z *lz4Reader) Read(p []byte) (int, error) {
	for len(z.out) == 0 {
		if err := z.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, z.out)
	z.out = z.out[n:]
	return n, nil
}

// next decodes the next block into out, going through frame headers, end
// marks and skippable frames; io.EOF after the last frame.
func (z *lz4Reader) next() error {
	if !z.inFrame {
		return z.frame()
	}
	if len(z.src) < 4 {
		return io.ErrUnexpectedEOF
	}
	n := binary.LittleEndian.Uint32(z.src)
	z.src = z.src[4:]
	if n == 0 {
		return z.end()
	}
	size := int(n &^ (1 << 31))
	if size > z.block || size > len(z.src) {
		return errLZ4Frame
	}
	data := z.src[:size]
	z.src = z.src[size:]
	if z.flg&0x10 != 0 {
		if len(z.src) < 4 {
			return io.ErrUnexpectedEOF
		}
		if xxh32Sum(data) != binary.LittleEndian.Uint32(z.src) {
			return errors.New("LZ4 block checksum mismatch")
		}
		z.src = z.src[4:]
	}
	linked := z.flg&0x20 == 0
	if linked {
		z.fold()
	}
	if n&(1<<31) != 0 {
		z.out = data // stored: served as it is
	} else {
		dst := z.buf[lz4History : lz4History+z.block]
		var dict []byte
		if linked {
			dict = z.buf[lz4History-z.history : lz4History]
		}
		k, err := lz4.UncompressBlockWithDict(data, dst, dict)
		if err != nil {
			return err
		}
		z.out = dst[:k]
	}
	if linked {
		z.last = z.out
	}
	z.produced += uint64(len(z.out))
	if z.flg&0x04 != 0 {
		z.content.write(z.out)
	}
	return nil
}

// fold adds the last block decoded, all of it read by now, to the history,
// which keeps the last lz4History bytes of the frame's content.
func (z *lz4Reader) fold() {
	last := z.last
	z.last = nil
	if len(last) >= lz4History {
		copy(z.buf[:lz4History], last[len(last)-lz4History:])
		z.history = lz4History
		return
	}
	keep := min(z.history, lz4History-len(last))
	at := lz4History - len(last)
	copy(z.buf[at-keep:at], z.buf[lz4History-keep:lz4History]) // overlapping: copy moves
	copy(z.buf[at:lz4History], last)
	z.history = keep + len(last)
}

// frame parses a frame header, skipping skippable frames.
func (z *lz4Reader) frame() error {
	for {
		if len(z.src) == 0 {
			return io.EOF
		}
		if len(z.src) < 7 {
			return io.ErrUnexpectedEOF
		}
		magic := binary.LittleEndian.Uint32(z.src)
		if magic&^0xF == lz4SkippableMagic {
			n := binary.LittleEndian.Uint32(z.src[4:])
			if uint64(n) > uint64(len(z.src)-8) {
				return io.ErrUnexpectedEOF
			}
			z.src = z.src[8+n:]
			continue
		}
		if magic != lz4FrameMagic {
			return errLZ4Frame
		}
		flg := z.src[4]
		block, ok := lz4BlockSize(z.src[5])
		if flg>>6 != 1 || flg&0x03 != 0 || !ok || len(z.buf) < lz4History+block {
			return errLZ4Frame
		}
		desc := 2
		if flg&0x08 != 0 {
			desc += 8
		}
		if len(z.src) < 4+desc+1 {
			return io.ErrUnexpectedEOF
		}
		if byte(xxh32Sum(z.src[4:4+desc])>>8) != z.src[4+desc] {
			return errors.New("LZ4 frame header checksum mismatch")
		}
		z.size = 0
		if flg&0x08 != 0 {
			z.size = binary.LittleEndian.Uint64(z.src[6:])
		}
		z.src = z.src[4+desc+1:]
		z.flg, z.block, z.inFrame = flg, block, true
		z.produced, z.history, z.last = 0, 0, nil
		z.content.reset()
		return nil
	}
}

// end checks a frame's end: its content checksum and size.
func (z *lz4Reader) end() error {
	if z.flg&0x04 != 0 {
		if len(z.src) < 4 {
			return io.ErrUnexpectedEOF
		}
		if z.content.sum() != binary.LittleEndian.Uint32(z.src) {
			return errors.New("LZ4 content checksum mismatch")
		}
		z.src = z.src[4:]
	}
	if z.flg&0x08 != 0 && z.produced != z.size {
		return fmt.Errorf("LZ4 frame of %d bytes, its header says %d", z.produced, z.size)
	}
	z.inFrame = false
	return nil
}
