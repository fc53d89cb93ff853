package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// Consumer-group tests with real clients end to end (issue 4's Tests):
// franz-go with every client-side balancer and with the KIP-848 consumer
// protocol, and sarama's ConsumerGroup. Members read sequence-numbered
// records, commit after each poll and record both in a ledger, which then
// checks that no offset was skipped and none was read again after a commit
// covered it. A member is killed by cutting its connections at the dialer:
// from then on not one byte reaches the broker, so it cannot leave.

// groupTestSettings make rebalances fast: no initial delay, and session
// timeouts down to 100ms allowed. KIP-848 members get their heartbeat
// interval and session timeout from the broker.
func groupTestSettings() map[string]string {
	return map[string]string{
		"group.initial.rebalance.delay.ms":     "0",
		"group.min.session.timeout.ms":         "100",
		"group.consumer.heartbeat.interval.ms": "100",
		"group.consumer.session.timeout.ms":    "1500",
	}
}

const (
	testSessionTimeout   = 1500 * time.Millisecond
	testHeartbeat        = 100 * time.Millisecond
	testRebalanceTimeout = 5 * time.Second
)

// flavor is one way a franz-go member takes part in a group.
type flavor struct {
	name        string
	kip848      bool // the KIP-848 consumer protocol, assigned by the broker
	cooperative bool // partitions that do not move are not revoked
	opts        []kgo.Opt
}

var (
	flavorRange       = flavor{name: "range", opts: []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}}
	flavorRoundRobin  = flavor{name: "round-robin", opts: []kgo.Opt{kgo.Balancers(kgo.RoundRobinBalancer())}}
	flavorSticky      = flavor{name: "sticky", opts: []kgo.Opt{kgo.Balancers(kgo.StickyBalancer())}}
	flavorCooperative = flavor{name: "cooperative-sticky", cooperative: true, opts: []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}}
	// franz-go maps a sticky balancer to the broker's uniform assignor and
	// the range balancer to its range assignor.
	flavorKIP848Uniform = flavor{name: "kip848-uniform", kip848: true, cooperative: true, opts: []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.CooperativeStickyBalancer())}}
	flavorKIP848Range   = flavor{name: "kip848-range", kip848: true, cooperative: true, opts: []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer())}}

	allFlavors = []flavor{flavorRange, flavorRoundRobin, flavorSticky, flavorCooperative, flavorKIP848Uniform, flavorKIP848Range}
)

// cutDialer dials real TCP connections and can cut them all at once, after
// which it refuses to dial: a client behind it behaves, to the broker, like
// a process that was killed.
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

var errCut = errors.New("test: connection cut")

func (d *cutDialer) DialContext(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, errCut
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	d.conns = append(d.conns, c)
	return c, nil
}

// Dial is sarama's proxy.Dialer.
func (d *cutDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d *cutDialer) Cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, c := range d.conns {
		c.Close()
	}
}

// ledger records, for one group, every record its members read and every
// commit the broker acknowledged, in one order.
type ledger struct {
	mu      sync.Mutex
	clock   int64
	reads   []readEvent
	commits []commitEvent
}

type readEvent struct {
	member    string
	partition int32
	offset    int64
	value     string
	at        int64
	when      time.Time
}

type commitEvent struct {
	member    string
	partition int32
	offset    int64 // the next offset to read
	at        int64
}

func (l *ledger) read(member string, partition int32, offset int64, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	l.reads = append(l.reads, readEvent{member, partition, offset, value, l.clock, time.Now()})
}

func (l *ledger) committed(member string, offsets map[int32]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	for p, o := range offsets {
		l.commits = append(l.commits, commitEvent{member, p, o, l.clock})
	}
}

// readCount is how many records member has read ("" for all members).
func (l *ledger) readCount(member string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reads {
		if member == "" || r.member == member {
			n++
		}
	}
	return n
}

// covers reports whether every offset below end has been read.
func (l *ledger) covers(end map[int32]int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(map[int32]map[int64]bool)
	for _, r := range l.reads {
		if seen[r.partition] == nil {
			seen[r.partition] = make(map[int64]bool)
		}
		seen[r.partition][r.offset] = true
	}
	for p, e := range end {
		if int64(len(seen[p])) < e {
			return false
		}
		for o := int64(0); o < e; o++ {
			if !seen[p][o] {
				return false
			}
		}
	}
	return true
}

// lastCommit is member's last acknowledged commit per partition.
func (l *ledger) lastCommit(member string) map[int32]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int32]int64)
	for _, c := range l.commits {
		if c.member == member {
			out[c.partition] = c.offset
		}
	}
	return out
}

// firstRead is the first offset member read per partition.
func (l *ledger) firstRead(member string) map[int32]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int32]int64)
	for _, r := range l.reads {
		if _, ok := out[r.partition]; !ok && r.member == member {
			out[r.partition] = r.offset
		}
	}
	return out
}

// uncommittedTail counts the records member read at or past its last
// acknowledged commit of their partition: the records others may read again
// once it is gone.
func (l *ledger) uncommittedTail(member string) int {
	last := l.lastCommit(member)
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reads {
		if r.member == member && r.offset >= last[r.partition] {
			n++
		}
	}
	return n
}

// repeatsWithout counts the records read again where member neither read
// first nor read again: with check passing, every repeat involves the
// member that died or stalled, so this is zero.
func (l *ledger) repeatsWithout(member string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	type po struct {
		p int32
		o int64
	}
	first := make(map[po]string)
	n := 0
	for _, r := range l.reads {
		k := po{r.partition, r.offset}
		f, seen := first[k]
		if !seen {
			first[k] = r.member
			continue
		}
		if f != member && r.member != member {
			n++
		}
	}
	return n
}

