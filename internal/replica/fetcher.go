package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Client sends requests to one broker. Implementations pick the version
// both ends support. It must be safe for use by one goroutine at a time.
type Client interface {
	Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error)
}

// FetcherConfig are the replica fetchers' settings, with Kafka's keys.
type FetcherConfig struct {
	ReplicaID int32 // this broker's node.id
	// MaxBytes is replica.fetch.max.bytes (1 MiB): per partition (the
	// first batch is returned whole even if larger).
	MaxBytes int32
	// MinBytes is replica.fetch.min.bytes (1) and MaxWait
	// replica.fetch.wait.max.ms (500 ms): the leader answers once it has
	// MinBytes or after MaxWait.
	MinBytes int32
	MaxWait  time.Duration
	// ResponseMaxBytes is replica.fetch.response.max.bytes (10 MiB).
	ResponseMaxBytes int32
	// Backoff is replica.fetch.backoff.ms (1 s): the pause after an error.
	Backoff time.Duration
	// Timeout bounds one request beyond MaxWait
	// (replica.socket.timeout.ms, 30 s).
	Timeout time.Duration
	// Quota is follower.replication.throttled.rate: while it is exceeded,
	// partitions that are FollowerThrottled are not fetched, and what they
	// fetch counts towards it. Nil: none.
	Quota  *Quota
	Logger *slog.Logger
}

// Fetcher replicates, from one source broker, every partition this broker
// follows there: one goroutine, one Fetch request at a time for all of
// them (Kafka's ReplicaFetcherThread). Partitions are added and removed as
// leadership changes; a partition whose leader is no longer the source, or
// that leads, is skipped.
type Fetcher struct {
	source int32
	client Client
	cfg    FetcherConfig

	mu sync.Mutex
	// partitions are the partitions fetched from source; mu guards them.
	partitions map[*Partition]*fetchedPartition
	// wake is signalled when partitions change, to end a pause.
	wake chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// fetchedPartition is a partition as one fetcher sees it.
type fetchedPartition struct {
	topicID [16]byte
	// delayedUntil holds the partition back after an error that the next
	// metadata should resolve (a leader change); zero when fetching.
	delayedUntil time.Time
}

// StartFetcher starts a fetcher from source over client. Stop ends it.
func StartFetcher(source int32, client Client, cfg FetcherConfig) *Fetcher {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fetcher{source: source, client: client, cfg: cfg, partitions: map[*Partition]*fetchedPartition{},
		wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go f.run(ctx)
	return f
}

// Add has the fetcher replicate p, whose topic has id topicID (Fetch
// v13+ names topics by id).
func (f *Fetcher) Add(p *Partition, topicID [16]byte) {
	f.mu.Lock()
	f.partitions[p] = &fetchedPartition{topicID: topicID}
	f.mu.Unlock()
	f.signal()
}

// Remove stops replicating p. A fetch under way may still append to it,
// which the leader epoch check in AppendAsFollower refuses once p changed
// role.
func (f *Fetcher) Remove(p *Partition) {
	f.mu.Lock()
	delete(f.partitions, p)
	f.mu.Unlock()
	f.signal()
}

// Len returns how many partitions the fetcher replicates.
func (f *Fetcher) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.partitions)
}

// Stop ends the fetcher and waits for its goroutine.
func (f *Fetcher) Stop() {
	f.cancel()
	<-f.done
}

func (f *Fetcher) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *Fetcher) run(ctx context.Context) {
	defer close(f.done)
	for ctx.Err() == nil {
		req, parts, next := f.request()
		if req == nil {
			f.pause(ctx, next)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, f.cfg.MaxWait+f.cfg.Timeout)
		resp, err := f.client.Request(rctx, req)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				f.cfg.Logger.Warn("replica fetch failed", "source", f.source, "err", err)
				f.pause(ctx, time.Now().Add(f.cfg.Backoff))
			}
			continue
		}
		f.handle(ctx, resp.(*kmsg.FetchResponse), parts)
	}
}

// pause waits until until (zero: until woken), a change of partitions or
// the end.
func (f *Fetcher) pause(ctx context.Context, until time.Time) {
	var timer <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
	case <-f.wake:
	case <-timer:
	}
}

// throttleRecheck is how soon a partition held back by the follower's
// replication throttle is looked at again.
const throttleRecheck = 100 * time.Millisecond

// fetchKey names a partition in a request and its response.
type fetchKey struct {
	topicID   [16]byte
	partition int32
}

