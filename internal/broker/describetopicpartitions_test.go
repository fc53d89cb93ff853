package broker

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDescribeTopicPartitions pages through the partitions of two topics
// with DescribeTopicPartitions (the API kafka-topics.sh --describe uses):
// topics in name order, at most the limit per answer, a cursor to go on
// from, and an unknown topic named.
func TestDescribeTopicPartitions(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	ctx := testContext(t)
	createTopic(t, adm, "b-topic", 3, nil)
	createTopic(t, adm, "a-topic", 2, nil)
	cl := newClient(t, b.Addr())

	var got []string
	var cursor *kmsg.DescribeTopicPartitionsRequestCursor
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("no end after %d pages: %v", pages, got)
		}
		req := kmsg.NewPtrDescribeTopicPartitionsRequest()
		for _, name := range []string{"b-topic", "a-topic"} {
			rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
			rt.Topic = name
			req.Topics = append(req.Topics, rt)
		}
		req.ResponsePartitionLimit, req.Cursor = 2, cursor
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				if p.ErrorCode != 0 || p.LeaderID != 1 || !slices.Equal(p.ISR, []int32{1}) || p.EligibleLeaderReplicas == nil || len(p.EligibleLeaderReplicas) != 0 {
					t.Fatalf("%s/%d: %+v", *rt.Topic, p.Partition, p)
				}
				got = append(got, *rt.Topic+"/"+string(rune('0'+p.Partition)))
				n++
			}
		}
		if n > 2 {
			t.Fatalf("%d partitions in an answer limited to 2", n)
		}
		if resp.NextCursor == nil {
			break
		}
		cursor = &kmsg.DescribeTopicPartitionsRequestCursor{Topic: resp.NextCursor.Topic, Partition: resp.NextCursor.Partition}
	}
	if want := []string{"a-topic/0", "a-topic/1", "b-topic/0", "b-topic/1", "b-topic/2"}; !slices.Equal(got, want) {
		t.Fatalf("paged through %v, want %v", got, want)
	}

	req := kmsg.NewPtrDescribeTopicPartitionsRequest()
	rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
	rt.Topic = "missing"
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("an unknown topic: %+v", resp.Topics)
	}
}
