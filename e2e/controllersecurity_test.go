package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/testutil/tlstest"
)

// TestSecuredClusterOfThree: three strata serve processes whose
// controller listener and inter-broker listener are SASL_SSL (PLAIN), with
// the StandardAuthorizer on and only the nodes' principal (and the test's
// anonymous admin on the PLAINTEXT listener) as super users, form a
// quorum, register, and replicate acks=all; after the active controller's
// SIGKILL the other two elect a new one over their authenticated Raft
// connections, and the killed node rejoins.
func TestSecuredClusterOfThree(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "e2e-ca")
	caFile := ca.Write(t, dir, "ca")
	server := ca.Server(t, "broker").Write(t, dir, "server")
	jaas := `org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret";`
	hook := func(int32, string) ([]string, []string) {
		return []string{"INTERNAL://127.0.0.1:" + freePort(t)}, nil
	}
	c := startClusterWith(t, []string{"broker,controller", "broker,controller", "broker,controller"}, hook,
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
		"inter.broker.listener.name=INTERNAL",
		"ssl.keystore.type=PEM", "ssl.keystore.location="+server.Keystore,
		"ssl.truststore.type=PEM", "ssl.truststore.location="+caFile,
		"sasl.enabled.mechanisms=PLAIN",
		"sasl.mechanism.inter.broker.protocol=PLAIN",
		"sasl.mechanism.controller.protocol=PLAIN",
		"listener.name.internal.plain.sasl.jaas.config="+jaas,
		"listener.name.controller.plain.sasl.jaas.config="+jaas,
		"authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users=User:broker;User:ANONYMOUS",
		"broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500",
		"offsets.topic.replication.factor=3")
	c.waitBrokers(1, 2, 3)

	cl := client(t, c.nodes[1].addr, kgo.DefaultProduceTopic("secured"), kgo.RequiredAcks(kgo.AllISRAcks()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	two := "2"
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 3, map[string]*string{"min.insync.replicas": &two}, "secured"); err != nil || resp.Err != nil {
		t.Fatalf("creating the topic: %v %v", err, resp.Err)
	}
	produce := func(n int) {
		t.Helper()
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
				t.Fatalf("acks=all produce: %v", err)
			}
		}
	}
	produce(30)

	active := c.controller(1)
	c.nodes[active].kill()
	survivor := active%3 + 1
	poll.UntilStatus(t, 30*time.Second, "a topic created after the controller was killed", func() (bool, string) {
		err := c.createTopic(survivor, "after-failover", 1)
		return err == nil || strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS"), fmt.Sprint(err)
	})
	if next := c.controller(survivor); next == active {
		t.Fatalf("node %d still the controller after its SIGKILL", active)
	}
	// With two of three in sync, acks=all still goes through.
	produce(30)
	c.nodes[active].restart()
	c.waitBrokers(1, 2, 3)
	if got := consumeN(t, c.nodes[active].addr, "secured", 60); got != 60 {
		t.Fatalf("consumed %d of 60 through the restarted node", got)
	}
}
