package broker

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/testutil/poll"
)

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, body)
	}
	return string(body)
}

// TestAdminListener scrapes /metrics after real traffic and checks the
// Kafka-equivalent metrics move, and that health endpoints answer.
func TestAdminListener(t *testing.T) {
	b := startBroker(t, map[string]string{"strata.admin.listener": "127.0.0.1:0", "group.initial.rebalance.delay.ms": "0"})
	base := "http://" + b.AdminAddr()
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "metered", 2, nil)
	ctx := testContext(t)
	cl := newClient(t, b.Addr())
	for i := 0; i < 100; i++ {
		cl.Produce(ctx, &kgo.Record{Topic: "metered", Value: []byte(fmt.Sprint(i))}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	consumer := newClient(t, b.Addr(), kgo.ConsumerGroup("meter-group"), kgo.ConsumeTopics("metered"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchMaxWait(100*time.Millisecond))
	n := 0
	for n < 60 {
		fs := consumer.PollRecords(ctx, 60-n)
		n += len(fs.Records())
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}

	body := scrape(t, base+"/metrics")
	for _, want := range []string{
		`strata_topic_messages_in_total{topic="metered"} 100`,
		`strata_topic_bytes_out_total{topic="metered"}`,
		`strata_requests_total{api="Produce"}`,
		`strata_request_duration_seconds_bucket{api="Fetch"`,
		`strata_under_replicated_partitions 0`,
		`strata_offline_partitions 0`,
		`strata_active_controller_count 1`,
		`strata_log_size_bytes{partition="0",topic="metered"}`,
		`strata_consumer_group_lag{group="meter-group"`,
		`strata_consumer_group_lag_seconds{group="meter-group"`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The group consumed 60 of 100 (or a little more, whole batches).
	var lag float64
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, `strata_consumer_group_lag{group="meter-group"`) {
			var v float64
			fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
			lag += v
		}
	}
	if lag < 0 || lag > 40 {
		t.Errorf("group lag %v, want at most 40", lag)
	}
	if got := scrape(t, base+"/healthz"); !strings.Contains(got, "ok") {
		t.Errorf("/healthz: %q", got)
	}
	if got := scrape(t, base+"/readyz"); !strings.Contains(got, "ok") {
		t.Errorf("/readyz: %q", got)
	}
	if got := scrape(t, base+"/debug/pprof/"); !strings.Contains(got, "goroutine") {
		t.Errorf("/debug/pprof/: %q", got[:min(len(got), 200)])
	}
}

// TestReplicationMetrics scrapes a leader whose second replica is out of
// the ISR: the under-replicated and under-min-ISR gauges are the replica's
// own view (the image, which names the leader alone, knows nothing of
// it); once a real follower fetches over a socket and its expansion is in
// flight, produces with acks=all still fail NOT_ENOUGH_REPLICAS at the
// client, the ISR being what the controller committed.
func TestReplicationMetrics(t *testing.T) {
	b := startBroker(t, map[string]string{"strata.admin.listener": "127.0.0.1:0", "replica.fetch.wait.max.ms": "100"})
	base := "http://" + b.AdminAddr()
	adm := newAdmin(t, b.Addr())
	two := "2"
	createTopic(t, adm, "watched", 1, map[string]*string{"min.insync.replicas": &two})
	body := scrape(t, base+"/metrics")
	for _, want := range []string{"strata_under_replicated_partitions 0", "strata_under_min_isr_partitions 1",
		"strata_offline_partitions 0", "strata_replica_fetcher_max_lag 0", "strata_isr_shrinks_total 0", "strata_isr_expands_total 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("one replica, min.insync.replicas=2: /metrics lacks %s", want)
		}
	}

	leader, _ := b.partition("watched", 0)
	_, p, _ := b.image.Load().Partition("watched", 0)
	state := replica.State{Leader: b.NodeID(), LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch + 1,
		Replicas: []int32{b.NodeID(), 2}, ISR: []int32{b.NodeID()}}
	if err := leader.BecomeLeader(state); err != nil {
		t.Fatal(err)
	}
	f := startFollower(t, b, "watched", state)
	producer := newClient(t, b.Addr(), kgo.DefaultProduceTopic("watched"), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	ctx := testContext(t)
	for i := range 20 {
		if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 30*time.Second, "the follower to fetch everything", func() bool { return f.log.LogEndOffset() == 20 })
	body = scrape(t, base+"/metrics")
	for _, want := range []string{"strata_under_replicated_partitions 1", "strata_under_min_isr_partitions 1", "strata_leader_partitions"} {
		if !strings.Contains(body, want) {
			t.Errorf("second replica out of the ISR: /metrics lacks %s", want)
		}
	}
	if r := f.p.Replication(); r.FetcherLag != 0 {
		t.Errorf("the follower's lag %d with every record fetched", r.FetcherLag)
	}
	acksAll := newClient(t, b.Addr(), kgo.DefaultProduceTopic("watched"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DisableIdempotentWrite(), kgo.RecordRetries(0))
	if err := acksAll.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all with the ISR below min.insync.replicas: %v", err)
	}
}
