package group

import (
	"log/slog"
	"sort"
	"time"

	"github.com/strata-io/strata/internal/coordinator"
	"github.com/strata-io/strata/internal/record"
)

// data is the data a shard's replay builds and its state machine
// mutates: groups and committed offsets.
type data struct {
	groups  map[string]*group
	offsets map[string]*groupOffsets
	// pendingTxns are the transactional offset commits not yet decided,
	// by producer id (txn.go).
	pendingTxns map[int64]*pendingTxn
}

func newData() data {
	return data{groups: make(map[string]*group), offsets: make(map[string]*groupOffsets),
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

// state is one __consumer_offsets partition's groups and offsets and the
// protocol logic over them (classic.go, consumer.go, offsets.go, admin.go,
// txn.go): the coordinator.Machine the runtime runs. It does no I/O and
// reads no clock: the runtime gives it the time of each event (now), and
// its effects are data, records to append (out) and deadlines (timers);
// responses go to buffered channels the request handlers wait on.
type state struct {
	data
	cfg       *Config
	topics    TopicMetadata
	log       *slog.Logger
	partition int32
	now       time.Time // the time of the event being handled
	timers    *timers
	out       []coordinator.Write
	// uuid is the source of new member ids: random, or a sequence in
	// scripted tests.
	uuid func() [16]byte
}

func (c *Coordinator) newState(partition int32) *state {
	s := &state{data: newData(), cfg: &c.cfg, topics: c.topics, log: c.log, partition: partition, uuid: randomUUID}
	s.timers = &timers{set: coordinator.NewTimers(), now: &s.now}
	return s
}

func (s *state) logger() *slog.Logger { return s.log.With("partition", s.partition) }

// Replay applies one batch of the partition: Kafka's
// GroupCoordinatorShard.replay.
func (s *state) Replay(batch []byte, now time.Time) error {
	return decodeBatch(batch, func(k, v []byte) error { return s.replayRecord(k, v, now) },
		func(h record.Header, b []byte) error { return s.replayTxnBatch(h, b, now) })
}

// SetTime fixes the time of the event about to run.
func (s *state) SetTime(now time.Time) { s.now = now }

// TakeWrites hands the queued records to the runtime.
func (s *state) TakeWrites() []coordinator.Write {
	out := s.out
	s.out = nil
	return out
}

// Deadlines is the state's deadline set.
func (s *state) Deadlines() *coordinator.Timers { return s.timers.set }

// onLoaded is Kafka's GroupMetadataManager.onLoaded: loaded classic members
// get a fresh session, and the offset expiration starts.
func (s *state) onLoaded() {
	for _, id := range sortedKeys(s.groups) {
		cg := s.groups[id].classic
		if cg == nil {
			continue
		}
		for _, mid := range cg.sortedMemberIDs() {
			s.rescheduleClassicHeartbeat(cg, cg.members[mid], cg.members[mid].sessionTimeoutMs)
		}
		if int32(len(cg.members)) > s.cfg.MaxSize {
			s.append(s.prepareRebalance(cg, "group size above group.max.size after load"))
		}
	}
	s.scheduleOffsetsCleanup()
	s.logger().Info("loaded group coordinator partition", "groups", len(s.groups))
}

// onUnloaded answers parked JoinGroup and SyncGroup requests
// NOT_COORDINATOR and drops the groups and deadlines.
func (s *state) onUnloaded() {
	for _, g := range s.groups {
		if g.classic != nil {
			g.classic.completeAllJoins(errCode(coordinator.ErrUnloaded))
			g.classic.completeAllSyncs(errCode(coordinator.ErrUnloaded))
		}
	}
	s.timers.set = coordinator.NewTimers()
	s.data = newData()
}

// append queues a step's records, and its completion to run once they are
// committed or have failed. With no records, done still waits for earlier
// writes, so completions keep log order.
func (s *state) append(r result) {
	if len(r.records) == 0 && r.done == nil {
		return
	}
	w := coordinator.Write{Records: make([]coordinator.Record, len(r.records)), Done: r.done}
	for i, kv := range r.records {
		w.Records[i] = coordinator.Record{Key: kv.key, Value: kv.value}
	}
	if r.txn != nil {
		w.Producer = &coordinator.Producer{ID: r.txn.id, Epoch: r.txn.epoch}
	}
	s.out = append(s.out, w)
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