// check verifies the group's consumption of a topic whose partitions end
// at end: every offset was read (nothing skipped), a record was never read
// after a commit covering it was acknowledged, and no
// member committed past a record that another member read after it did
// (owners never overlap). Reads again are thus only the uncommitted tail
// of a member that died or was removed. It returns how many reads were
// repeats.
func (l *ledger) check(t testing.TB, end map[int32]int64) (repeats int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	type po struct {
		p int32
		o int64
	}
	readsOf := make(map[po][]readEvent)
	for _, r := range l.reads {
		k := po{r.partition, r.offset}
		if prev := readsOf[k]; len(prev) > 0 {
			repeats++
			if prev[0].value != r.value {
				t.Errorf("partition %d offset %d read as %q by %s and as %q by %s", r.partition, r.offset, prev[0].value, prev[0].member, r.value, r.member)
			}
		}
		readsOf[k] = append(readsOf[k], r)
	}
	for p, e := range end {
		for o := int64(0); o < e; o++ {
			if len(readsOf[po{p, o}]) == 0 {
				t.Errorf("partition %d offset %d was never read (end %d)", p, o, e)
				return repeats
			}
		}
	}
	// Reads and commits are both in clock order.
	committedTo := make(map[int32]commitEvent)
	c := 0
	for _, r := range l.reads {
		for ; c < len(l.commits) && l.commits[c].at < r.at; c++ {
			if cm := l.commits[c]; cm.offset > committedTo[cm.partition].offset {
				committedTo[cm.partition] = cm
			}
		}
		if cm, ok := committedTo[r.partition]; ok && r.offset < cm.offset {
			t.Errorf("%s read partition %d offset %d after %s's commit of offset %d was acknowledged", r.member, r.partition, r.offset, cm.member, cm.offset)
			return repeats
		}
	}
	// A member that read a record and lost its partition to a member
	// that read the record again must not commit the partition until it
	// has read from it again (it owns it again then).
	for k, rs := range readsOf {
		for i, first := range rs {
			for _, later := range rs[i+1:] {
				if later.member == first.member {
					break
				}
				for _, cm := range l.commits {
					if cm.member == first.member && cm.partition == k.p && cm.at > later.at && cm.offset > k.o &&
						!l.readFromBetweenLocked(first.member, k.p, later.at, cm.at) {
						t.Errorf("%s committed partition %d offset %d after %s had read offset %d: both owned the partition", cm.member, k.p, cm.offset, later.member, k.o)
						return repeats
					}
				}
			}
		}
	}
	return repeats
}

// readFromBetweenLocked is whether member read from partition in the clock
// interval (from, to). l.mu must be held.
func (l *ledger) readFromBetweenLocked(member string, partition int32, from, to int64) bool {
	for _, r := range l.reads {
		if r.member == member && r.partition == partition && r.at > from && r.at < to {
			return true
		}
	}
	return false
}

// longestGap is the longest time between consecutive records member read
// from partitions in the window [from, to].
func (l *ledger) longestGap(member string, partitions []int32, from, to time.Time) (gap time.Duration, records int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var times []time.Time
	for _, r := range l.reads {
		if r.member == member && slices.Contains(partitions, r.partition) {
			times = append(times, r.when)
		}
	}
	return longestGap(times, from, to)
}

// longestGap is the longest time between consecutive times in [from, to],
// counting the window's edges.
func longestGap(times []time.Time, from, to time.Time) (gap time.Duration, n int) {
	last := from
	for _, when := range times {
		if when.Before(from) || when.After(to) {
			continue
		}
		n++
		gap = max(gap, when.Sub(last))
		last = when
	}
	return max(gap, to.Sub(last)), n
}

// seqProducer produces sequence-numbered records round-robin over a
// topic's partitions, either in bursts or steadily in the background.
type seqProducer struct {
	t          testing.TB
	cl         *kgo.Client
	topic      string
	partitions int32
	next       atomic.Int64
	failed     atomic.Int64
	wg         sync.WaitGroup
	stop       chan struct{}
	stopped    chan struct{}
}

func newSeqProducer(t testing.TB, addr, topic string, partitions int32) *seqProducer {
	p := &seqProducer{t: t, topic: topic, partitions: partitions}
	p.cl = newClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	return p
}

func (p *seqProducer) produceOne(ctx context.Context) {
	seq := p.next.Add(1) - 1
	p.wg.Add(1)
	p.cl.Produce(ctx, &kgo.Record{Topic: p.topic, Partition: int32(seq % int64(p.partitions)), Value: []byte(strconv.FormatInt(seq, 10))}, func(_ *kgo.Record, err error) {
		if err != nil {
			p.failed.Add(1)
		}
		p.wg.Done()
	})
}

// produce produces n records and waits for them.
func (p *seqProducer) produce(n int) {
	p.t.Helper()
	ctx := testContext(p.t)
	for i := 0; i < n; i++ {
		p.produceOne(ctx)
	}
	p.wg.Wait()
	if f := p.failed.Load(); f > 0 {
		p.t.Fatalf("%d records failed to produce", f)
	}
}

// start produces a record every interval until stopAndWait.
func (p *seqProducer) start(interval time.Duration) {
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	ctx := testContext(p.t)
	go func() {
		defer close(p.stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
				p.produceOne(ctx)
			}
		}
	}()
}

// stopAndWait stops a steady producer and returns the end offsets of the
// topic once every record is acknowledged.
func (p *seqProducer) stopAndWait(adm *kadm.Client) map[int32]int64 {
	p.t.Helper()
	if p.stop != nil {
		close(p.stop)
		<-p.stopped
		p.stop = nil
	}
	p.wg.Wait()
	if f := p.failed.Load(); f > 0 {
		p.t.Fatalf("%d records failed to produce", f)
	}
	return endOffsets(p.t, adm, p.topic)
}

func (p *seqProducer) produced() int64 { return p.next.Load() }

func endOffsets(t testing.TB, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	listed, err := adm.ListEndOffsets(testContext(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	end := make(map[int32]int64)
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		end[o.Partition] = o.Offset
	})
	return end
}

// member is a group member under test, whatever its client.
type member interface {
	Name() string
	// Owned is the member's own view of the partitions it owns.
	Owned() []int32
	// Leave stops consuming and leaves the group cleanly.
	Leave()
	// Kill cuts the member's connections: it never leaves.
	Kill()
	// Stall makes the member stop polling after its next non-empty poll,
	// before it commits; Unstall wakes it up to commit what it read, and
	// returns the commit's outcome; the member then stops consuming.
	Stall()
	Unstall() error
	// Stalled reports whether the member is blocked in Stall.
	Stalled() bool
}

// owned tracks a member's partitions from its rebalance callbacks.
type owned struct {
	mu sync.Mutex
	ps map[int32]bool
}

func (o *owned) add(ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ps == nil {
		o.ps = make(map[int32]bool)
	}
	for _, p := range ps {
		o.ps[p] = true
	}
}

func (o *owned) remove(ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range ps {
		delete(o.ps, p)
	}
}

func (o *owned) set(ps []int32) {
	o.mu.Lock()
	o.ps = nil
	o.mu.Unlock()
	o.add(ps)
}

