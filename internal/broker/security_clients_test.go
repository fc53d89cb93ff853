package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	kgosasl "github.com/segmentio/kafka-go/sasl"
	kgoplain "github.com/segmentio/kafka-go/sasl/plain"
	kgoscram "github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	xdgscram "github.com/xdg-go/scram"

	"github.com/strata-io/strata/internal/testutil/jwttest"
	"github.com/strata-io/strata/internal/testutil/tlstest"
)

// secOutcome is how a security cell must end.
type secOutcome int

const (
	served            secOutcome = iota // the client produces and reads back its records
	refusedSASL                         // wrong password: SASL_AUTHENTICATION_FAILED
	refusedServerCert                   // the client does not trust the broker's certificate
	refusedClientCert                   // the broker does not trust (or did not get) the client's certificate
)

func (r secOutcome) String() string {
	return [...]string{"served", "refused: SASL authentication failed", "refused: broker certificate untrusted", "refused: client certificate untrusted"}[r]
}

// secCell is one cell of issue 15's client matrix: a listener, a SASL
// mechanism (or none), the client's credentials and trust, and the outcome
// Kafka gives.
type secCell struct {
	listener       string // SSL, MTLS (SSL with ssl.client.auth=required), SASL_PLAINTEXT, SASL_SSL
	mechanism      string // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or "" (no SASL)
	user, password string
	token          string         // OAUTHBEARER's JWT
	trust          string         // the CA file the client trusts
	cert           *tlstest.Files // the client's certificate, nil for none
	want           secOutcome
}

func (c secCell) name() string {
	n := c.listener
	if c.mechanism != "" {
		n += "/" + c.mechanism
	}
	switch {
	case c.want == refusedSASL && c.mechanism == "OAUTHBEARER":
		n += "/expired-token"
	case c.want == refusedSASL:
		n += "/wrong-password"
	case c.want == refusedServerCert:
		n += "/untrusted-broker"
	case c.want == refusedClientCert && c.cert == nil:
		n += "/no-client-cert"
	case c.want == refusedClientCert:
		n += "/untrusted-client-cert"
	}
	return n
}

func (c secCell) protocol() string {
	if c.listener == "MTLS" {
		return "SSL"
	}
	return c.listener
}

func (c secCell) tls() bool { return c.protocol() == "SSL" || c.protocol() == "SASL_SSL" }

