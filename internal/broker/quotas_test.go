package broker

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/wire"
)

// TestClientQuotas sets quotas with AlterClientQuotas, reads them back
// with DescribeClientQuotas, and checks that a client over its produce or
// fetch byte rate gets throttle_time_ms while another client id does not.
func TestClientQuotas(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	ctx := testContext(t)
	createTopic(t, adm, "q", 1, nil)
	slow := "slow"
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &slow}}, Ops: []kadm.AlterClientQuotaOp{
			{Key: "producer_byte_rate", Value: 10_000}, {Key: "consumer_byte_rate", Value: 10_000},
		}},
		{Entity: kadm.ClientQuotaEntity{{Type: "user"}}, Ops: []kadm.AlterClientQuotaOp{{Key: "request_percentage", Value: 50}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("%v: %v", r.Entity, r.Err)
		}
	}
	described, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchName: &slow}})
	if err != nil {
		t.Fatal(err)
	}
	if len(described) != 1 || len(described[0].Values) != 2 {
		t.Fatalf("described %+v", described)
	}
	all, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchType: 2}})
	if err != nil || len(all) != 1 || all[0].Values[0].Key != "request_percentage" {
		t.Fatalf("user entities: %+v %v", all, err)
	}

	produce := func(cl *kgo.Client) int32 {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = 1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "q"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = buildBatch(100, string(make([]byte, 1000))) // ~100 kB
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if c := resp.Topics[0].Partitions[0].ErrorCode; c != 0 {
			t.Fatalf("produce error %d", c)
		}
		return resp.ThrottleMillis
	}
	fast := newClient(t, b.Addr(), kgo.ClientID("fast"))
	slowCl := newClient(t, b.Addr(), kgo.ClientID("slow"))
	if ms := produce(fast); ms != 0 {
		t.Fatalf("a client without a quota was throttled %d ms", ms)
	}
	// 100 kB against 10 kB/s over the 10-second minimum span: over quota.
	if ms := produce(slowCl); ms <= 0 {
		t.Fatalf("a client over its produce quota got throttle_time_ms %d", ms)
	}

	fetch := func(cl *kgo.Client) int32 {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MaxBytes = 100, 10<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = "q", b.image.Load().Topics["q"].ID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = 10<<20, -1
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ThrottleMillis
	}
	if ms := fetch(fast); ms != 0 {
		t.Fatalf("a consumer without a quota was throttled %d ms", ms)
	}
	slowConsumer := newClient(t, b.Addr(), kgo.ClientID("slow"))
	if ms := fetch(slowConsumer); ms <= 0 {
		t.Fatalf("a consumer over its fetch quota got throttle_time_ms %d", ms)
	}

	// Removing the quota stops the throttling (a new client id's rate).
	res, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &slow}}, Ops: []kadm.AlterClientQuotaOp{
			{Key: "producer_byte_rate", Remove: true}, {Key: "consumer_byte_rate", Remove: true},
		}},
	})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	poll.Until(t, 30*time.Second, "the quota to be gone", func() bool { return len(b.image.Load().ClientQuotas) == 1 })
	if ms := produce(newClient(t, b.Addr(), kgo.ClientID("slow"))); ms != 0 {
		t.Fatalf("throttled %d ms after the quota was removed", ms)
	}
}

// throttleHook counts the throttles franz-go reports (HookBrokerThrottle).
type throttleHook struct{ n atomic.Int64 }

func (h *throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	if d > 0 {
		h.n.Add(1)
	}
}

// TestRequestPercentageQuota: a client id with a tiny request_percentage
// quota is answered throttle_time_ms once its requests' handler time
// passes it (and franz-go sees the throttle), while a client id without a
// quota, sending as many of the same requests, never is.
func TestRequestPercentageQuota(t *testing.T) {
	b := startBroker(t, map[string]string{"strata.admin.listener": "127.0.0.1:0"})
	adm := newAdmin(t, b.Addr())
	ctx := testContext(t)
	createTopic(t, adm, "rq", 3, nil)
	busy := "busy"
	// 0.001% of one thread over the 10-second minimum span: 100 µs of
	// handler time.
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &busy}}, Ops: []kadm.AlterClientQuotaOp{{Key: "request_percentage", Value: 0.001}}},
	})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	poll.Until(t, 30*time.Second, "the quota in the image", func() bool { return len(b.image.Load().ClientQuotas) == 1 })

	metadata := func(cl *kgo.Client) int32 {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr("rq")
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ThrottleMillis
	}
	hook := &throttleHook{}
	busyCl := newClient(t, b.Addr(), kgo.ClientID(busy), kgo.WithHooks(hook))
	sent := 0
	for throttled := false; !throttled; sent++ {
		if sent == 10_000 {
			t.Fatalf("%d requests over a quota of 0.001%% of a thread, none throttled", sent)
		}
		throttled = metadata(busyCl) > 0
	}
	t.Logf("throttled after %d requests", sent)
	if hook.n.Load() == 0 {
		t.Fatal("franz-go saw no throttle")
	}
	if body := scrape(t, "http://"+b.AdminAddr()+"/metrics"); !strings.Contains(body, `strata_quota_throttles_total{quota="request_percentage"}`) {
		t.Fatalf("no request_percentage throttles in /metrics:\n%s", body)
	}
	free := newClient(t, b.Addr(), kgo.ClientID("free"))
	for i := 0; i < sent; i++ {
		if ms := metadata(free); ms != 0 {
			t.Fatalf("a client without a request quota was throttled %d ms (request %d)", ms, i)
		}
	}
}

