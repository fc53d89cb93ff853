package broker

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/quorum"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/wire"
)

// startNodes starts one node per settings together (a voter's start
// returns once its broker registered, which needs a quorum).
func startNodes(t *testing.T, settings []map[string]string) []*testBroker {
	t.Helper()
	nodes := make([]*testBroker, len(settings))
	errs := make([]error, len(settings))
	var wg sync.WaitGroup
	for i, s := range settings {
		tb := &testBroker{dir: t.TempDir(), settings: s}
		nodes[i] = tb
		wg.Add(1)
		go func() {
			defer wg.Done()
			overrides := map[string]string{"log.dirs": tb.dir, "strata.admin.listener": ""}
			for k, v := range s {
				overrides[k] = v
			}
			cfg, err := config.NewServer(overrides)
			if err != nil {
				errs[i] = err
				return
			}
			b, err := New(Options{Config: cfg, Logger: testLogger(t)})
			if err == nil {
				if err = b.Start(); err != nil {
					b.Close()
				}
			}
			tb.Broker, errs[i] = b, err
		}()
	}
	wg.Wait()
	for i, tb := range nodes {
		if errs[i] != nil {
			t.Errorf("node %d: %v", i+1, errs[i])
			continue
		}
		t.Cleanup(func() { tb.Close() })
	}
	if t.Failed() {
		t.FailNow()
	}
	return nodes
}

// TestControllerListenerSecurity: three voters whose controller and
// inter-broker listeners are SASL_SSL (or SASL_PLAINTEXT, or SSL with
// client certificates required), and a broker
// that is not a voter (its observer and controller client dial the
// controller listener by controller.listener.names), form a quorum, elect
// a controller, register their brokers and replicate; on the controller
// listener a principal without CLUSTER_ACTION is answered
// CLUSTER_AUTHORIZATION_FAILED for AlterPartition and BrokerHeartbeat
// (until an ACL grants it), its Raft connection is dropped once
// authenticated, and wrong credentials are refused.
func TestControllerListenerSecurity(t *testing.T) {
	for _, protocol := range []string{config.ProtocolSASLSSL, config.ProtocolSASLPlaintext, config.ProtocolSSL} {
		t.Run(protocol, func(t *testing.T) { testControllerListener(t, protocol) })
	}
}