func (o *owned) list() []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]int32, 0, len(o.ps))
	for p := range o.ps {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// stall is the Stall/Unstall switch a member's loop consults.
type stall struct {
	want    atomic.Bool
	in      atomic.Bool
	release chan struct{}
	result  chan error // the outcome of the commit after the stall
}

func newStall() *stall { return &stall{release: make(chan struct{}), result: make(chan error, 1)} }

// wait blocks once the member is asked to stall, until it is released or
// ctx ends, and reports whether it stalled.
func (s *stall) wait(ctx context.Context) bool {
	if !s.want.Load() {
		return false
	}
	s.in.Store(true)
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return true
}

// unstall releases the member and returns the outcome of its commit.
func (s *stall) unstall() error {
	close(s.release)
	select {
	case err := <-s.result:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("test: no commit within 30s of waking up")
	}
}

// report hands the outcome of the first commit after the stall to unstall.
func (s *stall) report(err error) {
	select {
	case s.result <- err:
	default:
	}
}

// errOutcomeUnknown is a commit whose outcome the client does not report.
var errOutcomeUnknown = errors.New("test: the client does not say whether the commit landed")

// kgoMember is a franz-go group consumer that commits what it read after
// every poll, with rebalances blocked between poll and commit
// (BlockRebalanceOnPoll) so it never commits a partition it lost.
// memberState is what every client's member keeps the same way, and the
// member methods that only read it.
type memberState struct {
	t      testing.TB
	name   string
	dialer *cutDialer
	ledger *ledger
	owned  owned
	stall  *stall
	dead   atomic.Bool
}

func newMemberState(t testing.TB, name string, l *ledger) memberState {
	return memberState{t: t, name: name, dialer: &cutDialer{}, ledger: l, stall: newStall()}
}

func (m *memberState) Name() string   { return m.name }
func (m *memberState) Owned() []int32 { return m.owned.list() }
func (m *memberState) Stall()         { m.stall.want.Store(true) }
func (m *memberState) Stalled() bool  { return m.stall.in.Load() }
func (m *memberState) Unstall() error { return m.stall.unstall() }

type kgoMember struct {
	memberState
	topic    string
	cl       *kgo.Client
	clientCx context.Context
	killCl   context.CancelFunc
	pollCx   context.Context
	stopPoll context.CancelFunc
	done     chan struct{}
	once     sync.Once
}

func startKgoMember(t testing.TB, addr, group, topic, name string, f flavor, l *ledger, extra ...kgo.Opt) *kgoMember {
	t.Helper()
	m := &kgoMember{memberState: newMemberState(t, name, l), topic: topic, done: make(chan struct{})}
	m.clientCx, m.killCl = context.WithCancel(context.Background())
	m.pollCx, m.stopPoll = context.WithCancel(context.Background())
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr), kgo.ClientID(name), kgo.WithContext(m.clientCx), kgo.Dialer(m.dialer.DialContext),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(testSessionTimeout), kgo.HeartbeatInterval(testHeartbeat), kgo.RebalanceTimeout(testRebalanceTimeout),
		kgo.FetchMaxWait(100 * time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { m.owned.add(a[topic]) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) { m.owned.remove(r[topic]) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, r map[string][]int32) { m.owned.remove(r[topic]) }),
	}
	opts = append(append(opts, f.opts...), extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	go m.run()
	t.Cleanup(m.Kill)
	return m
}

func (m *kgoMember) run() {
	defer close(m.done)
	for {
		fs := m.cl.PollFetches(m.pollCx)
		if m.pollCx.Err() != nil || fs.IsClientClosed() || m.dead.Load() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !m.dead.Load() {
				m.t.Logf("%s: fetch error on %s/%d: %v", m.name, topic, p, err)
			}
		})
		records := fs.Records()
		if len(records) > 0 {
			next := make(map[int32]int64)
			for _, r := range records {
				m.ledger.read(m.name, r.Partition, r.Offset, string(r.Value))
				next[r.Partition] = r.Offset + 1
			}
			if m.stall.wait(m.pollCx) {
				// Woken up after stalling: try to commit, report, and stop
				// consuming. (A member removed from a cooperative group
				// that went on polling would be a zombie: franz-go keeps
				// fetching the partitions it lost until it rejoins, and
				// commits them under its new generation.)
				if m.dead.Load() {
					return
				}
				err := m.cl.CommitRecords(m.clientCx, records...)
				if err == nil {
					m.ledger.committed(m.name, next)
				}
				m.stall.report(err)
				return
			}
			if m.dead.Load() {
				return
			}
			err := m.cl.CommitRecords(m.clientCx, records...)
			switch {
			case m.dead.Load():
				return
			case err == nil:
				m.ledger.committed(m.name, next)
			default:
				m.t.Errorf("%s: commit: %v", m.name, err)
			}
		}
		m.cl.AllowRebalance()
	}
}

func (m *kgoMember) Leave() {
	m.once.Do(func() {
		m.stopPoll()
		<-m.done
		m.cl.CloseAllowingRebalance()
		m.killCl()
	})
}

func (m *kgoMember) Kill() {
	m.once.Do(func() {
		m.dead.Store(true)
		m.dialer.Cut()
		m.killCl()
		m.stopPoll()
		<-m.done
		m.cl.CloseAllowingRebalance()
	})
}

// saramaMember is a sarama ConsumerGroup member that commits synchronously
// after each batch it drains from a claim. Sarama blocks a rebalance until
// ConsumeClaim returns, so it too never commits a partition it lost.
type saramaMember struct {
	memberState
	group  sarama.ConsumerGroup
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startSaramaMember(t testing.TB, addr, group, topic, name string, strategy sarama.BalanceStrategy, l *ledger, configure func(*sarama.Config)) *saramaMember {
	t.Helper()
	m := &saramaMember{memberState: newMemberState(t, name, l), done: make(chan struct{})}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = name
	cfg.Net.Proxy.Enable = true
	cfg.Net.Proxy.Dialer = m.dialer
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy}
	cfg.Consumer.Group.Rebalance.Timeout = testRebalanceTimeout
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 50 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = testSessionTimeout
	cfg.Consumer.Group.Heartbeat.Interval = testHeartbeat
	if configure != nil {
		configure(cfg)
	}
	cg, err := sarama.NewConsumerGroup([]string{addr}, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.group = cg
	m.ctx, m.cancel = context.WithCancel(context.Background())
	go func() {
		for err := range cg.Errors() {
			if !m.dead.Load() && !m.stall.want.Load() {
				t.Logf("%s: %v", name, err)
			}
		}
	}()
	go func() {
		defer close(m.done)
		for m.ctx.Err() == nil {
			err := cg.Consume(m.ctx, []string{topic}, saramaHandler{m})
			// NOT_COORDINATOR comes while the broker is still loading
			// the group's __consumer_offsets partition; sarama looks the
			// coordinator up again.
			if err != nil && !errors.Is(err, sarama.ErrNotCoordinatorForConsumer) && m.ctx.Err() == nil && !m.dead.Load() {
				t.Logf("%s: consume: %v", name, err)
			}
		}
	}()
	t.Cleanup(m.Kill)
	return m
}

type saramaHandler struct{ m *saramaMember }

func (h saramaHandler) Setup(s sarama.ConsumerGroupSession) error {
	for _, ps := range s.Claims() {
		h.m.owned.set(ps)
	}
	return nil
}

func (h saramaHandler) Cleanup(sarama.ConsumerGroupSession) error {
	h.m.owned.set(nil)
	return nil
}

func (h saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	m := h.m
	for {
		var batch []*sarama.ConsumerMessage
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			batch = append(batch, msg)
		case <-s.Context().Done():
			return nil
		}
	drain:
		for {
			select {
			case msg, ok := <-claim.Messages():
				if !ok {
					break drain
				}
				batch = append(batch, msg)
			default:
				break drain
			}
		}
		if m.dead.Load() {
			return nil
		}
		for _, msg := range batch {
			m.ledger.read(m.name, msg.Partition, msg.Offset, string(msg.Value))
			s.MarkMessage(msg, "")
		}
		if m.stall.wait(m.ctx) {
			// Sarama's Commit does not say whether it landed; the member
			// stops here.
			if !m.dead.Load() {
				s.Commit()
				m.stall.report(errOutcomeUnknown)
			}
			m.cancel()
			return nil
		}
		if m.dead.Load() {
			return nil
		}
		s.Commit()
		if s.Context().Err() != nil {
			// The session ended around the commit, which may have
			// been refused: it is not recorded.
			return nil
		}
		m.ledger.committed(m.name, map[int32]int64{claim.Partition(): batch[len(batch)-1].Offset + 1})
	}
}

