package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// scrape reads one sample of a node's metrics at its admin address; 0
// when the series is absent (a counter never incremented), -1 when the
// metrics cannot be read.
func scrape(addr, series string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return 0
}

// TestFetchFromFollower runs KIP-392 on three real processes in three
// racks with the rack-aware replica selector: a franz-go consumer in the
// rack of a follower (kgo.Rack) reads every acknowledged record, and the
// bytes it read were sent by that follower, none by the leader or the
// third replica (strata_topic_bytes_out_total counts consumer fetches
// only).
func TestFetchFromFollower(t *testing.T) {
	admin := map[int32]string{}
	for id := int32(1); id <= 3; id++ {
		admin[id] = "127.0.0.1:" + freePort(t)
	}
	c := startClusterWith(t, []string{"broker,controller", "broker,controller", "broker,controller"},
		func(id int32, _ string) ([]string, []string) {
			return nil, []string{fmt.Sprintf("broker.rack=rack-%d", id), "strata.admin.listener=" + admin[id]}
		},
		append(replicatedSets, "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector")...)
	c.waitBrokers(1, 2, 3)
	const topic = "racked"
	c.createAssigned(1, topic, []int32{1, 2, 3})
	c.waitInSync(2, topic, 1)

	ctx := ctxTimeout(t, 90*time.Second)
	const n = 3000
	acks := newAckTracker(n)
	if err := produceSequenced(ctx, franzIdempotentProducer(t, c.nodes[1].addr), topic, 1, n, acks); err != nil {
		t.Fatal(err)
	}
	acks.waitSettled(t, ctx)
	acks.check(t)
	// The follower serves up to the high watermark it knows: once it knows
	// the leader's, it has every acknowledged record to give.
	c.waitInSync(2, topic, 1)

	cl := client(t, c.nodes[1].addr, kgo.Rack("rack-2"), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", len(got), n, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetching %s/%d: %v", topic, p, err) })
		got = append(got, fs.Records()...)
	}
	cl.Close()
	checkExactlyOnce(t, map[int32][]*kgo.Record{0: got}, map[int32]int{0: n})

	series := fmt.Sprintf(`strata_topic_bytes_out_total{topic=%q}`, topic)
	var sent [4]float64
	poll.UntilStatus(t, 30*time.Second, "the brokers' metrics", func() (bool, string) {
		for id := int32(1); id <= 3; id++ {
			sent[id] = scrape(admin[id], series)
		}
		return sent[1] >= 0 && sent[2] >= 0 && sent[3] >= 0, fmt.Sprint(sent)
	})
	if sent[2] <= 0 || sent[1] != 0 || sent[3] != 0 {
		t.Fatalf("consumer bytes sent by node 1 (leader, rack-1) %v, node 2 (rack-2) %v, node 3 (rack-3) %v: want all from node 2", sent[1], sent[2], sent[3])
	}
}
