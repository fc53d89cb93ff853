package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestGroupsSurviveKillNine has three groups — payment (range), inventory
// (cooperative-sticky) and notification (KIP-848) — consume one topic
// while records keep arriving, plus an idle group with offsets and no
// members. The broker is killed with SIGKILL and restarted on the same
// data: every group and every acknowledged commit is there (ListGroups,
// DescribeGroups, FetchOffsets), and the consumers, which ran on through
// the crash, go on from their committed offsets with nothing skipped and
// nothing read again that a commit had covered.
func TestGroupsSurviveKillNine(t *testing.T) {
	const sessionTimeout = 6 * time.Second
	dir := t.TempDir()
	p := startProcess(t, dir,
		"group.initial.rebalance.delay.ms=0",
		"group.min.session.timeout.ms=100",
		"group.consumer.heartbeat.interval.ms=200",
		"group.consumer.session.timeout.ms="+strconv.Itoa(int(sessionTimeout.Milliseconds())))
	admin := client(t, p.addr)
	adm := kadm.NewClient(admin)
	createTopic(t, admin, "orders", 4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	producer := startProducer(t, p.addr, "orders", 4, 2*time.Millisecond)
	groups := map[string][]kgo.Opt{
		"payment":      {kgo.Balancers(kgo.RangeBalancer())},
		"inventory":    {kgo.Balancers(kgo.CooperativeStickyBalancer())},
		"notification": {kgo.ServerSideBalancer(), kgo.Balancers(kgo.CooperativeStickyBalancer())},
	}
	ledgers := map[string]*ledger{}
	for group, opts := range groups {
		ledgers[group] = &ledger{}
		startConsumer(t, p.addr, group, "orders", ledgers[group], append(opts, kgo.SessionTimeout(sessionTimeout))...)
	}
	var idle kadm.Offsets
	for part := int32(0); part < 4; part++ {
		idle.Add(kadm.Offset{Topic: "orders", Partition: part, At: 7, LeaderEpoch: -1})
	}
	if resp, err := adm.CommitOffsets(ctx, "audit", idle); err != nil || resp.Error() != nil {
		t.Fatalf("committing for the idle group: %v %v", err, resp.Error())
	}
	for group, l := range ledgers {
		poll.Until(t, 20*time.Second, group+" to commit on every partition", func() bool {
			return len(l.lastCommit()) == 4 && l.readCount() > 200
		})
	}

	// Every commit acknowledged before the kill must survive it.
	acknowledged := map[string]map[int32]int64{}
	for group, l := range ledgers {
		acknowledged[group] = l.lastCommit()
	}
	p.kill()
	p.restart()

	// The groups are all there.
	var listed kadm.ListedGroups
	poll.Until(t, 20*time.Second, "ListGroups to answer with every group", func() bool {
		var err error
		listed, err = adm.ListGroups(ctx)
		return err == nil && len(listed) == 4
	})
	for _, group := range []string{"payment", "inventory", "notification", "audit"} {
		if _, ok := listed[group]; !ok {
			t.Errorf("%s is not listed after the restart: %v", group, listed)
		}
	}
	if g := listed["notification"]; g.GroupType != "consumer" {
		t.Errorf("notification is listed as a %q group after the restart", g.GroupType)
	}
	described, err := adm.DescribeGroups(ctx, "payment", "inventory", "audit")
	if err != nil {
		t.Fatal(err)
	}
	for group, protocol := range map[string]string{"payment": "range", "inventory": "cooperative-sticky"} {
		g := described[group]
		if g.Err != nil || g.ProtocolType != "consumer" || g.State == "Dead" || g.State == "Stable" && g.Protocol != protocol {
			t.Errorf("%s is described after the restart as %+v", group, g)
		}
	}
	if g := described["audit"]; g.Err != nil || g.State != "Empty" {
		t.Errorf("audit is described after the restart as %+v", g)
	}
	if d, err := adm.DescribeConsumerGroups(ctx, "notification"); err != nil || d["notification"].Err != nil {
		t.Errorf("describing notification after the restart: %v %v", err, d["notification"].Err)
	}
	offsets, err := adm.FetchOffsets(ctx, "audit")
	if err != nil {
		t.Fatal(err)
	}
	for part := int32(0); part < 4; part++ {
		if o, _ := offsets.Lookup("orders", part); o.At != 7 {
			t.Errorf("audit's partition %d offset is %d after the restart; want 7", part, o.At)
		}
	}
	for group, acked := range acknowledged {
		offsets, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		for part, at := range acked {
			// The consumers may have committed more since.
			if o, _ := offsets.Lookup("orders", part); o.At < at {
				t.Errorf("%s's partition %d offset is %d after the restart; %d was acknowledged before the kill", group, part, o.At, at)
			}
		}
	}

	// The consumers go on.
	for group, l := range ledgers {
		before := l.readCount()
		poll.Until(t, 30*time.Second, group+" to read after the restart", func() bool { return l.readCount() > before+200 })
	}
	end := producer.stop(t, adm)
	for group, l := range ledgers {
		poll.Until(t, 30*time.Second, group+" to read every record", func() bool { return l.covers(end) })
		repeats := l.check(t, group, end)
		t.Logf("%s: %d records read, %d of them again (uncommitted when the broker died)", group, l.readCount(), repeats)
	}
}

// ledger records what one group's consumer read and which commits the
// broker acknowledged, in one order.
type ledger struct {
	mu      sync.Mutex
	clock   int64
	reads   []groupRead
	commits []groupCommit
}

type groupRead struct {
	partition int32
	offset    int64
	value     string
	at        int64
}

type groupCommit struct {
	partition int32
	offset    int64
	at        int64
}

func (l *ledger) read(r *kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	l.reads = append(l.reads, groupRead{r.Partition, r.Offset, string(r.Value), l.clock})
}

func (l *ledger) committed(next map[int32]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	for part, o := range next {
		l.commits = append(l.commits, groupCommit{part, o, l.clock})
	}
}

func (l *ledger) readCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reads)
}

