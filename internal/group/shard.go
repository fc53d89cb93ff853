package group

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/strata-io/strata/internal/record"
)

// errUnloaded completes writes and waiters of a shard that stopped being
// loaded; it maps to NOT_COORDINATOR.
var errUnloaded = errors.New("group: __consumer_offsets partition unloaded")

type shardStatus uint8

const (
	shardLoading  shardStatus = iota // replaying; requests get COORDINATOR_LOAD_IN_PROGRESS
	shardActive                      // serving
	shardUnloaded                    // leadership lost or coordinator closed; NOT_COORDINATOR
	shardFailed                      // replay failed; NOT_COORDINATOR
)

// shardState is the data a shard's replay builds and its state machine
// mutates: groups and committed offsets.
type shardState struct {
	groups  map[string]*group
	offsets map[string]*groupOffsets
	// pendingTxns are the transactional offset commits not yet decided,
	// by producer id (txn.go).
	pendingTxns map[int64]*pendingTxn
}

func newShardState() shardState {
	return shardState{groups: make(map[string]*group), offsets: make(map[string]*groupOffsets),
		pendingTxns: make(map[int64]*pendingTxn)}
}

// group is one group id's state: exactly one of classic and consumer is set.
type group struct {
	classic  *classicGroup
	consumer *consumerGroup
}

// Group types, as ListGroups and ConsumerGroupDescribe name them.
const (
	groupTypeClassic  = "classic"
	groupTypeConsumer = "consumer"
)

func (g *group) typeName() string {
	if g.consumer != nil {
		return groupTypeConsumer
	}
	return groupTypeClassic
}

func (g *group) stateName() string {
	if g.consumer != nil {
		return g.consumer.state().String()
	}
	return g.classic.state.String()
}

// isEmpty is Kafka's Group.isEmpty: no members (a classic group in Empty).
func (g *group) isEmpty() bool {
	if g.consumer != nil {
		return len(g.consumer.members) == 0
	}
	return g.classic.state == classicEmpty
}

// write is records queued for the partition and what to do once the append
// is over. done runs with the shard's mutex held, in log order, with nil
// once the records are committed or with the append's error.
type write struct {
	records []kv
	size    int
	done    func(err error)
	// txn is the producer whose transaction the records belong to (a
	// TxnOffsetCommit), nil for the coordinator's own records; writes of
	// different producers never share a batch.
	txn *txnProducer
}

// shard is one loaded __consumer_offsets partition. Its fields below mu are
// guarded by mu; see the package doc for the lock order.
type shard struct {
	c         *Coordinator
	partition int32
	log       OffsetsPartition
	ctx       context.Context // canceled by unload; bounds Append and replay
	cancel    context.CancelFunc
	loaded    chan struct{} // closed when replay ends, however it ends

	mu     sync.Mutex
	status shardStatus
	shardState
	now     time.Time // the time of the event being handled
	timers  *timers
	queue   []*write
	wake    chan struct{}
	armed   Timer
	armedAt time.Time
	armSeq  uint64
}

func newShard(c *Coordinator, partition int32, p OffsetsPartition) *shard {
	ctx, cancel := context.WithCancel(context.Background())
	return &shard{
		c:          c,
		partition:  partition,
		log:        p,
		ctx:        ctx,
		cancel:     cancel,
		loaded:     make(chan struct{}),
		status:     shardLoading,
		shardState: newShardState(),
		timers:     newTimers(),
		wake:       make(chan struct{}, 1),
	}
}

func (s *shard) logger() *slog.Logger { return s.c.log.With("partition", s.partition) }

// load replays the partition and, unless the shard was unloaded meanwhile,
// starts serving it.
func (s *shard) load() {
	defer close(s.loaded)
	st := newShardState()
	now := s.c.clock.Now()
	var replayErr error
	err := s.log.ReadBatches(0, func(batch []byte) bool {
		if s.ctx.Err() != nil {
			return false
		}
		replayErr = decodeBatch(batch, func(k, v []byte) error { return st.replayRecord(k, v, now) },
			func(h record.Header, b []byte) error { return st.replayTxnBatch(h, b, now) })
		return replayErr == nil
	})
	if err == nil {
		err = replayErr
	}
	s.mu.Lock()
	defer s.unlockEvent()
	if s.status != shardLoading {
		return
	}
	if err != nil {
		s.status = shardFailed
		s.logger().Error("loading group coordinator partition failed", "err", err)
		return
	}
	s.shardState = st
	s.status = shardActive
	s.now = s.c.clock.Now()
	s.onLoaded()
	s.logger().Info("loaded group coordinator partition", "groups", len(s.groups))
	go s.writeLoop()
}

// onLoaded is Kafka's GroupMetadataManager.onLoaded: loaded classic members
// get a fresh session, and the offset expiration starts.
func (s *shard) onLoaded() {
	for _, id := range sortedKeys(s.groups) {
		cg := s.groups[id].classic
		if cg == nil {
			continue
		}
		for _, mid := range cg.sortedMemberIDs() {
			s.rescheduleClassicHeartbeat(cg, cg.members[mid], cg.members[mid].sessionTimeoutMs)
		}
		if int32(len(cg.members)) > s.c.cfg.MaxSize {
			s.append(s.prepareRebalance(cg, "group size above group.max.size after load"))
		}
	}
	s.scheduleOffsetsCleanup()
}

