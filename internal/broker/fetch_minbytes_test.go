package broker

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFetchMinBytesDoesNotWaitWhenMoreIsThere reads topics batch by batch,
// with franz-go and kafka-go's reader, with MinBytes equal to MaxBytes
// (200) and a long MaxWait, where each batch is smaller than MinBytes and two do not
// fit MaxBytes: a compacted and a plain topic of many small segments, and
// a plain topic of one segment. As Kafka's DelayedFetch, a fetch whose
// partition has more at once (beyond PartitionMaxBytes in its segment, or
// in a later segment) is answered at once, so the reader gets every record
// well before one MaxWait; a broker that waits out MaxWait for each batch
// below MinBytes takes 30 s (kafka-go: 2 s) per batch.
func TestFetchMinBytesDoesNotWaitWhenMoreIsThere(t *testing.T) {
	const (
		records = 40
		maxWait = 30 * time.Second
	)
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	small := "1024"
	compact := "compact"
	for i, c := range []struct {
		name    string
		configs map[string]*string
	}{
		{"compacted, small segments", map[string]*string{"cleanup.policy": &compact, "segment.bytes": &small}},
		{"plain, small segments", map[string]*string{"segment.bytes": &small}},
		{"plain, one segment", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := fmt.Sprintf("minbytes-%d", i)
			createTopic(t, adm, topic, 1, c.configs)
			producer := newClient(t, b.Addr(), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
			ctx := testContext(t)
			value := bytes.Repeat([]byte("v"), 100) // batches of about 180 bytes
			for i := range records {
				r := &kgo.Record{Key: fmt.Appendf(nil, "key-%03d", i), Value: value}
				if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			// A last batch larger than MaxBytes, so that the fetch of
			// the one before it has more at once too.
			tail := &kgo.Record{Key: []byte("tail"), Value: bytes.Repeat([]byte("t"), 300)}
			if err := producer.ProduceSync(ctx, tail).FirstErr(); err != nil {
				t.Fatal(err)
			}

			consumer := newClient(t, b.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.FetchMinBytes(200), kgo.FetchMaxBytes(200), kgo.FetchMaxPartitionBytes(200), kgo.FetchMaxWait(maxWait))
			start := time.Now()
			deadline, cancel := context.WithTimeout(ctx, 25*time.Second)
			defer cancel()
			var got int
			for got < records+1 {
				fs := consumer.PollFetches(deadline)
				if deadline.Err() != nil {
					t.Fatalf("%d of %d records in %v: fetches below MinBytes waited for MaxWait", got, records+1, time.Since(start))
				}
				if err := fs.Err(); err != nil {
					t.Fatal(err)
				}
				got += fs.NumRecords()
			}
			t.Logf("franz-go: %d records in %v", got, time.Since(start))

			// kafka-go's reader, whose stall on a compacted topic this
			// is. Its Close waits out a fetch at the log's end, so its
			// MaxWait is shorter, but 41 of them pass the deadline.
			r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{b.Addr()}, Topic: topic,
				MinBytes: 200, MaxBytes: 200, MaxWait: 2 * time.Second})
			defer r.Close()
			start = time.Now()
			for got = 0; got < records+1; got++ {
				if _, err := r.FetchMessage(deadline); err != nil {
					t.Fatalf("kafka-go: %d of %d records in %v: %v", got, records+1, time.Since(start), err)
				}
			}
			t.Logf("kafka-go: %d records in %v", got, time.Since(start))
		})
	}
}