func (m *saramaMember) Leave() {
	m.once.Do(func() {
		m.cancel()
		<-m.done
		m.group.Close()
	})
}

func (m *saramaMember) Kill() {
	m.once.Do(func() {
		m.dead.Store(true)
		m.dialer.Cut()
		m.cancel()
		<-m.done
		m.group.Close()
	})
}

// partitionsOwned is the union of the members' own views, and whether no
// partition is owned twice.
func partitionsOwned(members []member) (map[int32]string, bool) {
	out := make(map[int32]string)
	for _, m := range members {
		for _, p := range m.Owned() {
			if _, dup := out[p]; dup {
				return out, false
			}
			out[p] = m.Name()
		}
	}
	return out, true
}

// settled reports whether the members own all n partitions between them,
// each exactly once, and the broker agrees the group is stable with
// exactly these members.
func settled(ctx context.Context, adm *kadm.Client, group string, kip848 bool, n int32, members []member) bool {
	owned, ok := partitionsOwned(members)
	if !ok || int32(len(owned)) != n {
		return false
	}
	if kip848 {
		described, err := adm.DescribeConsumerGroups(ctx, group)
		if err != nil {
			return false
		}
		g := described[group]
		if g.Err != nil || g.State != "Stable" || len(g.Members) != len(members) {
			return false
		}
		for _, dm := range g.Members {
			if dm.MemberEpoch != g.Epoch || !sameTopicsSet(dm.Assignment, dm.TargetAssignment) {
				return false
			}
		}
		return true
	}
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return false
	}
	g := described[group]
	return g.Err == nil && g.State == "Stable" && len(g.Members) == len(members)
}

func sameTopicsSet(a, b kadm.TopicsSet) bool {
	as, bs := a.Sorted(), b.Sorted()
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		if as[i].Topic != bs[i].Topic || !slices.Equal(as[i].Partitions, bs[i].Partitions) {
			return false
		}
	}
	return true
}

