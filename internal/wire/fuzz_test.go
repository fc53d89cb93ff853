package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"reflect"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	// maxDecodeAllocRatio bounds what decoding a frame may allocate, as a
	// multiple of the frame's size. kmsg checks every array count against
	// the bytes left times a lower bound of the element's encoding before
	// it allocates the array, but the bound is loose (2 bytes for a topic)
	// and the element's Go struct is larger (64 bytes for a fetch topic):
	// a frame that is one array count followed by padding makes kmsg
	// allocate 32 times the frame. The worst TestDecodeAllocation found
	// over every key and version is 40x (StopReplica v0).
	maxDecodeAllocRatio = 48
	// decodeAllocSlack covers fixed costs: the reader's buffer, the
	// request struct, pool misses.
	decodeAllocSlack = 64 << 10
)

// allVersions accepts every key and version kmsg knows, so fuzzing reaches
// every decoder.
func allVersions(t testing.TB) *versionTable {
	versions := make(map[int16]VersionRange)
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		if req := kmsg.RequestForKey(key); req != nil {
			versions[key] = VersionRange{0, req.MaxVersion()}
		}
	}
	table, err := newVersionTable(versions)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// seedRequests returns a frame (without size prefix) for every key and
// version kmsg knows, twice: with default values, and with every array
// holding an element and every string and byte field set.
func seedRequests() [][]byte {
	formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	var frames [][]byte
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		req := kmsg.RequestForKey(key)
		if req == nil {
			continue
		}
		for version := int16(0); version <= req.MaxVersion(); version++ {
			for _, filled := range []bool{false, true} {
				r := kmsg.RequestForKey(key)
				if filled {
					fill(reflect.ValueOf(r).Elem(), 0)
				}
				r.SetVersion(version)
				frame := formatter.AppendRequest(nil, r, int32(version))[4:]
				if key == 7 && version == 0 {
					// kmsg's formatter stops after a v0 header; the
					// body (the broker id) still follows it.
					frame = r.AppendTo(frame)
				}
				frames = append(frames, frame)
			}
		}
	}
	return frames
}

var tagsType = reflect.TypeFor[kmsg.Tags]()

// fill sets every field of v to a non-zero value and gives every slice two
// elements, to a bounded depth, so the seed corpus exercises each decoder's
// arrays, strings and nullable fields.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == tagsType {
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).Name == "Version" || !v.Field(i).CanSet() {
				continue
			}
			fill(v.Field(i), depth+1)
		}
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Slice:
		if depth > 6 {
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), depth+1)
		}
	case reflect.Array:
		for i := range v.Len() {
			fill(v.Index(i), depth+1)
		}
	case reflect.String:
		v.SetString("fuzz")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		v.SetInt(1)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float64:
		v.SetFloat(0.5)
	}
}

// decodeFrame runs a frame through the connection's decoding path: size
// prefix, header, body.
func decodeFrame(body []byte, versions *versionTable) error {
	data := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	data = append(data, body...)
	f, err := readFrame(bufio.NewReader(bytes.NewReader(data)), math.MaxInt32)
	if err != nil {
		return err
	}
	var req Request
	return decodeRequest(f.buf, versions, "", &req)
}

// FuzzDecodeRequest: decoding any frame never panics and allocates at most
// maxDecodeAllocRatio times its size (plus a constant). The input is the
// frame after its size prefix, which the harness adds so that mutations
// reach the header and body; sizes are tested in TestOversizeFrame.
func FuzzDecodeRequest(f *testing.F) {
	for _, frame := range seedRequests() {
		f.Add(frame)
	}
	versions := allVersions(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_ = decodeFrame(body, versions)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; !raceEnabled && alloc > uint64(maxDecodeAllocRatio*len(body)+decodeAllocSlack) {
			t.Fatalf("decoding a %d-byte frame allocated %d bytes (%.0fx)", len(body), alloc, float64(alloc)/float64(len(body)))
		}
	})
}

// TestSeedRequestsDecode: every seed is a valid request, so the corpus
// starts from frames that get through the header into each body decoder.
func TestSeedRequestsDecode(t *testing.T) {
	versions := allVersions(t)
	for _, frame := range seedRequests() {
		if err := decodeFrame(frame, versions); err != nil {
			h, _, _ := parseHeader(frame)
			t.Errorf("%s v%d: %v", kmsg.NameForKey(h.key), h.version, err)
		}
	}
}

// countBombs returns variants of a request frame of size bytes, each
// padded with zeros after an array count written at one position of the
// body: the count as large as kmsg lets through for 2-byte elements, as an
// int32 and as a compact (uvarint) count. Such frames make kmsg allocate
// the most for their size.
func countBombs(frame []byte, size int) [][]byte {
	_, body, err := parseHeader(frame)
	if err != nil {
		panic(err)
	}
	var bombs [][]byte
	for at := len(frame) - len(body); at < len(frame); at++ {
		rest := size - at
		int32Bomb := make([]byte, size)
		copy(int32Bomb, frame[:at])
		binary.BigEndian.PutUint32(int32Bomb[at:], uint32((rest-4)/2))
		uvarintBomb := make([]byte, size)
		copy(uvarintBomb, frame[:at])
		binary.PutUvarint(uvarintBomb[at:], uint64((rest-5)/2+1))
		bombs = append(bombs, int32Bomb, uvarintBomb)
	}
	return bombs
}

// TestDecodeAllocation checks maxDecodeAllocRatio with count bombs of
// 64 KiB, where the fuzzer's small inputs cannot reach. It sweeps the
// requests that were worst when last measured; STRATA_WIRE_ALLOC_SWEEP=1
// sweeps every key and version (about ten seconds).
func TestDecodeAllocation(t *testing.T) {
	const size = 64 << 10
	sweepAll := os.Getenv("STRATA_WIRE_ALLOC_SWEEP") != ""
	worst := map[string]bool{"StopReplica v0": true, "Fetch v11": true, "Produce v7": true, "OffsetCommit v9": true, "AlterPartition v1": true}
	versions := allVersions(t)
	maxRatio, maxName := 0.0, ""
	var ms runtime.MemStats
	for _, seed := range seedRequests() {
		h, _, _ := parseHeader(seed)
		name := fmt.Sprintf("%s v%d", kmsg.NameForKey(h.key), h.version)
		if !sweepAll && !worst[name] {
			continue
		}
		for _, bomb := range countBombs(seed, size) {
			runtime.ReadMemStats(&ms)
			before := ms.TotalAlloc
			var req Request
			_ = decodeRequest(bomb, versions, "", &req)
			runtime.ReadMemStats(&ms)
			ratio := float64(ms.TotalAlloc-before) / size
			if ratio > maxRatio {
				maxRatio, maxName = ratio, name
			}
		}
	}
	t.Logf("worst: %.1fx the frame size, %s", maxRatio, maxName)
	if maxRatio > maxDecodeAllocRatio && !raceEnabled {
		t.Errorf("decoding %s allocated %.1fx the frame size; the bound is %dx", maxName, maxRatio, maxDecodeAllocRatio)
	}
}
