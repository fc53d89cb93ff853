package e2e

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCreateTopicsAnswersOnceTheNodeKnowsTheTopic: a node that forwards
// CreateTopics to the active controller answers once its own metadata
// has the topic, so a Metadata request sent to it right after the answer
// finds the topic with every partition led. Kafka answers when the
// controller has committed; a client that produces at once through the
// broker it asked can then get UNKNOWN_TOPIC_OR_PARTITION (kafka-go's
// writer gives up on it).
func TestCreateTopicsAnswersOnceTheNodeKnowsTheTopic(t *testing.T) {
	c := startCluster(t, 3, "offsets.topic.replication.factor=1")
	active := c.controller(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, via := range []int32{active%3 + 1, (active+1)%3 + 1} {
		// Requests to the seed itself: franz-go would send CreateTopics to
		// the controller.
		cl := client(t, c.nodes[via].addr)
		seed := cl.Broker(math.MinInt32)
		for i := range 10 {
			topic := fmt.Sprintf("known-%d-%d", via, i)
			req := kmsg.NewPtrCreateTopicsRequest()
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 100, 1
			req.Topics = append(req.Topics, rt)
			req.TimeoutMillis = 30_000
			resp, err := req.RequestWith(ctx, seed)
			if err != nil || resp.Topics[0].ErrorCode != 0 {
				t.Fatalf("creating %s through node %d: %v %+v", topic, via, err, resp)
			}
			mreq := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(topic)
			mreq.Topics = append(mreq.Topics, mt)
			mresp, err := mreq.RequestWith(ctx, seed)
			if err != nil {
				t.Fatal(err)
			}
			if len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != 0 || len(mresp.Topics[0].Partitions) != 100 {
				t.Fatalf("node %d's Metadata right after it created %s: error %d, %d partitions", via, topic,
					mresp.Topics[0].ErrorCode, len(mresp.Topics[0].Partitions))
			}
			for _, p := range mresp.Topics[0].Partitions {
				if p.ErrorCode != 0 || p.Leader < 0 {
					t.Fatalf("node %d's Metadata right after it created %s: partition %d has error %d, leader %d", via, topic, p.Partition, p.ErrorCode, p.Leader)
				}
			}
		}
	}
}
