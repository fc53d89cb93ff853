package strata_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata"
)

// A user's test against a real three-node cluster: it produces with
// acks=all, kills the partition's leader, and reads every record back from
// the two survivors. In a Go test, Dir is t.TempDir().
func ExampleStartCluster() {
	dir, err := os.MkdirTemp("", "strata-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := strata.StartCluster(strata.ClusterOptions{Nodes: 3, Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	minISR := "2"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 3, map[string]*string{"min.insync.replicas": &minISR}, "orders"); err != nil {
		log.Fatal(err)
	}
	for i := range 100 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "order-%d", i)}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}

	leader, err := c.Leader(ctx, "orders", 0)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Kill(leader); err != nil {
		log.Fatal(err)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	seen := map[string]bool{}
	for len(seen) < 100 && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	fmt.Printf("read back %d of 100 records after killing the leader\n", len(seen))
	// Output: read back 100 of 100 records after killing the leader
}