func (l *ledger) lastCommit() map[int32]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int32]int64{}
	for _, c := range l.commits {
		out[c.partition] = max(out[c.partition], c.offset)
	}
	return out
}

func (l *ledger) covers(end map[int32]int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[int32]map[int64]bool{}
	for _, r := range l.reads {
		if seen[r.partition] == nil {
			seen[r.partition] = map[int64]bool{}
		}
		seen[r.partition][r.offset] = true
	}
	for part, e := range end {
		for o := int64(0); o < e; o++ {
			if !seen[part][o] {
				return false
			}
		}
	}
	return true
}

// check verifies that every offset below end was read, always as the same
// record, and that no record was read after an acknowledged commit covered
// it; it returns how many reads were repeats.
func (l *ledger) check(t *testing.T, group string, end map[int32]int64) (repeats int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	type po struct {
		p int32
		o int64
	}
	first := map[po]string{}
	committedTo := map[int32]int64{}
	c := 0
	for _, r := range l.reads {
		for ; c < len(l.commits) && l.commits[c].at < r.at; c++ {
			committedTo[l.commits[c].partition] = max(committedTo[l.commits[c].partition], l.commits[c].offset)
		}
		if r.offset < committedTo[r.partition] {
			t.Errorf("%s read partition %d offset %d after its commit of offset %d was acknowledged", group, r.partition, r.offset, committedTo[r.partition])
			return repeats
		}
		k := po{r.partition, r.offset}
		if v, ok := first[k]; ok {
			repeats++
			if v != r.value {
				t.Errorf("%s read partition %d offset %d as %q and as %q", group, r.partition, r.offset, v, r.value)
			}
			continue
		}
		first[k] = r.value
	}
	for part, e := range end {
		for o := int64(0); o < e; o++ {
			if _, ok := first[po{part, o}]; !ok {
				t.Errorf("%s never read partition %d offset %d", group, part, o)
				return repeats
			}
		}
	}
	return repeats
}

// startConsumer runs one group member that commits what it read after
// every poll, with rebalances held between poll and commit. Commits that
// fail while the broker is down are not recorded.
func startConsumer(t *testing.T, addr, group, topic string, l *ledger, opts ...kgo.Opt) {
	cl := client(t, addr, append([]kgo.Opt{
		kgo.ClientID(group), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.HeartbeatInterval(200 * time.Millisecond), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
	}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				cl.AllowRebalance()
				return
			}
			records := fs.Records()
			if len(records) > 0 {
				next := map[int32]int64{}
				for _, r := range records {
					l.read(r)
					next[r.Partition] = r.Offset + 1
				}
				if err := cl.CommitRecords(ctx, records...); err == nil {
					l.committed(next)
				} else if ctx.Err() == nil {
					t.Logf("%s: commit: %v", group, err)
				}
			}
			cl.AllowRebalance()
		}
	}()
	// Cleanups run last in, first out: the loop stops before the client
	// closes.
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// producer produces sequence-numbered records round-robin over a topic's
// partitions, one every interval, through the crash: the idempotent
// producer retries what was in flight.
type producer struct {
	cl      *kgo.Client
	next    atomic.Int64
	failed  atomic.Int64
	wg      sync.WaitGroup
	topic   string
	done    chan struct{}
	stopped chan struct{}
}

func startProducer(t *testing.T, addr, topic string, partitions int64, interval time.Duration) *producer {
	p := &producer{topic: topic, done: make(chan struct{}), stopped: make(chan struct{})}
	p.cl = client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	go func() {
		defer close(p.stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			seq := p.next.Add(1) - 1
			p.wg.Add(1)
			p.cl.Produce(context.Background(), &kgo.Record{Topic: topic, Partition: int32(seq % partitions), Value: []byte(fmt.Sprint(seq))}, func(_ *kgo.Record, err error) {
				if err != nil {
					p.failed.Add(1)
				}
				p.wg.Done()
			})
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			close(p.done)
		}
		<-p.stopped
	})
	return p
}

// stop stops producing, waits for every record to be acknowledged and
// returns the topic's end offsets.
func (p *producer) stop(t *testing.T, adm *kadm.Client) map[int32]int64 {
	t.Helper()
	close(p.done)
	<-p.stopped
	p.wg.Wait()
	if n := p.failed.Load(); n > 0 {
		t.Fatalf("%d of %d records failed to produce", n, p.next.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listed, err := adm.ListEndOffsets(ctx, p.topic)
	if err != nil {
		t.Fatal(err)
	}
	end := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	var total int64
	for _, e := range end {
		total += e
	}
	if total != p.next.Load() {
		t.Errorf("the topic holds %d records, %d were produced", total, p.next.Load())
	}
	return end
}
