package broker

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sessionFetch sends a raw Fetch v12 with the given session fields and
// partitions (partition -> fetch offset), and returns the response.
func sessionFetch(t *testing.T, addr string, id, epoch int32, topic string, offsets map[int32]int64, forget []int32) *kmsg.FetchResponse {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.SessionID, req.SessionEpoch = id, epoch
	req.MaxBytes = 1 << 20
	if len(offsets) > 0 {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		for p, off := range offsets {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 1<<20
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	if len(forget) > 0 {
		ft := kmsg.NewFetchRequestForgottenTopic()
		ft.Topic, ft.Partitions = topic, forget
		req.ForgottenTopics = append(req.ForgottenTopics, ft)
	}
	return rawRequest(t, addr, req).(*kmsg.FetchResponse)
}

// returned lists the partitions a response carries, with their high
// watermarks.
func returned(resp *kmsg.FetchResponse) map[int32]int64 {
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = p.HighWatermark
		}
	}
	return out
}

func TestIncrementalFetchSession(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, newAdmin(t, b.Addr()), "sess", 3, nil)
	cl := newClient(t, b.Addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := testContext(t)
	produce := func(p int32) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "sess", Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(1)

	// A full fetch that creates the session answers every partition.
	resp := sessionFetch(t, b.Addr(), 0, 0, "sess", map[int32]int64{0: 0, 1: 0, 2: 0}, nil)
	if resp.ErrorCode != 0 || resp.SessionID == 0 {
		t.Fatalf("creating a session: error %d, id %d", resp.ErrorCode, resp.SessionID)
	}
	id := resp.SessionID
	if got := returned(resp); len(got) != 3 || got[1] != 1 {
		t.Fatalf("first response: %v", got)
	}
	// The client moves partition 1 past its record; nothing else changed,
	// so the incremental answer carries no partition.
	resp = sessionFetch(t, b.Addr(), id, 1, "sess", map[int32]int64{1: 1}, nil)
	if resp.ErrorCode != 0 || resp.SessionID != id || len(returned(resp)) != 0 {
		t.Fatalf("nothing new: error %d, id %d, partitions %v", resp.ErrorCode, resp.SessionID, returned(resp))
	}
	// News on partition 2 only: only partition 2 comes back, with its record.
	produce(2)
	resp = sessionFetch(t, b.Addr(), id, 2, "sess", nil, nil)
	if got := returned(resp); len(got) != 1 || got[2] != 1 || len(resp.Topics[0].Partitions[0].RecordBatches) == 0 {
		t.Fatalf("after a produce to partition 2: %v", got)
	}
	// A forgotten partition is no longer fetched.
	produce(0)
	resp = sessionFetch(t, b.Addr(), id, 3, "sess", map[int32]int64{2: 1}, []int32{0})
	if got := returned(resp); len(got) != 0 {
		t.Fatalf("after forgetting partition 0: %v", got)
	}
	// Epochs must follow on.
	for _, epoch := range []int32{3, 5} {
		if resp := sessionFetch(t, b.Addr(), id, epoch, "sess", nil, nil); resp.ErrorCode != kerr.InvalidFetchSessionEpoch.Code {
			t.Fatalf("epoch %d: error %d, want INVALID_FETCH_SESSION_EPOCH", epoch, resp.ErrorCode)
		}
	}
	if resp := sessionFetch(t, b.Addr(), id+1, 1, "sess", nil, nil); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("unknown session: error %d", resp.ErrorCode)
	}
	// Epoch -1 closes the session.
	if resp := sessionFetch(t, b.Addr(), id, -1, "sess", map[int32]int64{0: 0}, nil); resp.ErrorCode != 0 || resp.SessionID != 0 {
		t.Fatalf("closing fetch: error %d, id %d", resp.ErrorCode, resp.SessionID)
	}
	if resp := sessionFetch(t, b.Addr(), id, 4, "sess", nil, nil); resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("closed session: error %d", resp.ErrorCode)
	}
	if n := b.fetchSessions.len(); n != 0 {
		t.Fatalf("%d sessions cached after closing", n)
	}
}

func TestFetchSessionsDeclinedWhenCacheIsFull(t *testing.T) {
	b := startBroker(t, map[string]string{"max.incremental.fetch.session.cache.slots": "1"})
	createTopic(t, newAdmin(t, b.Addr()), "full", 1, nil)
	first := sessionFetch(t, b.Addr(), 0, 0, "full", map[int32]int64{0: 0}, nil)
	second := sessionFetch(t, b.Addr(), 0, 0, "full", map[int32]int64{0: 0}, nil)
	if first.SessionID == 0 || second.SessionID != 0 || second.ErrorCode != 0 || len(returned(second)) != 1 {
		t.Fatalf("first session %d; second: id %d, error %d, partitions %v", first.SessionID, second.SessionID, second.ErrorCode, returned(second))
	}
}

// TestConsumeManyPartitionsWithSessions has a franz-go consumer (which uses
// incremental sessions) read 200 partitions where records arrive on a few
// at a time: every record exactly once.
func TestConsumeManyPartitionsWithSessions(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, newAdmin(t, b.Addr()), "wide", 200, nil)
	ctx := testContext(t)
	producer := newClient(t, b.Addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	consumer := newClient(t, b.Addr(), kgo.ConsumeTopics("wide"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	for round := 0; round < 20; round++ {
		want := len(seen) + 10
		for i := 0; i < 10; i++ {
			v := fmt.Sprintf("%d-%d", round, i)
			if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "wide", Partition: int32((round*37 + i*11) % 200), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		for len(seen) < want {
			fs := consumer.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("round %d: %d of %d records", round, len(seen), want)
			}
			for _, r := range fs.Records() {
				if seen[string(r.Value)] {
					t.Fatalf("record %s read twice", r.Value)
				}
				seen[string(r.Value)] = true
			}
		}
	}
	if b.fetchSessions.len() == 0 {
		t.Fatal("the consumer fetched without a session")
	}
}