func testControllerListener(t *testing.T, protocol string) {
	f := newTLSFixture(t)
	var ctrl []string
	var voters []string
	for id := 1; id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctrl = append(ctrl, ln.Addr().String())
		ln.Close()
		voters = append(voters, strconv.Itoa(id)+"@"+ctrl[id-1])
	}
	jaas := `org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";`
	var settings []map[string]string
	clientAuth := "none"
	if protocol == config.ProtocolSSL {
		clientAuth = "required"
	}
	for id := 1; id <= 4; id++ {
		s := f.brokerSettings(clientAuth)
		for k, v := range map[string]string{
			"node.id":                                         strconv.Itoa(id),
			"process.roles":                                   "broker,controller",
			"controller.quorum.voters":                        strings.Join(voters, ","),
			"listeners":                                       "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
			"listener.security.protocol.map":                  "PLAINTEXT:PLAINTEXT,INTERNAL:" + protocol + ",CONTROLLER:" + protocol,
			"inter.broker.listener.name":                      "INTERNAL",
			"sasl.enabled.mechanisms":                         "PLAIN",
			"sasl.mechanism.inter.broker.protocol":            "PLAIN",
			"sasl.mechanism.controller.protocol":              "PLAIN",
			"listener.name.internal.plain.sasl.jaas.config":   jaas,
			"listener.name.controller.plain.sasl.jaas.config": jaas,
			"authorizer.class.name":                           "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
			// The nodes' principal (SASL, and their certificate's
			// subject), and the test's admin on the plaintext listener.
			"super.users":                           "User:broker;User:CN=broker;User:ANONYMOUS",
			"broker.heartbeat.interval.ms":          "250",
			"controller.quorum.election.timeout.ms": "500",
			"replica.fetch.backoff.ms":              "100",
			"offsets.topic.replication.factor":      "3",
		} {
			s[k] = v
		}
		if id <= 3 {
			s["listeners"] += ",CONTROLLER://" + ctrl[id-1]
		} else {
			s["process.roles"] = "broker"
		}
		settings = append(settings, s)
	}
	nodes := startNodes(t, settings)
	b1 := nodes[0]
	poll.Until(t, 30*time.Second, "four unfenced brokers", func() bool {
		img := b1.image.Load()
		n := 0
		for _, br := range img.Brokers {
			if !br.Fenced {
				n++
			}
		}
		return n == 4
	})
	leader := int32(-1)
	for _, n := range nodes {
		if l, active := n.controller.Leader(); active {
			leader = l
		}
	}
	if leader < 0 {
		t.Fatal("no active controller")
	}

	// Replication over the secured inter-broker listener.
	adm := newAdmin(t, b1.Addr())
	ctx := testContext(t)
	if resp, err := adm.CreateTopic(ctx, 1, 3, nil, "secured"); err != nil || resp.Err != nil {
		t.Fatalf("creating the topic: %v %v", err, resp.Err)
	}
	poll.Until(t, 30*time.Second, "the topic on every node", func() bool {
		for _, n := range nodes {
			if n.image.Load().Topics["secured"] == nil {
				return false
			}
		}
		return true
	})
	topic := b1.image.Load().Topics["secured"]
	partitionLeader := topic.Partitions[0].Leader
	cl := newClient(t, nodes[partitionLeader-1].Addr(), kgo.RequiredAcks(kgo.AllISRAcks()))
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "secured", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range topic.Partitions[0].Replicas {
		n := nodes[id-1]
		poll.Until(t, 30*time.Second, "every replica at offset 10", func() bool {
			n.partitionsMu.RLock()
			defer n.partitionsMu.RUnlock()
			p := n.partitions[tp{"secured", 0}]
			return p != nil && p.FetchPosition().FetchOffset == 10
		})
	}

	// Who a connection to the controller listener acts as: a SASL user,
	// or on SSL a client certificate.
	type identity struct {
		user, pass string
		cert       tls.Certificate
	}
	nodeCert, err := tls.LoadX509KeyPair(f.server.Keystore, f.server.Keystore)
	if err != nil {
		t.Fatal(err)
	}
	alice, us, wrong := identity{user: "alice", pass: "alice-secret"}, identity{user: "broker", pass: "broker-secret"}, identity{user: "alice", pass: "wrong"}
	alicePrincipal := "User:alice"
	if protocol == config.ProtocolSSL {
		alice, us, wrong = identity{cert: f.client.TLS}, identity{cert: nodeCert}, identity{cert: f.untrusted.TLS}
		leaf, err := x509.ParseCertificate(f.client.TLS.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		alicePrincipal = "User:" + auth.SubjectDN(leaf)
	}
	tlsFor := func(id identity) *tls.Config {
		if !config.IsTLS(protocol) {
			return nil
		}
		cfg := &tls.Config{RootCAs: f.ca.Pool(), ServerName: "127.0.0.1"}
		if id.cert.Certificate != nil {
			cfg.Certificates = []tls.Certificate{id.cert}
		}
		return cfg
	}
	// A client of the controller listener; its requests go straight to
	// the seed (routing them would need Metadata, which the controller
	// listener does not serve).
	controllerClient := func(id identity) *kgo.Client {
		opts := []kgo.Opt{kgo.RequestRetries(0)}
		if config.IsSASL(protocol) {
			opts = append(opts, kgo.SASL(plain.Auth{User: id.user, Pass: id.pass}.AsMechanism()))
		}
		if cfg := tlsFor(id); cfg != nil {
			opts = append(opts, kgo.DialTLSConfig(cfg))
		}
		return newClient(t, ctrl[leader-1], opts...)
	}
	alterPartition := func(cl *kgo.Client) (int16, error) {
		req := kmsg.NewPtrAlterPartitionRequest()
		req.BrokerID, req.BrokerEpoch = partitionLeader, 1
		rt := kmsg.NewAlterPartitionRequestTopic()
		rt.TopicID = topic.ID
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.LeaderEpoch, rp.NewISR = topic.Partitions[0].LeaderEpoch, []int32{partitionLeader}
		for _, id := range []int32{partitionLeader} {
			e := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
			e.BrokerID, e.BrokerEpoch = id, 1
			rp.NewEpochISR = append(rp.NewEpochISR, e)
		}
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			return 0, err
		}
		return resp.(*kmsg.AlterPartitionResponse).ErrorCode, nil
	}
	heartbeat := func(cl *kgo.Client) (int16, error) {
		req := kmsg.NewPtrBrokerHeartbeatRequest()
		req.BrokerID, req.BrokerEpoch = 42, 1
		resp, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			return 0, err
		}
		return resp.(*kmsg.BrokerHeartbeatResponse).ErrorCode, nil
	}
	denied := kerr.ClusterAuthorizationFailed.Code
	aliceCl := controllerClient(alice)
	if code, err := alterPartition(aliceCl); err != nil || code != denied {
		t.Fatalf("AlterPartition from alice: code %d err %v, want CLUSTER_AUTHORIZATION_FAILED", code, err)
	}
	if code, err := heartbeat(aliceCl); err != nil || code != denied {
		t.Fatalf("BrokerHeartbeat from alice: code %d err %v, want CLUSTER_AUTHORIZATION_FAILED", code, err)
	}
	// The nodes' own principal gets the controller's answer: an unknown
	// broker's heartbeat is refused for what it says, not for who sent it.
	if code, err := heartbeat(controllerClient(us)); err != nil || code == denied || code == 0 {
		t.Fatalf("BrokerHeartbeat of an unregistered broker from the nodes' principal: code %d err %v", code, err)
	}

	// A Raft connection: alice's authenticates, then is dropped; one with
	// wrong credentials is refused.
	// raftConnect opens a Raft connection to the active controller and
	// authenticates it; the caller closes it.
	raftConnect := func(id identity) (net.Conn, error) {
		conn, err := net.Dial("tcp", ctrl[leader-1])
		if err != nil {
			t.Fatal(err)
		}
		if cfg := tlsFor(id); cfg != nil {
			conn = tls.Client(conn, cfg)
		}
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := conn.Write(quorum.Magic[:]); err != nil {
			return conn, err
		}
		if config.IsSASL(protocol) {
			peer := &Broker{nodeID: 99, controllerSec: &controllerSecurity{mechanism: plain.Auth{User: id.user, Pass: id.pass}.AsMechanism()}}
			if _, err := peer.authenticateToController(ctx, conn, ctrl[leader-1]); err != nil {
				return conn, err
			}
		}
		conn.SetDeadline(time.Time{})
		return conn, nil
	}
	// readOne waits for the controller to write or close; a timeout means
	// it kept the connection open.
	readOne := func(conn net.Conn, wait time.Duration) error {
		conn.SetReadDeadline(time.Now().Add(wait))
		_, err := bufio.NewReader(conn).ReadByte()
		return err
	}
	raftAs := func(id identity) error {
		conn, err := raftConnect(id)
		if err == nil {
			err = readOne(conn, 20*time.Second)
		}
		conn.Close()
		return err
	}
	if err := raftAs(alice); err == nil || errors.Is(err, kerr.SaslAuthenticationFailed) || isTimeout(err) {
		t.Fatalf("alice's raft connection: %v, want it closed after authenticating", err)
	}
	err = raftAs(wrong)
	if config.IsSASL(protocol) && !errors.Is(err, kerr.SaslAuthenticationFailed) || err == nil || isTimeout(err) {
		t.Fatalf("a raft connection with wrong credentials: %v, want it refused", err)
	}

	// Wrong credentials on the Kafka side.
	_, err = heartbeat(controllerClient(wrong))
	if config.IsSASL(protocol) && !errors.Is(err, kerr.SaslAuthenticationFailed) || err == nil {
		t.Fatalf("a client with wrong credentials: %v, want it refused", err)
	}

	// An ACL granting alice CLUSTER_ACTION lets her through.
	acl := kadm.NewACLs().Allow(alicePrincipal).AllowHosts().Clusters().Operations(kadm.OpClusterAction)
	if res, err := adm.CreateACLs(ctx, acl); err != nil || res[0].Err != nil {
		t.Fatalf("creating the ACL: %v %v", err, res)
	}
	poll.Until(t, 30*time.Second, "alice's heartbeat to be authorized", func() bool {
		code, err := heartbeat(controllerClient(alice))
		return err == nil && code != denied
	})

	// Her Raft connection is now served (its hello names another voter),
	// until the ACL is deleted.
	conn, err := raftConnect(alice)
	if err != nil {
		t.Fatalf("alice's raft connection with CLUSTER_ACTION: %v", err)
	}
	defer conn.Close()
	other := leader%3 + 1
	hello := []byte(fmt.Sprintf(`{"nodeId":%d}`, other+1)) // Raft ids are node ids + 1
	if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(hello))), hello...)); err != nil {
		t.Fatal(err)
	}
	if err := readOne(conn, 3*raftRecheckInterval); !isTimeout(err) {
		t.Fatalf("alice's raft connection with CLUSTER_ACTION: %v, want it kept open", err)
	}
	if res, err := adm.DeleteACLs(ctx, kadm.NewACLs().Allow(alicePrincipal).AllowHosts().Clusters().Operations(kadm.OpClusterAction)); err != nil || res[0].Err != nil {
		t.Fatalf("deleting the ACL: %v %v", err, res)
	}
	if err := readOne(conn, 30*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("alice's raft connection after her ACL was deleted: %v, want it closed", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestControllerDeniedAnswers: every API the controller listener serves
// that needs CLUSTER_ACTION has a refusal that carries
// CLUSTER_AUTHORIZATION_FAILED (a new API without one would be refused by
// closing the connection, which this test makes someone notice).
func TestControllerDeniedAnswers(t *testing.T) {
	for key, a := range controllerAPIs {
		switch key {
		case kmsg.ApiVersions.Int16(), kmsg.SASLHandshake.Int16(), kmsg.SASLAuthenticate.Int16():
			continue
		}
		body := kmsg.RequestForKey(key)
		body.SetVersion(a.max)
		fillOne(reflect.ValueOf(body).Elem(), 3)
		if a.errors == nil {
			t.Errorf("%s: no refusal", kmsg.NameForKey(key))
			continue
		}
		resp := errorAnswer(a, body, kerr.ClusterAuthorizationFailed.Code)
		if !hasErrorCode(reflect.ValueOf(resp).Elem(), kerr.ClusterAuthorizationFailed.Code) {
			t.Errorf("%s: the refusal %+v carries no CLUSTER_AUTHORIZATION_FAILED", kmsg.NameForKey(key), resp)
		}
	}
}

// fillOne gives every slice of structs, strings or int32s in v one element,
// depth levels deep, so that per-entry refusals have an entry to refuse.
func fillOne(v reflect.Value, depth int) {
	if depth == 0 || v.Kind() != reflect.Struct {
		return
	}
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch {
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct && f.CanSet():
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			fillOne(f.Index(0), depth-1)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String && f.CanSet():
			f.Set(reflect.ValueOf([]string{"x"}).Convert(f.Type()))
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Int32 && f.CanSet():
			f.Set(reflect.ValueOf([]int32{0}).Convert(f.Type()))
		case f.Kind() == reflect.Struct:
			fillOne(f, depth-1)
		}
	}
}

// TestControllerClientRenewsSession: with connections.max.reauth.ms on a
// SASL controller listener, the controller closes a connection whose
// session expired at its next request; the node's controller client
// redials before that, so its first request after a session's lifetime
// is answered.
func TestControllerClientRenewsSession(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctrl := ln.Addr().String()
	ln.Close()
	const lifetime = time.Second
	b := startBroker(t, map[string]string{
		"node.id":                                         "1",
		"process.roles":                                   "broker,controller",
		"controller.quorum.voters":                        "1@" + ctrl,
		"listeners":                                       "PLAINTEXT://127.0.0.1:0,CONTROLLER://" + ctrl,
		"listener.security.protocol.map":                  "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
		"sasl.enabled.mechanisms":                         "PLAIN",
		"sasl.mechanism.controller.protocol":              "PLAIN",
		"listener.name.controller.plain.sasl.jaas.config": `org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret";`,
		"connections.max.reauth.ms":                       strconv.Itoa(int(lifetime / time.Millisecond)),
	})
	cl := wire.NewClient(ctrl, "session-test")
	cl.Dial = b.dialController
	defer cl.Close()
	ctx := testContext(t)
	versions := func() error {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 3
		_, err := cl.Request(ctx, req)
		return err
	}
	if err := versions(); err != nil {
		t.Fatal(err)
	}
	// The session's lifetime is what this test is about: wait it out.
	<-time.After(lifetime + 200*time.Millisecond)
	if err := versions(); err != nil {
		t.Fatalf("the first request after the session's lifetime: %v", err)
	}
}
