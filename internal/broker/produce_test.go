package broker

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

// buildBatch returns a valid, uncompressed producer batch of n records.
func buildBatch(n int, value string) []byte {
	recs := make([]record.Rec, n)
	now := time.Now().UnixMilli()
	for i := range recs {
		recs[i] = record.Rec{Value: []byte(value), Timestamp: now}
	}
	return record.Build(nil, recs)
}

func TestProduceAcksAndCodecs(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "events", 3, nil)
	ctx := testContext(t)

	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	want := map[string]bool{}
	for name, codec := range codecs {
		for _, acks := range []kgo.Acks{kgo.NoAck(), kgo.LeaderAck(), kgo.AllISRAcks()} {
			opts := []kgo.Opt{kgo.ProducerBatchCompression(codec), kgo.RequiredAcks(acks)}
			if acks != kgo.AllISRAcks() {
				opts = append(opts, kgo.DisableIdempotentWrite())
			}
			cl := newClient(t, b.Addr(), opts...)
			for i := 0; i < 50; i++ {
				v := fmt.Sprintf("%s-%v-%d-%s", name, acks, i, bytes.Repeat([]byte("x"), i*10))
				want[v] = true
				cl.Produce(ctx, &kgo.Record{Topic: "events", Key: []byte(fmt.Sprint(i)), Value: []byte(v)}, func(r *kgo.Record, err error) {
					if err != nil {
						t.Errorf("produce %s: %v", name, err)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := consumeN(t, b.Addr(), len(want), "events")
	for _, r := range got {
		if !want[string(r.Value)] {
			t.Fatalf("unexpected or duplicate record %q", r.Value)
		}
		delete(want, string(r.Value))
	}
	if len(want) != 0 {
		t.Fatalf("%d records missing", len(want))
	}
}

// rawProduce sends one partition's records and returns its response.
func rawProduce(t *testing.T, addr string, topic string, acks int16, records []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version = 9
	req.Acks = acks
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(t, addr, req).(*kmsg.ProduceResponse)
	return resp.Topics[0].Partitions[0]
}

func TestProduceRejectsBadInput(t *testing.T) {
	b := startBroker(t, map[string]string{"message.max.bytes": "10000"})
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "strict", 1, nil)
	good := buildBatch(3, "ok")
	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-1] ^= 0xff
	truncated := good[:len(good)-5]
	twoBatches := append(bytes.Clone(good), badCRC...) // the second batch is corrupt: nothing may be written

	for name, tc := range map[string]struct {
		acks    int16
		records []byte
		want    *kerr.Error
	}{
		"bad crc":        {1, badCRC, kerr.CorruptMessage},
		"truncated":      {1, truncated, kerr.CorruptMessage},
		"half corrupt":   {1, twoBatches, kerr.CorruptMessage},
		"too large":      {1, buildBatch(1, string(bytes.Repeat([]byte("z"), 20000))), kerr.MessageTooLarge},
		"bad acks":       {2, good, kerr.InvalidRequiredAcks},
		"empty":          {1, nil, kerr.CorruptMessage},
		"garbage header": {1, bytes.Repeat([]byte{0xff}, 100), kerr.CorruptMessage},
	} {
		resp := rawProduce(t, b.Addr(), "strict", tc.acks, tc.records)
		if resp.ErrorCode != tc.want.Code {
			t.Errorf("%s: error code %d, want %s", name, resp.ErrorCode, tc.want.Message)
		}
	}
	// Nothing of the failed requests was written.
	ends, err := adm.ListEndOffsets(testContext(t), "strict")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("strict", 0); o.Offset != 0 {
		t.Fatalf("log end offset %d after only failed produces", o.Offset)
	}
	resp := rawProduce(t, b.Addr(), "strict", -1, bytes.Clone(good))
	if resp.ErrorCode != 0 || resp.BaseOffset != 0 {
		t.Fatalf("good batch: %+v", resp)
	}
	resp = rawProduce(t, b.Addr(), "strict", -1, bytes.Clone(good))
	if resp.BaseOffset != 3 {
		t.Fatalf("second batch at %d, want 3", resp.BaseOffset)
	}
}

func TestLogAppendTime(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "stamped", 1, map[string]*string{"message.timestamp.type": ptr("LogAppendTime")})
	cl := newClient(t, b.Addr())
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	before := time.Now().Add(-time.Second)
	if err := cl.ProduceSync(testContext(t), &kgo.Record{Topic: "stamped", Value: []byte("v"), Timestamp: old}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := consumeN(t, b.Addr(), 1, "stamped")
	if got[0].Timestamp.Before(before) || got[0].Attrs.TimestampType() != 1 {
		t.Fatalf("timestamp %v type %d, want log append time", got[0].Timestamp, got[0].Attrs.TimestampType())
	}
}

func TestFsyncEveryAppend(t *testing.T) {
	b := startBroker(t, map[string]string{"log.flush.interval.messages": "1"})
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "durable", 2, nil)
	ctx := testContext(t)
	for _, acks := range []kgo.Acks{kgo.NoAck(), kgo.LeaderAck(), kgo.AllISRAcks()} {
		opts := []kgo.Opt{kgo.RequiredAcks(acks)}
		if acks != kgo.AllISRAcks() {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl := newClient(t, b.Addr(), opts...)
		for i := 0; i < 100; i++ {
			cl.Produce(ctx, &kgo.Record{Topic: "durable", Value: []byte("v")}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	consumeN(t, b.Addr(), 300, "durable")
}
