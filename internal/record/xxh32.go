package record

import (
	"encoding/binary"
	"math/bits"
)

// xxh32 is the 32-bit xxHash (seed 0) that LZ4 frames carry as header,
// block and content checksums (xxHash spec, XXH32).
type xxh32 struct {
	v         [4]uint32
	buf       [16]byte
	n         int // bytes in buf
	total     uint64
	stripes32 bool // at least one 16-byte stripe was consumed
}

const (
	xxPrime1 uint32 = 2654435761
	xxPrime2 uint32 = 2246822519
	xxPrime3 uint32 = 3266489917
	xxPrime4 uint32 = 668265263
	xxPrime5 uint32 = 374761393
)

func (x *xxh32) reset() {
	p1, p2 := xxPrime1, xxPrime2 // the sums wrap, as the spec's do
	*x = xxh32{v: [4]uint32{p1 + p2, p2, 0, -p1}}
}

func xxRound(acc, lane uint32) uint32 {
	return bits.RotateLeft32(acc+lane*xxPrime2, 13) * xxPrime1
}

func (x *xxh32) write(p []byte) {
	x.total += uint64(len(p))
	if x.n > 0 {
		k := copy(x.buf[x.n:], p)
		x.n += k
		p = p[k:]
		if x.n < 16 {
			return
		}
		x.stripes(x.buf[:])
		x.n = 0
	}
	full := len(p) &^ 15
	if full > 0 {
		x.stripes(p[:full])
	}
	x.n = copy(x.buf[:], p[full:])
}

// stripes consumes b, a multiple of 16 bytes.
func (x *xxh32) stripes(b []byte) {
	v1, v2, v3, v4 := x.v[0], x.v[1], x.v[2], x.v[3]
	for ; len(b) >= 16; b = b[16:] {
		_ = b[15] // one bounds check for the four loads
		v1 = xxRound(v1, binary.LittleEndian.Uint32(b))
		v2 = xxRound(v2, binary.LittleEndian.Uint32(b[4:]))
		v3 = xxRound(v3, binary.LittleEndian.Uint32(b[8:]))
		v4 = xxRound(v4, binary.LittleEndian.Uint32(b[12:]))
	}
	x.v = [4]uint32{v1, v2, v3, v4}
	x.stripes32 = true
}

func (x *xxh32) sum() uint32 {
	var h uint32
	if x.stripes32 {
		h = bits.RotateLeft32(x.v[0], 1) + bits.RotateLeft32(x.v[1], 7) +
			bits.RotateLeft32(x.v[2], 12) + bits.RotateLeft32(x.v[3], 18)
	} else {
		h = xxPrime5
	}
	h += uint32(x.total)
	b := x.buf[:x.n]
	for ; len(b) >= 4; b = b[4:] {
		h += binary.LittleEndian.Uint32(b) * xxPrime3
		h = bits.RotateLeft32(h, 17) * xxPrime4
	}
	for _, c := range b {
		h += uint32(c) * xxPrime5
		h = bits.RotateLeft32(h, 11) * xxPrime1
	}
	h ^= h >> 15
	h *= xxPrime2
	h ^= h >> 13
	h *= xxPrime3
	h ^= h >> 16
	return h
}

// xxh32Sum returns the xxh32 of b.
func xxh32Sum(b []byte) uint32 {
	var x xxh32
	x.reset()
	x.write(b)
	return x.sum()
}