// waitSettled waits until the group is settled and stays so over a few
// heartbeats, and returns when it settled.
func waitSettled(t testing.TB, adm *kadm.Client, group string, kip848 bool, n int32, members []member, d time.Duration) time.Time {
	t.Helper()
	ctx := testContext(t)
	deadline := time.Now().Add(d)
	stableSince := time.Time{}
	for {
		if settled(ctx, adm, group, kip848, n, members) {
			if stableSince.IsZero() {
				stableSince = time.Now()
			}
			if time.Since(stableSince) > 3*testHeartbeat {
				return stableSince
			}
		} else {
			stableSince = time.Time{}
		}
		if time.Now().After(deadline) {
			var views []string
			for _, m := range members {
				views = append(views, fmt.Sprintf("%s=%v", m.Name(), m.Owned()))
			}
			t.Fatalf("group %s did not settle on %d partitions over %d members within %v: %v", group, n, len(members), d, views)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGroupTenPartitionsTwelveMembers is the seed's quiz with every client:
// 10 partitions and 12 consumers in one group — exactly 10 consumers own one
// partition each and 2 own none, by the members' own account and by the
// broker's.
func TestGroupTenPartitionsTwelveMembers(t *testing.T) {
	type variant struct {
		name   string
		kip848 bool
		start  func(t *testing.T, addr, group, name string) member
	}
	var variants []variant
	for _, f := range allFlavors {
		variants = append(variants, variant{f.name, f.kip848, func(t *testing.T, addr, group, name string) member {
			return startKgoMember(t, addr, group, "quiz", name, f, &ledger{})
		}})
	}
	for _, s := range []struct {
		name     string
		strategy func() sarama.BalanceStrategy
	}{
		{"sarama-range", sarama.NewBalanceStrategyRange},
		{"sarama-round-robin", sarama.NewBalanceStrategyRoundRobin},
		{"sarama-sticky", sarama.NewBalanceStrategySticky},
	} {
		variants = append(variants, variant{s.name, false, func(t *testing.T, addr, group, name string) member {
			return startSaramaMember(t, addr, group, "quiz", name, s.strategy(), &ledger{}, nil)
		}})
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			b := startBroker(t, groupTestSettings())
			adm := newAdmin(t, b.Addr())
			createTopic(t, adm, "quiz", 10, nil)
			group := "quiz-" + v.name
			var members []member
			for i := 0; i < 12; i++ {
				members = append(members, v.start(t, b.Addr(), group, fmt.Sprintf("m%02d", i)))
			}
			waitSettled(t, adm, group, v.kip848, 10, members, 30*time.Second)
			withOne, withNone := 0, 0
			for _, m := range members {
				switch n := len(m.Owned()); n {
				case 0:
					withNone++
				case 1:
					withOne++
				default:
					t.Errorf("%s owns %d partitions: %v", m.Name(), n, m.Owned())
				}
			}
			if withOne != 10 || withNone != 2 {
				t.Fatalf("%d members own one partition and %d none; want 10 and 2", withOne, withNone)
			}
			// The broker's account agrees.
			ctx := testContext(t)
			perMember := map[string]int{}
			if v.kip848 {
				described, err := adm.DescribeConsumerGroups(ctx, group)
				if err != nil {
					t.Fatal(err)
				}
				for _, dm := range described[group].Members {
					n := 0
					dm.Assignment.Each(func(string, int32) { n++ })
					perMember[dm.ClientID] = n
				}
			} else {
				described, err := adm.DescribeGroups(ctx, group)
				if err != nil {
					t.Fatal(err)
				}
				for _, dm := range described[group].Members {
					c, ok := dm.Assigned.AsConsumer()
					if !ok {
						t.Fatalf("member %s has no consumer assignment", dm.MemberID)
					}
					n := 0
					for _, tp := range c.Topics {
						n += len(tp.Partitions)
					}
					perMember[dm.ClientID] = n
				}
			}
			for _, m := range members {
				if perMember[m.Name()] != len(m.Owned()) {
					t.Errorf("broker says %s owns %d partitions, the member says %v", m.Name(), perMember[m.Name()], m.Owned())
				}
			}
		})
	}
}

// memberStarter starts a member named name that records into l.
type memberStarter func(t testing.TB, name string, l *ledger) member

// starterFor starts members of group on topic: franz-go members of the
// flavor called variant (with extra options), or, for "sarama-range",
// sarama members with the range strategy (configured by configure).
func starterFor(variant, addr, group, topic string, configure func(*sarama.Config), extra ...kgo.Opt) memberStarter {
	if variant == "sarama-range" {
		return func(t testing.TB, name string, l *ledger) member {
			return startSaramaMember(t, addr, group, topic, name, sarama.NewBalanceStrategyRange(), l, configure)
		}
	}
	for _, f := range allFlavors {
		if f.name == variant {
			return func(t testing.TB, name string, l *ledger) member {
				return startKgoMember(t, addr, group, topic, name, f, l, extra...)
			}
		}
	}
	panic("test: no member variant " + variant)
}

// TestGroupMemberKilledWithoutLeaving kills one of three members by cutting
// its connections, while records keep arriving: its partitions move to the
// two others within about the session timeout, nothing is skipped, and the
// only records read twice are the ones it read and had not committed.
func TestGroupMemberKilledWithoutLeaving(t *testing.T) {
	variants := []struct {
		name   string
		kip848 bool
	}{{"range", false}, {"round-robin", false}, {"sticky", false}, {"cooperative-sticky", false}, {"kip848-uniform", true}, {"sarama-range", false}}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			b := startBroker(t, groupTestSettings())
			adm := newAdmin(t, b.Addr())
			createTopic(t, adm, "orders", 6, nil)
			group := "kill-" + v.name
			start := starterFor(v.name, b.Addr(), group, "orders", nil)
			producer := newSeqProducer(t, b.Addr(), "orders", 6)
			producer.start(2 * time.Millisecond)
			l := &ledger{}
			members := []member{start(t, "a", l), start(t, "b", l), start(t, "c", l)}
			waitSettled(t, adm, group, v.kip848, 6, members, 20*time.Second)
			victim := members[0]
			for _, m := range members {
				if len(m.Owned()) > len(victim.Owned()) {
					victim = m
				}
			}
			poll.Until(t, 10*time.Second, victim.Name()+" to read", func() bool { return l.readCount(victim.Name()) > 20 })
			var survivors []member
			for _, m := range members {
				if m != victim {
					survivors = append(survivors, m)
				}
			}
			// The victim dies with records read and not committed.
			victim.Stall()
			poll.Until(t, 10*time.Second, victim.Name()+" to stall", victim.Stalled)
			moved := victim.Owned()
			killed := time.Now()
			victim.Kill()
			took := waitSettled(t, adm, group, v.kip848, 6, survivors, 20*time.Second).Sub(killed)
			t.Logf("%s's partitions %v moved to the survivors %v after the kill", victim.Name(), moved, took)
			// The broker notices within the session timeout of the last
			// heartbeat; the rebalance that follows takes a few
			// heartbeats. The bound is loose so that a loaded CI machine
			// does not fail it; without session expiry the partitions
			// would never move.
			if limit := testSessionTimeout + 5*time.Second; took > limit {
				t.Errorf("partitions moved %v after the kill; want under %v", took, limit)
			}
			before := l.readCount("")
			poll.Until(t, 10*time.Second, "records after the move", func() bool { return l.readCount("") > before+100 })
			end := producer.stopAndWait(adm)
			poll.Until(t, 20*time.Second, "every record to be read", func() bool { return l.covers(end) })
			repeats := l.check(t, end)
			tail := l.uncommittedTail(victim.Name())
			t.Logf("%d records, %d read again; %s's uncommitted tail was %d", producer.produced(), repeats, victim.Name(), tail)
			if !tailMatches(v.name, repeats, tail) {
				t.Errorf("%d records read again; want exactly the victim's uncommitted tail of %d", repeats, tail)
			}
		})
	}
}

// TestGroupLeaderKilledDuringRebalance kills the member that joined first
// (the classic group's leader) just as a new member joins, so the broker
// is waiting in the join phase for a member that will never come: its
// session expires, the rebalance completes without it, and its
// partitions go to the others with nothing skipped.
func TestGroupLeaderKilledDuringRebalance(t *testing.T) {
	variants := []struct {
		name   string
		kip848 bool
	}{{"range", false}, {"cooperative-sticky", false}, {"kip848-uniform", true}, {"sarama-range", false}}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			b := startBroker(t, groupTestSettings())
			adm := newAdmin(t, b.Addr())
			createTopic(t, adm, "orders", 6, nil)
			group := "leader-" + v.name
			start := starterFor(v.name, b.Addr(), group, "orders", nil)
			producer := newSeqProducer(t, b.Addr(), "orders", 6)
			producer.start(2 * time.Millisecond)
			l := &ledger{}
			leader := start(t, "a", l)
			waitSettled(t, adm, group, v.kip848, 6, []member{leader}, 20*time.Second)
			other := start(t, "b", l)
			waitSettled(t, adm, group, v.kip848, 6, []member{leader, other}, 20*time.Second)
			poll.Until(t, 10*time.Second, "both to read", func() bool { return l.readCount("a") > 20 && l.readCount("b") > 20 })

			leader.Stall()
			poll.Until(t, 10*time.Second, "the leader to stall", leader.Stalled)
			killed := time.Now()
			newcomer := start(t, "c", l)
			leader.Kill()
			took := waitSettled(t, adm, group, v.kip848, 6, []member{other, newcomer}, 20*time.Second).Sub(killed)
			t.Logf("the group settled without its leader %v after the kill", took)
			if limit := testSessionTimeout + 5*time.Second; took > limit {
				t.Errorf("the group settled %v after the kill; want under %v", took, limit)
			}
			before := l.readCount("")
			poll.Until(t, 10*time.Second, "records after the rebalance", func() bool { return l.readCount("") > before+100 })
			end := producer.stopAndWait(adm)
			poll.Until(t, 20*time.Second, "every record to be read", func() bool { return l.covers(end) })
			repeats := l.check(t, end)
			tail := l.uncommittedTail("a")
			t.Logf("%d records, %d read again; the leader's uncommitted tail was %d", producer.produced(), repeats, tail)
			if !tailMatches(v.name, repeats, tail) {
				t.Errorf("%d records read again; want exactly the leader's uncommitted tail of %d", repeats, tail)
			}
		})
	}
}

