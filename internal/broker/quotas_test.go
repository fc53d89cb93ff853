package broker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
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
