package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSpliceBytes: a spliced fetch response is byte for byte what kmsg
// encodes for the same response with the records inline, by sendfile and
// by copying, at every fetch version, with regions that are empty, larger
// than the copy buffer, and in files without a descriptor.
func TestSpliceBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3*copyBufSize+12345)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	f := writeTestFile(t, data)
	regions := map[int32]FileRegion{
		0: {File: f, Pos: 0, Len: int64(len(data))},                     // several copy chunks; 3-byte uvarint length
		1: {File: f, Pos: 100, Len: 100},                                // 1-byte uvarint length
		2: {File: f, Pos: 7, Len: 0},                                    // empty
		3: {File: memFile{bytes.NewReader(data)}, Pos: 1000, Len: 5000}, // no descriptor
		4: {File: f, Pos: int64(len(data)) - 200, Len: 200},             // 2-byte uvarint length, end of file
	}

	frames := make(map[bool][]byte)
	for version := int16(4); version <= 18; version++ {
		for _, copySplices := range []bool{false, true} {
			t.Run(fmt.Sprintf("v%d/copy=%v", version, copySplices), func(t *testing.T) {
				h := newTestHandler()
				h.regions = regions
				srv := startServer(t, h, func(c *Config) { c.CopySplices = copySplices })
				c := dial(t, srv.addr)
				req := kmsg.NewPtrFetchRequest()
				req.Version = version
				topic := kmsg.NewFetchRequestTopic()
				topic.Topic, topic.TopicID = "topic", [16]byte{9}
				for p := range int32(6) {
					rp := kmsg.NewFetchRequestTopicPartition()
					rp.Partition = p
					topic.Partitions = append(topic.Partitions, rp)
				}
				req.Topics = append(req.Topics, topic)
				corr := c.send(req)
				frame, err := c.readFrame()
				if err != nil {
					t.Fatal(err)
				}
				resp := decodeResponse(t, req, corr, frame).(*kmsg.FetchResponse)
				for _, p := range resp.Topics[0].Partitions {
					r, ok := regions[p.Partition]
					if !ok {
						continue
					}
					if !bytes.Equal(p.RecordBatches, data[r.Pos:r.Pos+r.Len]) {
						t.Fatalf("partition %d: records differ from the region", p.Partition)
					}
				}
				// Re-encode what was decoded, records inline: the spliced
				// frame must be exactly kmsg's encoding.
				want := append([]byte(nil), frame[:4]...)
				if resp.IsFlexible() {
					want = append(want, 0)
				}
				want = resp.AppendTo(want)
				if !bytes.Equal(frame, want) {
					t.Fatalf("spliced frame (%d bytes) differs from kmsg's encoding (%d bytes)", len(frame), len(want))
				}
				frames[copySplices] = frame
			})
		}
		if !bytes.Equal(frames[false], frames[true]) {
			t.Fatalf("v%d: sendfile and copying wrote different bytes", version)
		}
	}
}

// TestPlanSplices covers the handler mistakes planSplices must catch.
func TestPlanSplices(t *testing.T) {
	a, b := NewCookie(), NewCookie()
	region := FileRegion{File: memFile{bytes.NewReader(nil)}, Len: 1}
	encode := func(flexible bool, cookies ...[16]byte) []byte {
		enc := []byte{0, 0, 0, 0, 0, 0, 0, 1} // size, correlation id
		for _, c := range cookies {
			if flexible {
				enc = append(enc, 17)
			} else {
				enc = append(enc, 0, 0, 0, 16)
			}
			enc = append(enc, c[:]...)
		}
		return enc
	}
	tests := []struct {
		name     string
		enc      []byte
		flexible bool
		splices  []Splice
		ok       bool
	}{
		{"in order", encode(false, a, b), false, []Splice{{a, region}, {b, region}}, true},
		{"flexible", encode(true, a, b), true, []Splice{{a, region}, {b, region}}, true},
		{"out of order", encode(false, a, b), false, []Splice{{b, region}, {a, region}}, false},
		{"missing", encode(false, a), false, []Splice{{a, region}, {b, region}}, false},
		{"not a bytes field", encode(true, a), false, []Splice{{a, region}}, false},
		{"not a compact bytes field", encode(false, a), true, []Splice{{a, region}}, false},
		{"negative length", encode(false, a), false, []Splice{{a, FileRegion{File: region.File, Len: -1}}}, false},
		{"no file", encode(false, a), false, []Splice{{a, FileRegion{Len: 1}}}, false},
		{"over a frame", encode(false, a, b), false, []Splice{{a, FileRegion{File: region.File, Len: 1 << 30}}, {b, FileRegion{File: region.File, Len: 1 << 30}}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			points, size, err := planSplices(tc.enc, 8, tc.splices, tc.flexible, nil)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				if !errors.Is(err, errBadSplice) {
					t.Fatalf("err = %v, not errBadSplice", err)
				}
				return
			}
			if len(points) != len(tc.splices) {
				t.Fatalf("%d points", len(points))
			}
			// Each 16-byte cookie becomes a 1-byte region.
			if want := int64(len(tc.enc) - 4 - 15*len(tc.splices)); size != want {
				t.Fatalf("size %d, want %d", size, want)
			}
		})
	}
}