// TestGroupMemberStopsPolling stalls a member that owns every partition
// between poll and commit (its client keeps running, heartbeats and all)
// and has a new member join: the stalled member cannot give up partitions,
// so the broker removes it when the rebalance timeout — the client's
// max.poll.interval.ms — runs out, well before its session timeout, and the
// newcomer gets everything. When it wakes up, its commit is refused.
//
// The broker has no other way to see a member that stopped polling: Java
// clients leave the group themselves when max.poll.interval.ms passes,
// franz-go and sarama only stop taking part in rebalances.
func TestGroupMemberStopsPolling(t *testing.T) {
	const rebalanceTimeout, sessionTimeout = time.Second, 8 * time.Second
	variants := []struct {
		name   string
		kip848 bool
	}{{"range", false}, {"cooperative-sticky", false}, {"kip848-uniform", true}, {"sarama-range", false}}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			settings := groupTestSettings()
			settings["group.consumer.session.timeout.ms"] = strconv.Itoa(int(sessionTimeout.Milliseconds()))
			b := startLoggedBroker(t, settings)
			adm := newAdmin(t, b.Addr())
			createTopic(t, adm, "orders", 4, nil)
			group := "stall-" + v.name
			start := starterFor(v.name, b.Addr(), group, "orders", func(cfg *sarama.Config) {
				cfg.Consumer.Group.Rebalance.Timeout = rebalanceTimeout
				cfg.Consumer.Group.Session.Timeout = sessionTimeout
			}, kgo.RebalanceTimeout(rebalanceTimeout), kgo.SessionTimeout(sessionTimeout))
			producer := newSeqProducer(t, b.Addr(), "orders", 4)
			producer.start(2 * time.Millisecond)
			l := &ledger{}
			stalled := start(t, "stalled", l)
			waitSettled(t, adm, group, v.kip848, 4, []member{stalled}, 20*time.Second)
			stalled.Stall()
			poll.Until(t, 10*time.Second, "the member to stall", stalled.Stalled)
			joined := time.Now()
			newcomer := start(t, "newcomer", l)
			// The stalled member still believes it owns its partitions, so
			// watch the newcomer and the broker.
			poll.Until(t, 20*time.Second, "the stalled member to be removed", func() bool {
				return len(newcomer.Owned()) == 4 && brokerMembers(t, adm, group, v.kip848) == 1
			})
			t.Logf("stalled member removed and its partitions reassigned %v after the new member joined", time.Since(joined))
			// The stalled client heartbeats all along, so its session never
			// runs out: the broker's log says why it removed the member.
			logs := b.logText.String()
			if !strings.Contains(logs, "removed member that did not rejoin") && !strings.Contains(logs, "did not revoke partitions within its rebalance timeout") {
				t.Errorf("the broker did not log removing the stalled member for its rebalance timeout:\n%s", logs)
			}
			if strings.Contains(logs, "member failed its session") {
				t.Errorf("the broker removed a member for its session timeout:\n%s", logs)
			}
			switch err := stalled.Unstall(); {
			case errors.Is(err, errOutcomeUnknown):
			case err == nil:
				t.Errorf("the removed member's commit was accepted")
			default:
				t.Logf("the removed member's commit was refused: %v", err)
			}
			before := l.readCount("newcomer")
			poll.Until(t, 10*time.Second, "records after the removal", func() bool { return l.readCount("newcomer") > before+100 })
			end := producer.stopAndWait(adm)
			poll.Until(t, 20*time.Second, "every record to be read", func() bool { return l.covers(end) })
			repeats := l.check(t, end)
			t.Logf("%d records, %d read again, all by or after the stalled member", producer.produced(), repeats)
			if n := l.repeatsWithout("stalled"); n != 0 {
				t.Errorf("%d records read twice by the healthy members", n)
			}
		})
	}
}

// brokerMembers is how many members the broker lists for group, or -1.
func brokerMembers(t testing.TB, adm *kadm.Client, group string, kip848 bool) int {
	ctx := testContext(t)
	if kip848 {
		d, err := adm.DescribeConsumerGroups(ctx, group)
		if err != nil || d[group].Err != nil {
			return -1
		}
		return len(d[group].Members)
	}
	d, err := adm.DescribeGroups(ctx, group)
	if err != nil || d[group].Err != nil {
		return -1
	}
	return len(d[group].Members)
}