// unload stops serving the shard: queued and in-flight writes and parked
// JoinGroup and SyncGroup requests are answered NOT_COORDINATOR, deadlines
// are dropped.
func (s *shard) unload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == shardUnloaded {
		return
	}
	s.status = shardUnloaded
	s.cancel()
	queued := s.queue
	s.queue = nil
	for _, w := range queued {
		if w.done != nil {
			w.done(errUnloaded)
		}
	}
	for _, g := range s.groups {
		if g.classic != nil {
			g.classic.completeAllJoins(errCode(errUnloaded))
			g.classic.completeAllSyncs(errCode(errUnloaded))
		}
	}
	s.timers = newTimers()
	if s.armed != nil {
		s.armed.Stop()
		s.armed = nil
	}
	s.shardState = newShardState()
}

// lockEvent takes the mutex for one event and fixes its time. It reports
// the error code a request gets when the shard is not serving.
func (s *shard) lockEvent() int16 {
	s.mu.Lock()
	switch s.status {
	case shardActive:
		s.now = s.c.clock.Now()
		return 0
	case shardLoading:
		s.mu.Unlock()
		return codeLoadInProgress
	default:
		s.mu.Unlock()
		return codeNotCoordinator
	}
}

// unlockEvent ends an event: it re-arms the clock for the earliest
// deadline, wakes the writer if records were queued, and unlocks.
func (s *shard) unlockEvent() {
	s.rearm()
	if len(s.queue) > 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

// append queues records, and done to run once they are committed or have
// failed. With no records, done still waits for earlier writes, so
// completions keep log order. On a shard no longer serving, done runs at
// once with errUnloaded.
func (s *shard) append(r result) {
	if len(r.records) == 0 && r.done == nil {
		return
	}
	if s.status != shardActive {
		if r.done != nil {
			r.done(errUnloaded)
		}
		return
	}
	size := 0
	for _, kv := range r.records {
		size += len(kv.key) + len(kv.value) + 16
	}
	s.queue = append(s.queue, &write{records: r.records, size: size, done: r.done, txn: r.txn})
}

// writeLoop appends queued writes one batch at a time, coalescing what
// queued up while the previous append was in flight (group commit).
func (s *shard) writeLoop() {
	for {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return
		}
		for s.writeOnce() {
		}
	}
}

func (s *shard) writeOnce() bool {
	s.mu.Lock()
	if s.status != shardActive || len(s.queue) == 0 {
		s.mu.Unlock()
		return false
	}
	var records []kv
	n, size := 0, 0
	txn := s.queue[0].txn
	for n < len(s.queue) {
		w := s.queue[n]
		if n > 0 && (size+w.size > s.c.cfg.MaxAppendBytes || w.txn != txn) {
			break
		}
		size += w.size
		records = append(records, w.records...)
		n++
	}
	ws := append([]*write(nil), s.queue[:n]...)
	s.queue = s.queue[n:]
	now := s.c.clock.Now()
	s.mu.Unlock()

	var err error
	if len(records) > 0 {
		ctx, cancel := context.WithTimeout(s.ctx, ms(s.c.cfg.OffsetCommitTimeoutMs))
		err = s.log.Append(ctx, encodeBatch(records, now, txn))
		cancel()
	}

	s.mu.Lock()
	if s.status != shardActive {
		err = errUnloaded
	} else {
		s.now = s.c.clock.Now()
	}
	if err != nil && !errors.Is(err, errUnloaded) {
		s.logger().Warn("appending to __consumer_offsets failed", "records", len(records), "err", err)
	}
	for _, w := range ws {
		if w.done != nil {
			w.done(err)
		}
	}
	s.unlockEvent()
	return true
}

// rearm points the clock timer at the earliest deadline.
func (s *shard) rearm() {
	at, ok := s.timers.next()
	if s.status != shardActive || !ok {
		if s.armed != nil {
			s.armed.Stop()
			s.armed = nil
		}
		return
	}
	if s.armed != nil && s.armedAt.Equal(at) {
		return
	}
	if s.armed != nil {
		s.armed.Stop()
	}
	s.armSeq++
	seq := s.armSeq
	d := at.Sub(s.c.clock.Now())
	if d < 0 {
		d = 0
	}
	s.armedAt = at
	s.armed = s.c.clock.AfterFunc(d, func() { s.fire(seq) })
}

// fire runs every deadline due now.
func (s *shard) fire(seq uint64) {
	s.mu.Lock()
	if s.status != shardActive || seq != s.armSeq {
		s.mu.Unlock()
		return
	}
	s.armed = nil
	s.now = s.c.clock.Now()
	s.runDue()
	s.unlockEvent()
}

// runDue runs the deadlines due at s.now, including ones they schedule.
func (s *shard) runDue() {
	for e := s.timers.popDue(s.now); e != nil; e = s.timers.popDue(s.now) {
		e.fn()
	}
}

// result is what a state machine step produces besides its direct
// response: records to append and a completion (Kafka's CoordinatorResult).
type result struct {
	records []kv
	done    func(err error)
	// txn is set for a TxnOffsetCommit's records; such a result is never
	// joined with another (and).
	txn *txnProducer
}

func (r result) empty() bool { return len(r.records) == 0 && r.done == nil }

// and returns r followed by o, so both steps' records go in one append.
func (r result) and(o result) result {
	if r.empty() {
		return o
	}
	if o.empty() {
		return r
	}
	rd, od := r.done, o.done
	return result{
		records: append(append([]kv(nil), r.records...), o.records...),
		done: func(err error) {
			if rd != nil {
				rd(err)
			}
			if od != nil {
				od(err)
			}
		},
	}
}

// deliver sends a response to a waiting request; the channel has room for
// one, and a second response to the same request is dropped.
func deliver[T any](ch chan T, v T) {
	if ch == nil {
		return
	}
	select {
	case ch <- v:
	default:
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