// TestRequestQuotaExempt: what request_percentage does not count, as in
// Kafka: acks=0 produce, and brokers' requests from a principal allowed
// CLUSTER_ACTION (with authorization off, every principal is).
func TestRequestQuotaExempt(t *testing.T) {
	b := startBroker(t, nil)
	s := &session{principal: auth.Anonymous, host: "127.0.0.1"}
	follower := kmsg.NewPtrFetchRequest()
	follower.ReplicaID = 2
	consumer := kmsg.NewPtrFetchRequest()
	consumer.ReplicaID, consumer.ReplicaState.ID = -1, -1
	acks0, acks1 := kmsg.NewPtrProduceRequest(), kmsg.NewPtrProduceRequest()
	acks0.Acks, acks1.Acks = 0, 1
	batched := kmsg.NewPtrAddPartitionsToTxnRequest()
	batched.Version = 4
	for _, c := range []struct {
		req    kmsg.Request
		exempt bool
	}{
		{follower, true}, {consumer, false}, {acks0, true}, {acks1, false},
		{kmsg.NewPtrWriteTxnMarkersRequest(), true}, {batched, true},
		{kmsg.NewPtrAddPartitionsToTxnRequest(), false}, {kmsg.NewPtrApiVersionsRequest(), false},
	} {
		req := &wire.Request{Key: c.req.Key(), Version: c.req.GetVersion(), Body: c.req}
		if got := b.requestQuotaExempt(s, apis[req.Key], req); got != c.exempt {
			t.Errorf("%s v%d: exempt %v, want %v", kmsg.NameForKey(c.req.Key()), c.req.GetVersion(), got, c.exempt)
		}
	}
}

// TestConnectionCreationRateQuota: with connection_creation_rate=1 on the
// ip entity 127.0.0.1, franz-go clients connecting from that address are
// refused (the connection held, then closed unanswered) once they pass
// the quota over the windows, while clients from 127.0.0.2, as many,
// always connect.
func TestConnectionCreationRateQuota(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	ctx := testContext(t)
	ip := "127.0.0.1"
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: kadm.ClientQuotaEntity{{Type: "ip", Name: &ip}}, Ops: []kadm.AlterClientQuotaOp{{Key: "connection_creation_rate", Value: 1}}},
	})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	described, err := adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{{Type: "ip", MatchName: &ip}})
	if err != nil || len(described) != 1 || described[0].Values[0].Key != "connection_creation_rate" {
		t.Fatalf("described %+v %v", described, err)
	}
	poll.Until(t, 30*time.Second, "the quota in the image", func() bool { return len(b.image.Load().ClientQuotas) == 1 })

	// connect pings with a new client from local, and reports whether the
	// broker answered.
	connect := func(local string) bool {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.Dialer(d.DialContext), kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return cl.Ping(pctx) == nil
	}
	accepted := 0
	for connect("127.0.0.1") {
		if accepted++; accepted == 100 {
			t.Fatal("100 connections a moment apart within a quota of 1 a second")
		}
	}
	t.Logf("%d connections accepted before one was refused", accepted)
	if b.server.Stats().ConnectionsThrottled == 0 {
		t.Fatal("a refused connection was not counted as throttled")
	}
	for i := 0; i <= accepted; i++ {
		if !connect("127.0.0.2") {
			t.Fatalf("connection %d from an address without a quota was refused", i+1)
		}
	}
}

// BenchmarkProduceRequestQuota is BenchmarkProduce, uncompressed, without
// quotas and with a request_percentage quota that applies to every
// request (the default user's, too large to throttle): the cost of
// timing each request and counting it against its entity's rate, side by
// side.
//
//	go test ./internal/broker -run XXX -bench 'ProduceRequestQuota$' -count 5
func BenchmarkProduceRequestQuota(b *testing.B) {
	b.Run("none", func(b *testing.B) { benchProduceWith(b, record.CodecNone, nil, nil) })
	b.Run("request_percentage", func(b *testing.B) {
		benchProduceWith(b, record.CodecNone, nil, func(tb *testBroker) {
			adm := newAdmin(b, tb.Addr())
			res, err := adm.AlterClientQuotas(testContext(b), []kadm.AlterClientQuotaEntry{
				{Entity: kadm.ClientQuotaEntity{{Type: "user"}}, Ops: []kadm.AlterClientQuotaOp{{Key: "request_percentage", Value: 1e9}}},
			})
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
			poll.Until(b, 30*time.Second, "the quota in the image", func() bool { return len(tb.image.Load().ClientQuotas) == 1 })
		})
	})
}
