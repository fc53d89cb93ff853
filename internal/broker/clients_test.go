package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
)

// TestSarama produces and consumes with IBM/sarama, an independent client
// implementation.
func TestSarama(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, newAdmin(t, b.Addr()), "sarama", 3, nil)

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Compression = sarama.CompressionSnappy
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	producer, err := sarama.NewSyncProducer([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for i := 0; i < 30; i++ {
		part, off, err := producer.SendMessage(&sarama.ProducerMessage{Topic: "sarama", Partition: int32(i % 3), Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder(fmt.Sprintf("value-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		if part != int32(i%3) || off != int64(i/3) {
			t.Fatalf("message %d at %d/%d", i, part, off)
		}
	}

	consumer, err := sarama.NewConsumer([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	seen := map[string]bool{}
	for p := int32(0); p < 3; p++ {
		pc, err := consumer.ConsumePartition("sarama", p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			select {
			case m := <-pc.Messages():
				seen[string(m.Value)] = true
			case err := <-pc.Errors():
				t.Fatal(err)
			case <-time.After(30 * time.Second):
				t.Fatalf("partition %d: %d of 10 messages", p, i)
			}
		}
		pc.Close()
	}
	if len(seen) != 30 {
		t.Fatalf("saw %d distinct messages", len(seen))
	}

	admin, err := sarama.NewClusterAdmin([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTopic("sarama-admin", &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	if topics["sarama-admin"].NumPartitions != 2 {
		t.Fatalf("sarama admin sees %+v", topics["sarama-admin"])
	}
}

// TestKafkaGo produces and consumes with segmentio/kafka-go, another
// independent implementation.
func TestKafkaGo(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, newAdmin(t, b.Addr()), "kafkago", 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A transport of its own: the default one caches metadata by address,
	// and an earlier test's broker may have had this port.
	w := &kafkago.Writer{Addr: kafkago.TCP(b.Addr()), Topic: "kafkago", Balancer: &kafkago.RoundRobin{}, RequiredAcks: kafkago.RequireAll, Compression: kafkago.Lz4, BatchTimeout: 10 * time.Millisecond,
		Transport: &kafkago.Transport{}}
	var msgs []kafkago.Message
	for i := 0; i < 40; i++ {
		msgs = append(msgs, kafkago.Message{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("kg-%d", i))})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	seen := map[string]bool{}
	for p := 0; p < 2; p++ {
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{b.Addr()}, Topic: "kafkago", Partition: p, MaxWait: 100 * time.Millisecond})
		for i := 0; i < 20; i++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("partition %d message %d: %v", p, i, err)
			}
			seen[string(m.Value)] = true
		}
		r.Close()
	}
	if len(seen) != 40 {
		t.Fatalf("saw %d distinct messages", len(seen))
	}
}

// TestKafkaGoReadsNoPartitionsOfADeletedTopic is kafka-go's TestConn
// "delete topics" scenario: right after DeleteTopics, ReadPartitions of the
// deleted topics (a Metadata request that allows auto-creation) returns no
// partitions, because Kafka's first answer for a topic it auto-creates has
// none; the topics are back, with partitions, at the next ask. The
// connection itself is dialled to a topic that does not exist yet, which
// kafka-go's DialLeader creates the same way.
func TestKafkaGoReadsNoPartitionsOfADeletedTopic(t *testing.T) {
	b := startBroker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := (&kafkago.Dialer{}).DialLeader(ctx, "tcp", b.Addr(), "kafkago-conn", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	topics := []string{"kafkago-deleted-1", "kafkago-deleted-2"}
	if err := conn.CreateTopics(kafkago.TopicConfig{Topic: topics[0], NumPartitions: 1, ReplicationFactor: 1},
		kafkago.TopicConfig{Topic: topics[1], NumPartitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	if err := conn.DeleteTopics(topics...); err != nil {
		t.Fatal(err)
	}
	partitions, err := conn.ReadPartitions(topics...)
	if err != nil {
		t.Fatal(err)
	}
	if len(partitions) != 0 {
		t.Fatalf("partitions of deleted topics: %+v", partitions)
	}
	partitions, err = conn.ReadPartitions(topics...)
	if err != nil {
		t.Fatal(err)
	}
	if len(partitions) != 2 {
		t.Fatalf("partitions of the auto-created topics: %+v", partitions)
	}
}
