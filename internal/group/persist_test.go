package group

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

func TestEncodeDecodeBatch(t *testing.T) {
	now := time.UnixMilli(1700000000123)
	o := offsetAndMetadata{offset: 42, leaderEpoch: 3, metadata: "m", commitTimestamp: now.UnixMilli(), expireTimestamp: -1}
	in := []kv{
		offsetRecord("g", "t", 7, o),
		offsetTombstone("g", "t", 8),
		groupTombstone("gone"),
	}
	// Built as the coordinator runtime builds the batches it appends.
	recs := make([]record.Rec, len(in))
	for i, r := range in {
		recs[i] = record.Rec{Key: r.key, Value: r.value, Timestamp: now.UnixMilli()}
	}
	batch := record.Build(nil, recs)

	h, err := record.Validate(batch, 0)
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if h.NumRecords != 3 || h.LastOffsetDelta != 2 || h.ProducerID != -1 || h.Codec() != record.CodecNone || h.MaxTimestamp != now.UnixMilli() {
		t.Fatalf("header %+v", h)
	}
	var out []kv
	if err := decodeBatch(batch, func(k, v []byte) error {
		out = append(out, kv{k, v})
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("decoded %d records, want %d", len(out), len(in))
	}
	for i := range in {
		if !bytes.Equal(out[i].key, in[i].key) || !bytes.Equal(out[i].value, in[i].value) || (out[i].value == nil) != (in[i].value == nil) {
			t.Errorf("record %d: got %x=%x, want %x=%x", i, out[i].key, out[i].value, in[i].key, in[i].value)
		}
	}

	// The value decodes with kmsg as Kafka's OffsetCommitValue v3.
	var v kmsg.OffsetCommitValue
	if err := v.ReadFrom(out[0].value); err != nil || v.Version != 3 || v.Offset != 42 || v.LeaderEpoch != 3 || v.Metadata != "m" {
		t.Fatalf("value %+v, %v", v, err)
	}

	// A flipped bit fails the CRC.
	batch[len(batch)-1] ^= 1
	if err := decodeBatch(batch, func(k, v []byte) error { return nil }, nil); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("corrupt batch: got %v", err)
	}
}

func TestConsumerGroupRecordRoundTrip(t *testing.T) {
	g := newConsumerGroup("cg")
	g.groupEpoch = 7
	rec := consumerGroupRecord(g, time.Unix(1, 0))
	st := newData()
	if err := st.replayRecord(rec.key, rec.value, time.Unix(2, 0)); err != nil {
		t.Fatal(err)
	}
	got := st.groups["cg"]
	if got == nil || got.consumer == nil || got.consumer.groupEpoch != 7 || got.consumer.assignmentEpoch != 7 {
		t.Fatalf("replayed %+v", got)
	}
	// Without the tag, the same value is a classic group.
	var v kmsg.GroupMetadataValue
	if err := v.ReadFrom(rec.value); err != nil {
		t.Fatal(err)
	}
	v.UnknownTags = kmsg.Tags{}
	if err := st.replayRecord(rec.key, v.AppendTo(nil), time.Unix(2, 0)); err != nil {
		t.Fatal(err)
	}
	if st.groups["cg"].classic == nil {
		t.Fatal("untagged value did not replay as a classic group")
	}
}
