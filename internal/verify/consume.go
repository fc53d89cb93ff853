package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// maxErrorEvents bounds the fetch errors kept per consumer (a dead broker
// can fail fetches for as long as the run lasts); later ones are counted
// only.
const maxErrorEvents = 1000

// fetchMaxWait is how long a fetch waits for records: short, so that the
// drain and the final read notice the end soon.
const fetchMaxWait = 500 * time.Millisecond

// consumerLog is one consumer's events. The poll loop and franz-go's
// rebalance callbacks append; mu guards events, errors and next.
type consumerLog struct {
	name, kind string
	topic      string // Consumer.Topic

	mu     sync.Mutex
	events []Event
	errors int
	next   map[int32]int64 // partition -> highest offset read + 1
}

func newConsumerLog(name, kind string) *consumerLog {
	return &consumerLog{name: name, kind: kind, next: map[int32]int64{}}
}

func (l *consumerLog) add(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Type {
	case EventError:
		if l.errors++; l.errors > maxErrorEvents {
			return
		}
	case EventPoll:
		l.next[e.Partition] = max(l.next[e.Partition], e.Offset+1)
	}
	l.events = append(l.events, e)
}

// advance notes that the reader of p got to next without a record to log.
func (l *consumerLog) advance(p int32, next int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next[p] = max(l.next[p], next)
}

// readTo is the highest offset read in partition p, plus one.
func (l *consumerLog) readTo(p int32) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next[p]
}

func (l *consumerLog) consumer() Consumer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Consumer{Name: l.name, Kind: l.kind, Topic: l.topic, Events: slices.Clone(l.events)}
}

// startAssigned starts a consumer assigned every partition from its
// start.
func (r *runner) startAssigned(ctx context.Context, wg *sync.WaitGroup, name string) (*consumerLog, error) {
	offsets := map[int32]kgo.Offset{}
	for _, p := range partitionsOf(r.cfg.Partitions) {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl, err := r.client(append(r.isolation(),
		kgo.ClientID("strata-verify-"+name),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: offsets}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(fetchMaxWait),
	)...)
	if err != nil {
		return nil, fmt.Errorf("verify: starting consumer %s: %w", name, err)
	}
	log := newConsumerLog(name, KindAssigned)
	log.add(Event{Type: EventAssigned, Nanos: r.since(), Partitions: partitionsOf(r.cfg.Partitions)})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cl.Close()
		r.consume(ctx, cl, log, false)
	}()
	return log, nil
}

// startGroup starts a member of the run's consumer group. Rebalances are
// held off while a poll's records are logged (BlockRebalanceOnPoll), so
// that assignments and reads are logged in the order they happened.
func (r *runner) startGroup(ctx context.Context, wg *sync.WaitGroup, name, group string) (*consumerLog, error) {
	log := newConsumerLog(name, KindGroup)
	changed := func(typ string, m map[string][]int32) {
		if ps := slices.Sorted(slices.Values(m[r.topic])); len(ps) > 0 {
			log.add(Event{Type: typ, Nanos: r.since(), Partitions: ps})
		}
	}
	cl, err := r.client(
		kgo.ClientID("strata-verify-"+name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(r.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { changed(EventAssigned, m) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			changed(EventRevoked, m)
			// What was polled is logged: commit it, so the next owner
			// starts where this one stopped (it re-reads otherwise, which
			// is allowed, but wasteful).
			_ = cl.CommitUncommittedOffsets(ctx)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { changed(EventRevoked, m) }),
	)
	if err != nil {
		return nil, fmt.Errorf("verify: starting consumer %s: %w", name, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cl.Close()
		r.consume(ctx, cl, log, true)
	}()
	return log, nil
}

// consume logs every record and fetch error until ctx ends.
func (r *runner) consume(ctx context.Context, cl *kgo.Client, log *consumerLog, group bool) {
	for {
		fetches := cl.PollFetches(ctx)
		r.logFetches(fetches, log)
		if group {
			cl.AllowRebalance()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (r *runner) logFetches(fetches kgo.Fetches, log *consumerLog) {
	now := r.since()
	fetches.EachError(func(_ string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrClientClosed) {
			return
		}
		r.counters.errors.Add(1)
		log.add(Event{Type: EventError, Nanos: now, Partition: p, Error: err.Error()})
	})
	fetches.EachRecord(func(rec *kgo.Record) {
		if rec.Attrs.IsControl() {
			// A transaction marker (kgo.KeepControlRecords): not a
			// record read, but how far the reader got.
			log.advance(rec.Partition, rec.Offset+1)
			return
		}
		r.counters.polled.Add(1)
		log.add(Event{Type: EventPoll, Nanos: now, Partition: rec.Partition, Offset: rec.Offset, Value: string(rec.Value),
			ProducerID: rec.ProducerID, ProducerEpoch: rec.ProducerEpoch})
	})
}

// drain waits, up to DrainTimeout, until every assigned consumer has read
// every partition to its end, and the group together has.
func (r *runner) drain(consumers []*consumerLog, starts, ends map[int32]int64) {
	caughtUp := func() bool {
		for _, p := range sortedPartitions(ends) {
			if ends[p] <= starts[p] {
				continue
			}
			var group int64 = -1
			for _, c := range consumers {
				switch c.kind {
				case KindAssigned:
					if c.readTo(p) < ends[p] {
						return false
					}
				case KindGroup:
					group = max(group, c.readTo(p))
				}
			}
			if group >= 0 && group < ends[p] {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	for !caughtUp() {
		if time.Now().After(deadline) {
			r.say("the consumers had not caught up after %s", r.cfg.DrainTimeout)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finalRead reads every partition from starts to ends with a new consumer.
// It gives up when DrainTimeout passes without a record.
// The run's topic's final read is "final"; the output topic's (topic is
// then the output topic) is "final-output".
func (r *runner) finalRead(ctx context.Context, topic string, starts, ends map[int32]int64) (*consumerLog, []FinalRead, error) {
	name, readTopic := "final", ""
	if topic != r.topic {
		name, readTopic = "final-output", topic
	}
	log := newConsumerLog(name, KindFinal)
	log.topic = readTopic
	var reads []FinalRead
	offsets := map[int32]kgo.Offset{}
	for _, p := range sortedPartitions(ends) {
		fr := FinalRead{Topic: readTopic, Partition: p, Start: starts[p], End: ends[p], Reached: ends[p] <= starts[p]}
		reads = append(reads, fr)
		if !fr.Reached {
			offsets[p] = kgo.NewOffset().At(starts[p])
		}
	}
	log.add(Event{Type: EventAssigned, Nanos: r.since(), Partitions: sortedPartitions(offsets)})
	if len(offsets) == 0 {
		return log, reads, nil
	}
	cl, err := r.client(append(r.isolation(),
		kgo.ClientID("strata-verify-"+name),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(fetchMaxWait),
	)...)
	if err != nil {
		return nil, reads, err
	}
	defer cl.Close()
	lastProgress := time.Now()
	for {
		pending := 0
		for i := range reads {
			fr := &reads[i]
			if !fr.Reached && log.readTo(fr.Partition) >= fr.End {
				fr.Reached = true
			}
			if !fr.Reached {
				pending++
			}
		}
		if pending == 0 {
			return log, reads, nil
		}
		if time.Since(lastProgress) > r.cfg.DrainTimeout {
			return log, reads, fmt.Errorf("no record for %s with %d partition(s) not read to their end", r.cfg.DrainTimeout, pending)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		if fetches.NumRecords() > 0 {
			lastProgress = time.Now()
		}
		r.logFetches(fetches, log)
	}
}