// TestGroupsReadIndependently has three groups — payment (two range
// members), inventory (KIP-848) and notification (cooperative-sticky) —
// read one topic while records keep arriving. The notification consumer is
// killed; the other groups go on; a new notification consumer resumes at
// the committed offsets: no gap, and nothing read twice beyond what the
// dead one had not committed.
func TestGroupsReadIndependently(t *testing.T) {
	b := startBroker(t, groupTestSettings())
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "orders", 4, nil)
	producer := newSeqProducer(t, b.Addr(), "orders", 4)
	producer.start(2 * time.Millisecond)
	payment, inventory, notification := &ledger{}, &ledger{}, &ledger{}
	p1 := startKgoMember(t, b.Addr(), "payment", "orders", "payment-1", flavorRange, payment)
	p2 := startKgoMember(t, b.Addr(), "payment", "orders", "payment-2", flavorRange, payment)
	inv := startKgoMember(t, b.Addr(), "inventory", "orders", "inventory-1", flavorKIP848Uniform, inventory)
	n1 := startKgoMember(t, b.Addr(), "notification", "orders", "notification-1", flavorCooperative, notification)
	waitSettled(t, adm, "payment", false, 4, []member{p1, p2}, 20*time.Second)
	waitSettled(t, adm, "inventory", true, 4, []member{inv}, 20*time.Second)
	waitSettled(t, adm, "notification", false, 4, []member{n1}, 20*time.Second)
	poll.Until(t, 10*time.Second, "notification to read", func() bool { return notification.readCount("") > 100 })

	// It dies with records read and not committed.
	n1.Stall()
	poll.Until(t, 10*time.Second, "notification to stall", n1.Stalled)
	n1.Kill()
	readAtKill := notification.readCount("")
	paymentAtKill, inventoryAtKill := payment.readCount(""), inventory.readCount("")
	ctx := testContext(t)
	// Records keep arriving and the other groups keep reading them.
	poll.Until(t, 10*time.Second, "payment and inventory to go on", func() bool {
		return payment.readCount("") > paymentAtKill+200 && inventory.readCount("") > inventoryAtKill+200
	})
	if n := notification.readCount(""); n != readAtKill {
		t.Fatalf("the dead notification consumer read %d records after it was killed", n-readAtKill)
	}
	// The dead consumer's last acknowledged commits are what the group has.
	committed, err := adm.FetchOffsets(ctx, "notification")
	if err != nil {
		t.Fatal(err)
	}
	last := notification.lastCommit("notification-1")
	for p := int32(0); p < 4; p++ {
		if o, _ := committed.Lookup("orders", p); o.At != last[p] {
			t.Errorf("partition %d: the group has offset %d committed, the consumer's last acknowledged commit was %d", p, o.At, last[p])
		}
	}

	n2 := startKgoMember(t, b.Addr(), "notification", "orders", "notification-2", flavorCooperative, notification)
	waitSettled(t, adm, "notification", false, 4, []member{n2}, 20*time.Second)
	end := producer.stopAndWait(adm)
	for name, l := range map[string]*ledger{"payment": payment, "inventory": inventory, "notification": notification} {
		poll.Until(t, 20*time.Second, name+" to read every record", func() bool { return l.covers(end) })
	}
	if r := payment.check(t, end); r != 0 {
		t.Errorf("payment read %d records twice", r)
	}
	if r := inventory.check(t, end); r != 0 {
		t.Errorf("inventory read %d records twice", r)
	}
	repeats := notification.check(t, end)
	tail := notification.uncommittedTail("notification-1")
	if tail == 0 || repeats != tail {
		t.Errorf("notification read %d records twice; want exactly the dead consumer's uncommitted tail of %d", repeats, tail)
	}
	// The new consumer started where the old one had committed.
	first := notification.firstRead("notification-2")
	for p := int32(0); p < 4; p++ {
		if first[p] != last[p] {
			t.Errorf("partition %d: notification-2 started at %d, the committed offset was %d", p, first[p], last[p])
		}
	}
	t.Logf("%d records; notification resumed at %v after committing %v, %d read twice (uncommitted tail %d)", producer.produced(), first, last, repeats, tail)
}

// TestGroupRebalanceGap measures, for a member whose partitions do not
// move, the longest time between records while another member joins and
// leaves. Cooperative-sticky and KIP-848 keep those partitions flowing;
// eager range revokes everything for each rebalance and is measured for
// comparison.
//
// The member commits synchronously after each poll, and franz-go holds
// commits while a classic member's JoinGroup is parked, and fetches no
// further than what was polled: in the cooperative protocol's second
// rebalance the member waits, consuming nothing, until the joiner has
// heartbeated and rejoined too (up to its heartbeat interval).
func TestGroupRebalanceGap(t *testing.T) {
	for _, f := range []flavor{flavorRange, flavorCooperative, flavorKIP848Uniform} {
		t.Run(f.name, func(t *testing.T) {
			b := startBroker(t, groupTestSettings())
			adm := newAdmin(t, b.Addr())
			createTopic(t, adm, "orders", 6, nil)
			group := "gap-" + f.name
			producer := newSeqProducer(t, b.Addr(), "orders", 6)
			producer.start(2 * time.Millisecond)
			l := &ledger{}
			a := startKgoMember(t, b.Addr(), group, "orders", "a", f, l)
			waitSettled(t, adm, group, f.kip848, 6, []member{a}, 20*time.Second)
			poll.Until(t, 10*time.Second, "a to read", func() bool { return l.readCount("a") > 50 })

			from := time.Now()
			joiner := startKgoMember(t, b.Addr(), group, "orders", "b", f, l)
			waitSettled(t, adm, group, f.kip848, 6, []member{a, joiner}, 20*time.Second)
			kept := a.Owned()
			joiner.Leave()
			waitSettled(t, adm, group, f.kip848, 6, []member{a}, 20*time.Second)
			settledAt := l.readCount("a")
			poll.Until(t, 10*time.Second, "a to read after the rebalances", func() bool { return l.readCount("a") > settledAt+50 })
			to := time.Now()

			gap, n := l.longestGap("a", kept, from, to)
			t.Logf("%s: partitions %v stayed with a through a join and a leave (%v, %d records): longest gap between records %v",
				f.name, kept, to.Sub(from).Round(time.Millisecond), n, gap.Round(100*time.Microsecond))
			if f.cooperative && gap >= testSessionTimeout {
				t.Errorf("partitions that did not move went %v without records; want under the session timeout %v", gap, testSessionTimeout)
			}
			end := producer.stopAndWait(adm)
			poll.Until(t, 20*time.Second, "every record to be read", func() bool { return l.covers(end) })
			if r := l.check(t, end); r != 0 {
				t.Errorf("%d records read twice without any member dying", r)
			}
		})
	}
}