// request builds one Fetch request for every partition ready to fetch. It
// returns nil, and when the next delayed partition is due, when none is.
func (f *Fetcher) request() (*kmsg.FetchRequest, map[fetchKey]fetchTarget, time.Time) {
	now := time.Now()
	var next time.Time
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = f.cfg.ReplicaID
	req.ReplicaState.ID = f.cfg.ReplicaID
	req.MaxWaitMillis = int32(f.cfg.MaxWait.Milliseconds())
	req.MinBytes, req.MaxBytes = f.cfg.MinBytes, f.cfg.ResponseMaxBytes
	req.SessionEpoch = -1 // no fetch session: every request is full
	parts := map[fetchKey]fetchTarget{}
	topics := map[[16]byte]int{}
	throttled := f.cfg.Quota != nil && f.cfg.Quota.Exceeded(now)
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, fp := range f.partitions {
		if now.Before(fp.delayedUntil) {
			if next.IsZero() || fp.delayedUntil.Before(next) {
				next = fp.delayedUntil
			}
			continue
		}
		if throttled && p.FollowerThrottled() {
			// Held back until the rate falls under the bound (Kafka's
			// shouldFollowerThrottle); looked at again shortly.
			if again := now.Add(throttleRecheck); next.IsZero() || again.Before(next) {
				next = again
			}
			f.cfg.Quota.NoteHeldBack()
			continue
		}
		pos := p.FetchPosition()
		if !pos.Following || pos.Leader != f.source {
			continue
		}
		i, ok := topics[fp.topicID]
		if !ok {
			t := kmsg.NewFetchRequestTopic()
			t.Topic, t.TopicID = p.Topic, fp.topicID
			req.Topics = append(req.Topics, t)
			i = len(req.Topics) - 1
			topics[fp.topicID] = i
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p.Index
		rp.CurrentLeaderEpoch = pos.LeaderEpoch
		rp.FetchOffset = pos.FetchOffset
		rp.LastFetchedEpoch = pos.LastFetchedEpoch
		rp.LogStartOffset = pos.LogStartOffset
		rp.PartitionMaxBytes = f.cfg.MaxBytes
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		parts[fetchKey{fp.topicID, p.Index}] = fetchTarget{p: p, epoch: pos.LeaderEpoch}
	}
	if len(parts) == 0 {
		return nil, nil, next
	}
	return req, parts, time.Time{}
}

// fetchTarget is a partition in a request, at the leader epoch fetched.
type fetchTarget struct {
	p     *Partition
	epoch int32
}

// handle applies a Fetch response to the partitions it answers.
func (f *Fetcher) handle(ctx context.Context, resp *kmsg.FetchResponse, parts map[fetchKey]fetchTarget) {
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		f.cfg.Logger.Warn("replica fetch refused", "source", f.source, "err", err)
		f.pause(ctx, time.Now().Add(f.cfg.Backoff))
		return
	}
	byName := map[string][16]byte{}
	for k, t := range parts {
		byName[t.p.Topic] = k.topicID
	}
	for _, rt := range resp.Topics {
		id := rt.TopicID
		if id == ([16]byte{}) {
			id = byName[rt.Topic] // before v13, topics are named
		}
		for i := range rt.Partitions {
			rp := &rt.Partitions[i]
			t, ok := parts[fetchKey{id, rp.Partition}]
			if !ok {
				continue
			}
			if err := f.apply(ctx, t, rp); err != nil {
				f.delay(t.p, err)
			}
		}
	}
}

// apply takes one partition's answer: records to append, a divergence to
// truncate, or an error.
func (f *Fetcher) apply(ctx context.Context, t fetchTarget, rp *kmsg.FetchResponseTopicPartition) error {
	p := t.p
	switch err := kerr.ErrorForCode(rp.ErrorCode); {
	case errors.Is(err, kerr.OffsetOutOfRange):
		return f.reset(ctx, t)
	case err != nil:
		return err
	}
	if d := rp.DivergingEpoch; d.EndOffset >= 0 && d.Epoch >= 0 {
		_, err := p.TruncateToDivergence(t.epoch, EpochEndOffset{Epoch: d.Epoch, EndOffset: d.EndOffset})
		return err
	}
	if len(rp.RecordBatches) > 0 {
		if f.cfg.Quota != nil && p.FollowerThrottled() {
			f.cfg.Quota.Record(time.Now(), int64(len(rp.RecordBatches)))
		}
		if _, err := p.AppendAsFollower(t.epoch, rp.RecordBatches); err != nil {
			return err
		}
	}
	p.SetLeaderHighWatermark(rp.HighWatermark)
	return nil
}

// reset asks the leader for its log start and end offsets and brings the
// partition back in range (Kafka's handleOutOfRangeError).
func (f *Fetcher) reset(ctx context.Context, t fetchTarget) error {
	var offsets [2]int64
	for i, ts := range []int64{EarliestTimestamp, LatestTimestamp} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = f.cfg.ReplicaID
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t.p.Topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = t.p.Index, t.epoch, ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		rctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
		resp, err := f.client.Request(rctx, req)
		cancel()
		if err != nil {
			return err
		}
		r := resp.(*kmsg.ListOffsetsResponse)
		if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
			return fmt.Errorf("replica: ListOffsets answered %d topics", len(r.Topics))
		}
		sp := r.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(sp.ErrorCode); err != nil {
			return err
		}
		offsets[i] = sp.Offset
	}
	_, err := t.p.ResetToLeader(t.epoch, offsets[0], offsets[1])
	return err
}

// leaderCatchUpBackoff is the pause after an answer that says the source
// has not applied the leadership change this replica knows of yet
// (UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER): it will in a moment, and
// until it does the partition's high watermark cannot move, so the
// fetcher asks again sooner than replica.fetch.backoff.ms.
const leaderCatchUpBackoff = 20 * time.Millisecond

// delay holds a partition back for the backoff after an error.
func (f *Fetcher) delay(p *Partition, err error) {
	f.cfg.Logger.Info("replica fetch of a partition failed", "source", f.source, "topic", p.Topic, "partition", p.Index, "err", err)
	backoff := f.cfg.Backoff
	if errors.Is(err, kerr.UnknownLeaderEpoch) || errors.Is(err, kerr.NotLeaderForPartition) {
		backoff = min(backoff, leaderCatchUpBackoff)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fp, ok := f.partitions[p]; ok {
		fp.delayedUntil = time.Now().Add(backoff)
	}
}
