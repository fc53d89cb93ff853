package record

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestScanRecordsAndRebuild(t *testing.T) {
	recs := []Rec{
		{Key: []byte("a"), Value: []byte("1"), Timestamp: 1000},
		{Key: nil, Value: []byte("2"), Timestamp: 1001},
		{Key: []byte(""), Value: nil, Timestamp: 1003, Headers: []kmsg.Header{{Key: "h", Value: []byte("v")}}},
		{Key: []byte("d"), Value: bytes.Repeat([]byte("x"), 500), Timestamp: 999},
	}
	batch := Build(nil, recs)
	SetBaseOffset(batch, 100)
	h, _ := ParseHeader(batch)
	var got []RawRecord
	if err := ScanRecords(batch[HeaderSize:], h.NumRecords, func(r *RawRecord) error {
		got = append(got, *r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d records", len(got))
	}
	for i, r := range got {
		want := recs[i]
		if r.OffsetDelta != int32(i) || r.TimestampDelta != want.Timestamp-1000 ||
			!bytes.Equal(r.Key, want.Key) || (r.Key == nil) != (want.Key == nil) ||
			!bytes.Equal(r.Value, want.Value) || (r.Value == nil) != (want.Value == nil) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	// Keep records 0 and 2, move the base timestamp to 5000, and check that
	// every codec round-trips and kmsg reads the same absolute timestamps.
	var section []byte
	for _, i := range []int{0, 2} {
		section = AppendRetimed(section, &got[i], got[i].TimestampDelta+1000-5000)
	}
	for _, codec := range []int{CodecNone, CodecGzip, CodecSnappy, CodecLz4, CodecZstd} {
		nh := h
		nh.Attributes = int16(codec) | AttrDeleteHorizon
		nh.BaseTimestamp = 5000
		nh.NumRecords = 2
		comp, err := Compress(nil, codec, section)
		if err != nil {
			t.Fatal(err)
		}
		out := AppendBatch(nil, &nh, comp)
		vh, err := Validate(out, 0)
		if err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		if vh.BaseOffset != 100 || vh.LastOffsetDelta != 3 || vh.NumRecords != 2 || !vh.HasDeleteHorizon() || vh.Codec() != codec {
			t.Fatalf("codec %d: header %+v", codec, vh)
		}
		d, err := decompressAll(out)
		if err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		var offs, tss []int64
		if err := Records(d, func(off, ts int64, r *kmsg.Record) error {
			offs = append(offs, off)
			tss = append(tss, ts)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(offs) != 2 || offs[0] != 100 || offs[1] != 102 || tss[0] != 1000 || tss[1] != 1003 {
			t.Fatalf("codec %d: offsets %v timestamps %v", codec, offs, tss)
		}
		var kb kmsg.RecordBatch
		if err := kb.ReadFrom(d); err != nil || kb.NumRecords != 2 {
			t.Fatalf("codec %d: kmsg: %v", codec, err)
		}
	}
	// An emptied batch: a header alone, which Validate accepts.
	nh := h
	nh.NumRecords = 0
	if _, err := Validate(AppendBatch(nil, &nh, nil), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ValidateProduced(AppendBatch(nil, &nh, nil), ValidateOptions{}); err == nil {
		t.Fatal("a producer may not send an empty batch")
	}
	// Garbage never panics and is ErrShort.
	if err := ScanRecords([]byte{0x10, 0, 1}, 1, func(*RawRecord) error { return nil }); err == nil {
		t.Fatal("short record accepted")
	}
}
