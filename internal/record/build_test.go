package record

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestBuildRoundTrip(t *testing.T) {
	recs := []Rec{
		{Key: []byte("k1"), Value: []byte("v1"), Timestamp: 1000},
		{Key: []byte("k2"), Value: nil, Timestamp: 1005, Headers: []kmsg.Header{{Key: "h", Value: []byte("x")}}},
		{Key: nil, Value: bytes.Repeat([]byte("z"), 300), Timestamp: 999},
	}
	batch := Build(nil, recs)
	v, err := ValidateProduced(batch, ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.Headers()[0]
	if h.NumRecords != 3 || h.LastOffsetDelta != 2 || h.MaxTimestamp != 1005 || h.Size() != len(batch) || h.ProducerID != -1 {
		t.Fatalf("header %+v", h)
	}
	SetBaseOffset(batch, 40)
	var i int
	err = Records(batch, func(off, ts int64, r *kmsg.Record) error {
		want := recs[i]
		if off != 40+int64(i) || ts != want.Timestamp || !bytes.Equal(r.Key, want.Key) || !bytes.Equal(r.Value, want.Value) || (r.Value == nil) != (want.Value == nil) || len(r.Headers) != len(want.Headers) {
			t.Errorf("record %d: off %d ts %d %+v", i, off, ts, r)
		}
		i++
		return nil
	})
	if err != nil || i != 3 {
		t.Fatalf("%d records, %v", i, err)
	}
	// kmsg's own decoder agrees with our framing.
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(batch); err != nil || kb.NumRecords != 3 {
		t.Fatal(err)
	}
}