// tlsConfig is the cell's client TLS configuration, read from its files as
// a user's client would.
func (c secCell) tlsConfig(t *testing.T) *tls.Config {
	t.Helper()
	ca, err := os.ReadFile(c.trust)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	if c.cert != nil {
		pair, err := tls.LoadX509KeyPair(c.cert.Cert, c.cert.Key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// securityMatrixBroker starts one broker with a listener per security
// setting: PLAINTEXT (for setting up), SSL, MTLS (an SSL listener that
// requires a client certificate), SASL_PLAINTEXT and SASL_SSL, the SASL
// ones offering PLAIN (alice), SCRAM-SHA-256 (bob), SCRAM-SHA-512 (carol)
// and OAUTHBEARER (JWTs signed by a JWKS file's keys). It returns the
// cells every client must pass.
func securityMatrixBroker(t *testing.T) (*testBroker, []secCell) {
	f := newTLSFixture(t)
	otherCA := tlstest.NewCA(t, "a-ca-the-broker-does-not-use").Write(t, f.dir, "other-ca")
	settings := f.brokerSettings("none")
	settings["listeners"] = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
	settings["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
	settings["listener.name.mtls.ssl.client.auth"] = "required"
	issuer := jwttest.New(t, f.dir)
	settings["sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
	settings["sasl.oauthbearer.jwks.endpoint.url"] = "file://" + issuer.JWKS
	settings["sasl.oauthbearer.expected.audience"] = "strata"
	settings["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = plainJAAS
	settings["listener.name.sasl_ssl.plain.sasl.jaas.config"] = plainJAAS
	settings["group.initial.rebalance.delay.ms"] = "0"
	settings["offsets.topic.replication.factor"] = "1"
	b := startBroker(t, settings)
	res, err := newAdmin(t, b.Addr()).AlterUserSCRAMs(testContext(t), nil, []kadm.UpsertSCRAM{
		{User: "bob", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "bob-secret"},
		{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "carol-secret"},
	})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("creating SCRAM users: %v", err)
	}

	client, untrusted := f.clientFiles, f.untrustedFiles
	cells := []secCell{
		{listener: "SSL", trust: f.caFile},
		{listener: "SSL", trust: otherCA, want: refusedServerCert},
		{listener: "MTLS", trust: f.caFile, cert: &client},
		{listener: "MTLS", trust: f.caFile, cert: &untrusted, want: refusedClientCert},
		{listener: "MTLS", trust: f.caFile, want: refusedClientCert},
	}
	users := []struct{ mechanism, user, password string }{
		{"PLAIN", "alice", "alice-secret"},
		{"SCRAM-SHA-256", "bob", "bob-secret"},
		{"SCRAM-SHA-512", "carol", "carol-secret"},
	}
	for _, listener := range []string{"SASL_PLAINTEXT", "SASL_SSL"} {
		for _, u := range users {
			ok := secCell{listener: listener, mechanism: u.mechanism, user: u.user, password: u.password, trust: f.caFile}
			bad := ok
			bad.password, bad.want = u.password+"-wrong", refusedSASL
			cells = append(cells, ok, bad)
		}
		token := func(exp time.Time) string {
			return issuer.Token(t, "RS256", map[string]any{"sub": "service-c", "aud": "strata", "exp": exp.Unix()})
		}
		cells = append(cells,
			secCell{listener: listener, mechanism: "OAUTHBEARER", token: token(time.Now().Add(time.Hour)), trust: f.caFile},
			secCell{listener: listener, mechanism: "OAUTHBEARER", token: token(time.Now().Add(-time.Hour)), trust: f.caFile, want: refusedSASL})
	}
	return b, cells
}

// TestSecurityClientMatrix is issue 15's client coverage: franz-go,
// sarama, kafka-go, kcat (librdkafka), confluent-kafka (librdkafka) and
// kafka-python each connect over SSL, mutual TLS, SASL_PLAINTEXT and SASL_SSL with
// PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, produce and read back; and each
// is refused, for the right reason, with a wrong password, a broker
// certificate it does not trust, and an untrusted or missing client
// certificate. The clients that can send a signed JWT (franz-go, sarama,
// confluent-kafka, kafka-python) also authenticate with OAUTHBEARER and
// are refused an expired token. One broker serves every cell; the clients
// run side by side.
func TestSecurityClientMatrix(t *testing.T) {
	b, cells := securityMatrixBroker(t)
	adm := newAdmin(t, b.Addr())
	clients := []struct {
		name  string
		drive func(t *testing.T, addr string, c secCell, topic string) error
		// refusedFor reports whether err is the secOutcome wanted.
		refusedFor func(err error, want secOutcome) bool
	}{
		{"franz-go", driveFranz, goRefusal},
		{"sarama", driveSarama, goRefusal},
		{"kafka-go", driveKafkaGo, goRefusal},
		{"kcat", driveKcat, textRefusal},
		{"confluent", drivePython("confluent"), textRefusal},
		{"kafka-python", drivePython("kafka-python"), textRefusal},
	}
	// The clients run side by side, each through every cell in turn: t.Run
	// from goroutines, not t.Parallel, whose limit (GOMAXPROCS) would run
	// two at a time on a small machine while the others wait on sockets.
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Go(func() {
			t.Run(cl.name, func(t *testing.T) {
				for i, c := range cells {
					t.Run(c.name(), func(t *testing.T) {
						topic := fmt.Sprintf("matrix-%s-%d", strings.ReplaceAll(cl.name, "-", ""), i)
						createTopic(t, adm, topic, 1, nil)
						err := cl.drive(t, listenerAddr(t, b.Broker, c.listener), c, topic)
						switch {
						case c.want == served && err != nil:
							t.Fatalf("want served: %v", err)
						case c.want != served && err == nil:
							t.Fatalf("want %v: the client was served", c.want)
						case c.want != served && !cl.refusedFor(err, c.want):
							t.Fatalf("want %v, refused otherwise: %v", c.want, err)
						case err != nil:
							t.Logf("%v: %v", c.want, firstLine(err.Error()))
						}
					})
				}
			})
		})
	}
	wg.Wait()
}

func firstLine(s string) string {
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// matrixRecords is how many records a Go client or kcat writes and reads
// back in a served cell.
const matrixRecords = 5

// goRefusal recognizes the errors franz-go, sarama and kafka-go return: Kafka's
// SASL_AUTHENTICATION_FAILED, x509's unknown authority, and the TLS alert
// the broker sends for a client certificate it refuses.
func goRefusal(err error, want secOutcome) bool {
	switch want {
	case refusedSASL:
		return errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, sarama.ErrSASLAuthenticationFailed) ||
			errors.Is(err, kafkago.SASLAuthenticationFailed)
	case refusedServerCert:
		var ua x509.UnknownAuthorityError
		return errors.As(err, &ua)
	case refusedClientCert:
		return strings.Contains(err.Error(), "remote error: tls: ")
	}
	return false
}

// textRefusal recognizes the refusals in what librdkafka and kafka-python
// print.
func textRefusal(err error, want secOutcome) bool {
	s := strings.ToLower(err.Error())
	var marks []string
	switch want {
	case refusedSASL:
		// librdkafka: "SASL authentication error: Authentication failed
		// during authentication due to invalid credentials".
		marks = []string{"authentication failed"}
		// kafka-python 2.0 sends bare SASL tokens after a v0 handshake;
		// Kafka (SaslServerAuthenticator) answers a failed bare-token
		// authentication by closing the connection, which is all it can
		// report: the connection was lost while authenticating.
		if strings.Contains(s, "<authenticating>") && strings.Contains(s, "error receiving reply from server") {
			return true
		}
	case refusedServerCert:
		marks = []string{"certificate verify failed", "certificate_verify_failed"}
	case refusedClientCert:
		// The broker's TLS alert (unknown ca, certificate required, bad
		// certificate); kafka-python sees the connection closed in the
		// TLS 1.3 handshake's last flight, before it can read the alert.
		marks = []string{"alert unknown ca", "alert certificate required", "alert bad certificate", "eof occurred in violation of protocol"}
	}
	for _, m := range marks {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

func franzMechanism(c secCell) sasl.Mechanism {
	switch c.mechanism {
	case "PLAIN":
		return plain.Auth{User: c.user, Pass: c.password}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: c.user, Pass: c.password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: c.user, Pass: c.password}.AsSha512Mechanism()
	case "OAUTHBEARER":
		return oauth.Auth{Token: c.token}.AsMechanism()
	}
	return nil
}

func driveFranz(t *testing.T, addr string, c secCell, topic string) error {
	var opts []kgo.Opt
	if c.tls() {
		opts = append(opts, kgo.DialTLSConfig(c.tlsConfig(t)))
	}
	if m := franzMechanism(c); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod := newClient(t, addr, append(opts, kgo.RequestRetries(0), kgo.RecordRetries(1))...)
	if c.want != served {
		// The first request shows the refusal; producing would wait out
		// franz-go's metadata backoff before giving up.
		return prod.Ping(ctx)
	}
	for i := range matrixRecords {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "franz-%d", i)}).FirstErr(); err != nil {
			return err
		}
	}
	cons := newClient(t, addr, append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	for n := 0; n < matrixRecords; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read back %d of %d: %w", n, matrixRecords, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return errs[0].Err
		}
		n += len(fs.Records())
	}
	return nil
}

// xdgSCRAM is sarama's SCRAMClient over github.com/xdg-go/scram, as
// sarama's own example (examples/sasl_scram_client) wires it.
type xdgSCRAM struct {
	hash xdgscram.HashGeneratorFcn
	conv *xdgscram.ClientConversation
}

func (x *xdgSCRAM) Begin(user, password, authzID string) error {
	cl, err := x.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	x.conv = cl.NewConversation()
	return nil
}

func (x *xdgSCRAM) Step(challenge string) (string, error) { return x.conv.Step(challenge) }
func (x *xdgSCRAM) Done() bool                            { return x.conv.Done() }

// staticToken is sarama's AccessTokenProvider for one token.
type staticToken string

func (s staticToken) Token() (*sarama.AccessToken, error) {
	return &sarama.AccessToken{Token: string(s)}, nil
}

func saramaConfig(t *testing.T, c secCell) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 0
	cfg.Metadata.Retry.Max = 0
	cfg.Net.DialTimeout = 10 * time.Second
	if c.tls() {
		cfg.Net.TLS.Enable, cfg.Net.TLS.Config = true, c.tlsConfig(t)
	}
	if c.mechanism != "" {
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Version = sarama.SASLHandshakeV1
		cfg.Net.SASL.User, cfg.Net.SASL.Password = c.user, c.password
		switch c.mechanism {
		case "PLAIN":
			cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		case "SCRAM-SHA-256":
			cfg.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
			cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgSCRAM{hash: xdgscram.SHA256} }
		case "SCRAM-SHA-512":
			cfg.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
			cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgSCRAM{hash: xdgscram.SHA512} }
		case "OAUTHBEARER":
			cfg.Net.SASL.Mechanism = sarama.SASLTypeOAuth
			cfg.Net.SASL.TokenProvider = staticToken(c.token)
		}
	}
	return cfg
}

