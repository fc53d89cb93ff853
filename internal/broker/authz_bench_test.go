package broker

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/wire"
)

// BenchmarkProduceAuthorized is BenchmarkProduce's uncompressed run with
// the authorizer off, on with no ACLs (allow.everyone.if.no.acl.found), and
// on holding 10,000 ACLs (9,000 literal and 1,000 prefixed, for 100 users)
// and the one that lets this client (ANONYMOUS) write: the difference in
// cpu-ns/record is what authorization costs a produce request of 100
// records. The runs are a few percent apart from one run to the next on a
// shared machine; run each alone, alternating, and compare medians:
//
//	go test -c -o /tmp/broker.test ./internal/broker
//	for i in 1 2 3 4 5 6 7 8; do for v in off on-no-acls on-10k-acls; do
//	  /tmp/broker.test -test.run XXX -test.bench "ProduceAuthorized/$v\$" -test.benchtime 2000000x
//	done; done
//
// BenchmarkAuthorize10kRequest measures the authorization alone.
func BenchmarkProduceAuthorized(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchProduceAuthorized(b, false, false) })
	b.Run("on-no-acls", func(b *testing.B) { benchProduceAuthorized(b, true, false) })
	b.Run("on-10k-acls", func(b *testing.B) { benchProduceAuthorized(b, true, true) })
}

// BenchmarkAuthorize10kRequest is the authorization of one produce request
// (one topic) of BenchmarkProduceAuthorized/on-10k-acls, by the broker's
// authorizer of 10,001 ACLs, with a handler that does nothing: ns/op is
// the time authorization adds to each request.
//
//	go test ./internal/broker -run XXX -bench 'Authorize10kRequest|ProduceAuthorized/on-10k'
func BenchmarkAuthorize10kRequest(b *testing.B) {
	tb := startBroker(b, authorizerSettings())
	adm := newAdmin(b, tb.Addr())
	createTopic(b, adm, "bench", 4, nil)
	grant10kACLs(b, tb, adm)
	s := &session{principal: auth.Anonymous, host: "127.0.0.1"}
	r := kmsg.NewPtrProduceRequest()
	r.Version, r.Acks, r.TimeoutMillis = 9, 1, 30_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "bench"
	rp := kmsg.NewProduceRequestTopicPartition()
	rt.Partitions = append(rt.Partitions, rp)
	r.Topics = append(r.Topics, rt)
	req := &wire.Request{Key: kmsg.Produce.Int16(), Version: r.Version, Body: r}
	handled := 0
	next := func(*Broker, context.Context, *wire.Conn, *wire.Request) wire.Response {
		handled++
		return wire.Response{}
	}
	produce := *apis[kmsg.Produce.Int16()]
	produce.handle = next
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		tb.authorize(ctx, nil, s, &produce, req)
	}
	if handled != b.N || len(r.Topics) != 1 {
		b.Fatalf("%d of %d requests reached the handler, with %d topics", handled, b.N, len(r.Topics))
	}
}

func authorizerSettings() map[string]string {
	// No ACL names the cluster, so ANONYMOUS may create the topic and the
	// ACLs; the topic's own ACL decides the produce.
	return map[string]string{
		"authorizer.class.name":          "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"allow.everyone.if.no.acl.found": "true",
	}
}

// grant10kACLs creates 9,000 literal ACLs and 1,000 prefixed ones for 100
// users, and the one that lets ANONYMOUS write to topic bench.
func grant10kACLs(b *testing.B, tb *testBroker, adm *kadm.Client) {
	for chunk := 0; chunk < 10; chunk++ {
		acls := kadm.NewACLs()
		var topics, prefixes []string
		for i := chunk * 1000; i < (chunk+1)*1000; i++ {
			if i%10 == 0 {
				prefixes = append(prefixes, fmt.Sprintf("app-%d-", i))
			} else {
				topics = append(topics, fmt.Sprintf("topic-%d", i))
			}
		}
		acls = acls.Allow(fmt.Sprintf("User:u%d", chunk)).Topics(topics...).Operations(kadm.OpRead)
		grantBench(b, adm, acls)
		grantBench(b, adm, kadm.NewACLs().Allow(fmt.Sprintf("User:u%d", chunk)).Topics(prefixes...).ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpWrite))
	}
	grantBench(b, adm, kadm.NewACLs().Allow("User:ANONYMOUS").Topics("bench").Operations(kadm.OpWrite))
	if n := len(tb.image.Load().Acls); n != 10_001 {
		b.Fatalf("%d ACLs", n)
	}
}

func benchProduceAuthorized(b *testing.B, on, acls bool) {
	settings := map[string]string{}
	if on {
		settings = authorizerSettings()
	}
	benchProduceWith(b, record.CodecNone, settings, func(tb *testBroker) {
		if acls {
			grant10kACLs(b, tb, newAdmin(b, tb.Addr()))
		}
	})
}

func grantBench(b *testing.B, adm *kadm.Client, acls *kadm.ACLBuilder) {
	res, err := adm.CreateACLs(testContext(b), acls)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}