// TestGroupAdmin drives the group admin APIs through kadm against live
// groups: ListGroups with and without a state filter, DescribeGroups and
// ConsumerGroupDescribe, lag, OffsetDelete (refused for a topic an active
// group subscribes to) and DeleteGroups (NON_EMPTY_GROUP while members
// remain).
func TestGroupAdmin(t *testing.T) {
	b := startBroker(t, groupTestSettings())
	adm := newAdmin(t, b.Addr())
	ctx := testContext(t)
	createTopic(t, adm, "events", 3, nil)
	producer := newSeqProducer(t, b.Addr(), "events", 3)
	producer.produce(30)
	end := endOffsets(t, adm, "events")

	// Two active groups that read and committed everything, one per
	// protocol, and one with offsets and no members.
	classic, consumer := &ledger{}, &ledger{}
	classicMember := startKgoMember(t, b.Addr(), "active", "events", "active-1", flavorRange, classic)
	consumerMember := startKgoMember(t, b.Addr(), "active848", "events", "active848-1", flavorKIP848Uniform, consumer)
	waitSettled(t, adm, "active", false, 3, []member{classicMember}, 20*time.Second)
	waitSettled(t, adm, "active848", true, 3, []member{consumerMember}, 20*time.Second)
	for name, l := range map[string]*ledger{"active": classic, "active848": consumer} {
		poll.Until(t, 10*time.Second, name+" to commit everything", func() bool {
			last := l.lastCommit(name + "-1")
			return last[0] == end[0] && last[1] == end[1] && last[2] == end[2]
		})
	}
	var idle kadm.Offsets
	for p := int32(0); p < 3; p++ {
		idle.Add(kadm.Offset{Topic: "events", Partition: p, At: 4, LeaderEpoch: -1})
	}
	if resp, err := adm.CommitOffsets(ctx, "idle", idle); err != nil || resp.Error() != nil {
		t.Fatalf("committing for an idle group: %v %v", err, resp.Error())
	}

	// ListGroups, all and by state.
	list := func(states ...string) map[string]kadm.ListedGroup {
		t.Helper()
		listed, err := adm.ListGroups(ctx, states...)
		if err != nil {
			t.Fatal(err)
		}
		return listed
	}
	all := list()
	for name, want := range map[string]struct{ typ, state string }{
		"active": {"classic", "Stable"}, "active848": {"consumer", "Stable"}, "idle": {"classic", "Empty"},
	} {
		g, ok := all[name]
		switch {
		case !ok:
			t.Errorf("ListGroups does not list %s: %v", name, all)
		case g.GroupType != want.typ || g.State != want.state || g.ProtocolType != "consumer" && name != "idle":
			t.Errorf("ListGroups lists %s as %+v; want type %s, state %s, protocol type consumer", name, g, want.typ, want.state)
		}
	}
	if stable := list("Stable"); len(stable) != 2 || stable["active"].Group == "" || stable["active848"].Group == "" {
		t.Errorf("ListGroups(Stable) = %v; want active and active848", stable)
	}
	if empty := list("Empty"); len(empty) != 1 || empty["idle"].Group == "" {
		t.Errorf("ListGroups(Empty) = %v; want idle", empty)
	}
	if dead := list("Dead"); len(dead) != 0 {
		t.Errorf("ListGroups(Dead) = %v; want none", dead)
	}
	if listed, err := adm.ListGroupsByType(ctx, []string{"consumer"}); err != nil || len(listed) != 1 || listed["active848"].Group == "" {
		t.Errorf("ListGroups(type consumer) = %v, %v; want active848", listed, err)
	}

	// DescribeGroups and ConsumerGroupDescribe.
	described, err := adm.DescribeGroups(ctx, "active", "idle")
	if err != nil {
		t.Fatal(err)
	}
	if g := described["active"]; g.State != "Stable" || g.ProtocolType != "consumer" || g.Protocol != "range" || len(g.Members) != 1 || g.Members[0].ClientID != "active-1" {
		t.Errorf("active described as %+v", g)
	} else if c, ok := g.Members[0].Assigned.AsConsumer(); !ok || len(c.Topics) != 1 || len(c.Topics[0].Partitions) != 3 {
		t.Errorf("active's member is assigned %+v", c)
	}
	if g := described["idle"]; g.State != "Empty" || len(g.Members) != 0 {
		t.Errorf("idle described as %+v", g)
	}
	consumerGroups, err := adm.DescribeConsumerGroups(ctx, "active848")
	if err != nil {
		t.Fatal(err)
	}
	if g := consumerGroups["active848"]; g.State != "Stable" || g.AssignorName != "uniform" || len(g.Members) != 1 || g.Members[0].ClientID != "active848-1" || len(g.AssignedPartitions().Sorted()[0].Partitions) != 3 {
		t.Errorf("active848 described as %+v", g)
	}

	// Lag: committed offsets against the high watermarks. (kadm describes
	// the KIP-848 group with DescribeGroups, which, as in Kafka, has it
	// Dead: not a classic group; its lag still comes from its offsets.)
	lags, err := adm.Lag(ctx, "active", "idle", "active848")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"active", "active848"} {
		if l := lags[name]; l.Error() != nil || l.Lag.Total() != 0 {
			t.Errorf("%s: lag %d, error %v; want 0", name, l.Lag.Total(), l.Error())
		}
	}
	if l := lags["idle"]; l.Error() != nil || l.Lag.Total() != 30-3*4 {
		t.Errorf("idle: lag %d, error %v; want %d", l.Lag.Total(), l.Error(), 30-3*4)
	}

	// OffsetDelete: refused while the group subscribes to the topic.
	deleted, err := adm.DeleteOffsets(ctx, "active", kadm.TopicsSet{"events": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if err, _ := deleted.Lookup("events", 0); !errors.Is(err, kerr.GroupSubscribedToTopic) {
		t.Errorf("deleting an offset of a subscribed topic: %v; want GROUP_SUBSCRIBED_TO_TOPIC", err)
	}
	deleted, err = adm.DeleteOffsets(ctx, "idle", kadm.TopicsSet{"events": {0: {}}})
	if err != nil || deleted.Error() != nil {
		t.Fatalf("deleting an offset of the idle group: %v %v", err, deleted.Error())
	}
	fetched, err := adm.FetchOffsets(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fetched.Lookup("events", 0); ok {
		t.Errorf("idle still has an offset for partition 0 after OffsetDelete")
	}
	if o, _ := fetched.Lookup("events", 1); o.At != 4 {
		t.Errorf("idle's partition 1 offset is %d after deleting partition 0's; want 4", o.At)
	}

	// DeleteGroups: refused for groups with members.
	deletedGroups, err := adm.DeleteGroups(ctx, "active", "active848", "idle")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"active", "active848"} {
		if err := deletedGroups[name].Err; !errors.Is(err, kerr.NonEmptyGroup) {
			t.Errorf("deleting %s with a member: %v; want NON_EMPTY_GROUP", name, err)
		}
	}
	if err := deletedGroups["idle"].Err; err != nil {
		t.Errorf("deleting idle: %v", err)
	}
	if _, ok := list()["idle"]; ok {
		t.Errorf("idle is still listed after DeleteGroups")
	}
	if fetched, err := adm.FetchOffsets(ctx, "idle"); err != nil || len(fetched) != 0 {
		t.Errorf("a deleted group still has offsets: %v %v", fetched, err)
	}

	// Once their members leave, the groups are Empty and can be deleted.
	classicMember.Leave()
	consumerMember.Leave()
	poll.Until(t, 10*time.Second, "both groups to be empty", func() bool { return len(list("Empty")) == 2 })
	deletedGroups, err = adm.DeleteGroups(ctx, "active", "active848")
	if err != nil || deletedGroups.Error() != nil {
		t.Fatalf("deleting empty groups: %v %v", err, deletedGroups.Error())
	}
	if left := list(); len(left) != 0 {
		t.Errorf("groups left after deleting them all: %v", left)
	}
	if d, err := adm.DescribeGroups(ctx, "active"); err != nil || d["active"].State != "Dead" {
		t.Errorf("a deleted group is described as %+v, %v; want Dead", d["active"], err)
	}
}

// tailMatches reports whether the records read twice are the dead
// member's uncommitted tail. Sarama does not report whether a commit was
// acknowledged, so for it the ledger's tail may include records whose
// commit the broker did take before the kill: fewer repeats are fine,
// more are not.
func tailMatches(variant string, repeats, tail int) bool {
	if tail == 0 {
		return false
	}
	if strings.HasPrefix(variant, "sarama") {
		return repeats <= tail
	}
	return repeats == tail
}