func driveSarama(t *testing.T, addr string, c secCell, topic string) error {
	cfg := saramaConfig(t, c)
	p, err := sarama.NewSyncProducer([]string{addr}, cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	for i := range matrixRecords {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("sarama-%d", i))}); err != nil {
			return err
		}
	}
	cons, err := sarama.NewConsumer([]string{addr}, cfg)
	if err != nil {
		return err
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		return err
	}
	defer pc.Close()
	timeout := time.After(30 * time.Second)
	for n := 0; n < matrixRecords; n++ {
		select {
		case <-pc.Messages():
		case err := <-pc.Errors():
			return err
		case <-timeout:
			return fmt.Errorf("read back %d of %d", n, matrixRecords)
		}
	}
	return nil
}

func kafkaGoMechanism(t *testing.T, c secCell) kgosasl.Mechanism {
	var (
		m   kgosasl.Mechanism
		err error
	)
	switch c.mechanism {
	case "":
		return nil
	case "PLAIN":
		m = kgoplain.Mechanism{Username: c.user, Password: c.password}
	case "SCRAM-SHA-256":
		m, err = kgoscram.Mechanism(kgoscram.SHA256, c.user, c.password)
	case "SCRAM-SHA-512":
		m, err = kgoscram.Mechanism(kgoscram.SHA512, c.user, c.password)
	case "OAUTHBEARER":
		t.Skip("kafka-go has no OAUTHBEARER")
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func driveKafkaGo(t *testing.T, addr string, c secCell, topic string) error {
	var tlsCfg *tls.Config
	if c.tls() {
		tlsCfg = c.tlsConfig(t)
	}
	mech := kafkaGoMechanism(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dialer := &kafkago.Dialer{Timeout: 10 * time.Second, TLS: tlsCfg, SASLMechanism: mech}
	if c.want != served {
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.ReadPartitions()
		return err
	}
	w := &kafkago.Writer{Addr: kafkago.TCP(addr), Topic: topic, RequiredAcks: kafkago.RequireAll, BatchTimeout: 10 * time.Millisecond,
		MaxAttempts: 3, Transport: &kafkago.Transport{TLS: tlsCfg, SASL: mech}}
	defer w.Close()
	var msgs []kafkago.Message
	for i := range matrixRecords {
		msgs = append(msgs, kafkago.Message{Value: fmt.Appendf(nil, "kafkago-%d", i)})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		return err
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: 0, Dialer: dialer, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for n := 0; n < matrixRecords; n++ {
		if _, err := r.ReadMessage(ctx); err != nil {
			return fmt.Errorf("read back %d of %d: %w", n, matrixRecords, err)
		}
	}
	return nil
}

func kcatArgs(addr string, c secCell) []string {
	args := []string{"-b", addr, "-X", "security.protocol=" + strings.ToLower(c.protocol())}
	if c.tls() {
		args = append(args, "-X", "ssl.ca.location="+c.trust)
		if c.cert != nil {
			args = append(args, "-X", "ssl.certificate.location="+c.cert.Cert, "-X", "ssl.key.location="+c.cert.Key)
		}
	}
	if c.mechanism != "" {
		args = append(args, "-X", "sasl.mechanisms="+c.mechanism, "-X", "sasl.username="+c.user, "-X", "sasl.password="+c.password)
	}
	return args
}

func driveKcat(t *testing.T, addr string, c secCell, topic string) error {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat not installed")
	}
	if c.mechanism == "OAUTHBEARER" {
		t.Skip("kcat sends only librdkafka's unsecured (unsigned) JWTs; confluent-kafka covers librdkafka's OAUTHBEARER")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := kcatArgs(addr, c)
	if c.want != served {
		// Reading metadata is the first thing any client does; kcat
		// gives up after -m seconds and prints librdkafka's errors, the
		// first within a few milliseconds of the refusal.
		out, err := exec.CommandContext(ctx, "kcat", append(args, "-m", "3", "-L")...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	var lines strings.Builder
	for i := range matrixRecords {
		fmt.Fprintf(&lines, "kcat-%d\n", i)
	}
	prod := exec.CommandContext(ctx, "kcat", append(args, "-P", "-t", topic)...)
	prod.Stdin = strings.NewReader(lines.String())
	if out, err := prod.CombinedOutput(); err != nil {
		return fmt.Errorf("kcat produce: %w: %s", err, out)
	}
	out, err := exec.CommandContext(ctx, "kcat", append(args, "-C", "-t", topic, "-o", "beginning", "-e", "-q")...).Output()
	if err != nil || string(out) != lines.String() {
		return fmt.Errorf("kcat consume: %v: %q", err, out)
	}
	return nil
}

// drivePython runs testdata/security_clients.py with lib.
func drivePython(lib string) func(t *testing.T, addr string, c secCell, topic string) error {
	return func(t *testing.T, addr string, c secCell, topic string) error {
		// expect=fail lets the script stop at librdkafka's first error
		// instead of waiting out message.timeout.ms.
		s := map[string]any{"bootstrap": addr, "topic": topic, "protocol": c.protocol(), "expect": "ok"}
		if c.want != served {
			s["expect"] = "fail"
		}
		if c.tls() {
			s["ca"] = c.trust
			if c.cert != nil {
				s["cert"], s["key"] = c.cert.Cert, c.cert.Key
			}
		}
		if c.mechanism != "" {
			s["mechanism"], s["username"], s["password"] = c.mechanism, c.user, c.password
		}
		if c.token != "" {
			s["token"] = c.token
		}
		if outcome := pythonClient(t, lib, s); !strings.HasPrefix(outcome, "ok ") {
			return errors.New(outcome)
		}
		return nil
	}
}
