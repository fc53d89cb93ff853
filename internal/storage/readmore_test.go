package storage

import "testing"

// TestReadReportsWhatFollows: Read says whether more below maxOffset
// could be read at once, beyond maxBytes in the region's segment (More)
// or in a later segment (LaterSegment), the facts a long-polled fetch
// decides by, as Kafka's DelayedFetch does.
func TestReadReportsWhatFollows(t *testing.T) {
	cfg := testConfig() // segments of 4096 bytes
	l := openTestLog(t, newMem(t, "/d"), "/d/t-0", cfg, LogOptions{})
	for range 60 {
		mustAppend(t, l, makeBatch(t, spec{valueSize: 100}), leader(0))
	}
	bases := l.SegmentBaseOffsets()
	if len(bases) < 3 {
		t.Fatalf("%d segments, want 3 or more", len(bases))
	}
	one := int(l.segmentList()[0].size.Load()) / int(bases[1]) // a batch's size
	lastOfFirst := bases[1] - 1
	for _, c := range []struct {
		name               string
		offset, maxOffset  int64
		maxBytes           int
		more, laterSegment bool
	}{
		{"a batch of many in the segment", 0, 60, one, true, true},
		{"the segment's rest", 0, bases[1], 1 << 20, false, true},
		{"the last batch of a segment", lastOfFirst, 60, one, false, true},
		{"up to maxOffset in the segment", 0, 2, 1 << 20, false, false},
		{"a batch before maxOffset in the segment", 0, 2, one, true, false},
		{"the last segment", bases[len(bases)-1], 60, 1 << 20, false, false},
		{"nothing below maxOffset", 5, 5, 1 << 20, false, false},
	} {
		res, err := l.Read(c.offset, c.maxBytes, c.maxOffset, true)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if res.More != c.more || res.LaterSegment != c.laterSegment {
			t.Errorf("%s: More %v, LaterSegment %v; want %v, %v", c.name, res.More, res.LaterSegment, c.more, c.laterSegment)
		}
	}
}
