package broker

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestInterBrokerSASLSSL replicates between two brokers whose
// inter.broker.listener.name is a SASL_SSL listener: the follower's
// fetcher dials TLS, checks the leader's certificate and authenticates
// with PLAIN. A third broker with a wrong inter-broker password does not
// get the records.
func TestInterBrokerSASLSSL(t *testing.T) {
	f := newTLSFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctrl := ln.Addr().String()
	ln.Close()
	settings := func(id int, roles, password string) map[string]string {
		s := f.brokerSettings("none")
		s["node.id"] = strconv.Itoa(id)
		s["process.roles"] = roles
		s["controller.quorum.voters"] = "1@" + ctrl
		s["listeners"] = "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0"
		if roles != "broker" {
			s["listeners"] += ",CONTROLLER://" + ctrl
		}
		s["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT"
		s["inter.broker.listener.name"] = "INTERNAL"
		s["sasl.enabled.mechanisms"] = "PLAIN"
		s["sasl.mechanism.inter.broker.protocol"] = "PLAIN"
		s["listener.name.internal.plain.sasl.jaas.config"] = `org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="` + password + `" user_broker="broker-secret";`
		s["broker.heartbeat.interval.ms"] = "250"
		s["replica.fetch.backoff.ms"] = "100"
		return s
	}
	b1 := startBroker(t, settings(1, "broker,controller", "broker-secret"))
	b2 := startBroker(t, settings(2, "broker", "broker-secret"))
	b3 := startBroker(t, settings(3, "broker", "wrong-secret"))

	adm := newAdmin(t, b1.Addr())
	poll.Until(t, 30*time.Second, "three brokers registered", func() bool { return len(b1.image.Load().Brokers) == 3 })
	resp, err := adm.CreateTopic(testContext(t), 1, 3, nil, "replicated")
	if err != nil || resp.Err != nil {
		t.Fatalf("creating the topic: %v %v", err, resp.Err)
	}
	leader := b1.image.Load().Topics["replicated"].Partitions[0].Leader
	var lb *testBroker
	for _, b := range []*testBroker{b1, b2, b3} {
		if b.nodeID == leader {
			lb = b
		}
	}
	cl := newClient(t, lb.Addr(), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(testContext(t), &kgo.Record{Topic: "replicated", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	end := func(b *testBroker) int64 {
		b.partitionsMu.RLock()
		defer b.partitionsMu.RUnlock()
		p := b.partitions[tp{"replicated", 0}]
		if p == nil {
			return -1
		}
		return p.FetchPosition().FetchOffset
	}
	for _, b := range []*testBroker{b1, b2, b3} {
		if b == lb || b == b3 {
			continue
		}
		poll.Until(t, 30*time.Second, "the follower to replicate over SASL_SSL", func() bool { return end(b) == 10 })
	}
	if lb != b3 && end(b3) != 0 && end(b3) != -1 {
		t.Fatalf("the broker with a wrong inter-broker password replicated to offset %d", end(b3))
	}
}
