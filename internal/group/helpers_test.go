package group

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/coordinator/coordinatortest"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// fakeClock is the Clock the tests advance; due functions run
// synchronously in Advance, in deadline order.
type fakeClock = coordinatortest.ManualClock

func newFakeClock() *fakeClock {
	return coordinatortest.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
}

// memPartition is a coordinator.Partition over an in-memory log of real
// encoded batches.
type memPartition = coordinatortest.MemPartition

// records decodes every record in p's log.
func records(t *testing.T, p *memPartition) []kv {
	t.Helper()
	var out []kv
	err := p.ReadBatches(0, func(b []byte) bool {
		if err := decodeBatch(b, func(k, v []byte) error {
			out = append(out, kv{append([]byte(nil), k...), append([]byte(nil), v...)})
			if v == nil {
				out[len(out)-1].value = nil
			}
			return nil
		}, func(record.Header, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// staticTopics is a fixed TopicMetadata.
type staticTopics struct {
	mu     sync.Mutex
	byName map[string]TopicInfo
}

func newTopics(ts ...TopicInfo) *staticTopics {
	st := &staticTopics{byName: make(map[string]TopicInfo)}
	for _, t := range ts {
		st.byName[t.Name] = t
	}
	return st
}

func topic(name string, partitions int32) TopicInfo {
	var id [16]byte
	copy(id[:], name)
	id[15] = 1
	return TopicInfo{Name: name, ID: id, Partitions: partitions}
}

func (st *staticTopics) set(t TopicInfo) {
	st.mu.Lock()
	st.byName[t.Name] = t
	st.mu.Unlock()
}

func (st *staticTopics) TopicByName(name string) (TopicInfo, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	t, ok := st.byName[name]
	return t, ok
}

func (st *staticTopics) TopicByID(id [16]byte) (TopicInfo, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, t := range st.byName {
		if t.ID == id {
			return t, true
		}
	}
	return TopicInfo{}, false
}

func (st *staticTopics) Topics() []TopicInfo {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]TopicInfo, 0, len(st.byName))
	for _, t := range st.byName {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// harness is a Coordinator with every partition loaded from memPartitions,
// a fake clock, and topics.
type harness struct {
	t      *testing.T
	c      *Coordinator
	clock  *fakeClock
	topics *staticTopics
	parts  []*memPartition
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("GROUP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func newHarness(t *testing.T, mod func(*Config), topics ...TopicInfo) *harness {
	t.Helper()
	cfg := DefaultConfig()
	cfg.OffsetsTopicNumPartitions = 3
	if mod != nil {
		mod(&cfg)
	}
	h := &harness{t: t, clock: newFakeClock(), topics: newTopics(topics...)}
	h.c = NewCoordinator(cfg, Deps{Clock: h.clock, Topics: h.topics, Logger: testLogger(t)})
	for p := int32(0); p < cfg.OffsetsTopicNumPartitions; p++ {
		mp := &memPartition{}
		h.parts = append(h.parts, mp)
		h.load(p, mp)
	}
	t.Cleanup(h.c.Close)
	return h
}

// load loads partition p from mp and waits for the replay to end.
func (h *harness) load(p int32, mp *memPartition) {
	h.t.Helper()
	h.c.Load(p, mp)
	s, err := h.c.rt.Shard(p)
	if err != nil {
		h.t.Fatal(err)
	}
	select {
	case <-s.Loaded():
	case <-time.After(5 * time.Second):
		h.t.Fatalf("partition %d did not load", p)
	}
}

// partitionOf is the memPartition a group's records go to.
func (h *harness) partitionOf(group string) *memPartition {
	return h.parts[h.c.HashPartition(group)]
}

// shard runs fn with the group's shard locked.
func (h *harness) shard(group string, fn func(s *state)) {
	h.t.Helper()
	sh, err := h.c.rt.Acquire(h.c.HashPartition(group))
	if err != nil {
		h.t.Fatal(err)
	}
	defer sh.Release()
	fn(sh.Machine())
}

// eventually polls cond until it holds or five seconds pass.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	poll.Until(h.t, 5*time.Second, what, cond)
}

// idle waits until every shard's write queue is drained.
func (h *harness) idle() {
	h.t.Helper()
	h.eventually("writes to drain", func() bool {
		shards, _ := h.c.rt.Shards()
		for _, sh := range shards {
			if sh.Acquire() != nil {
				continue
			}
			n := sh.Queued()
			sh.Release()
			if n > 0 {
				return false
			}
		}
		return true
	})
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("no response within 5s")
	}
	var zero T
	return zero
}

func noRecv[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected response %+v", v)
	default:
	}
}

var testClient = Client{ID: "client", Host: "/127.0.0.1"}

// async runs a blocking call in a goroutine.
func async[T any](fn func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	return ch
}

// consumerMeta is a classic member's ConsumerProtocol subscription.
func consumerMeta(topics ...string) []byte {
	m := kmsg.ConsumerMemberMetadata{Version: 0, Topics: topics}
	return m.AppendTo(nil)
}

func joinReq(version int16, group, member string, protocols ...string) *kmsg.JoinGroupRequest {
	r := kmsg.NewJoinGroupRequest()
	r.Version = version
	r.Group = group
	r.MemberID = member
	r.SessionTimeoutMillis = 10000
	r.RebalanceTimeoutMillis = 30000
	r.ProtocolType = "consumer"
	if len(protocols) == 0 {
		protocols = []string{"range"}
	}
	for _, p := range protocols {
		r.Protocols = append(r.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: consumerMeta("t")})
	}
	return &r
}

func (h *harness) join(r *kmsg.JoinGroupRequest) <-chan *kmsg.JoinGroupResponse {
	return async(func() *kmsg.JoinGroupResponse { return h.c.JoinGroup(context.Background(), testClient, r) })
}

func syncReq(version int16, group, member string, gen int32, assignments map[string][]byte) *kmsg.SyncGroupRequest {
	r := kmsg.NewSyncGroupRequest()
	r.Version = version
	r.Group = group
	r.MemberID = member
	r.Generation = gen
	for _, id := range sortedKeys(assignments) {
		r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: assignments[id]})
	}
	return &r
}

func (h *harness) sync(r *kmsg.SyncGroupRequest) <-chan *kmsg.SyncGroupResponse {
	return async(func() *kmsg.SyncGroupResponse { return h.c.SyncGroup(context.Background(), r) })
}

func (h *harness) heartbeat(group, member string, gen int32) int16 {
	r := kmsg.NewHeartbeatRequest()
	r.Version = 4
	r.Group, r.MemberID, r.Generation = group, member, gen
	return h.c.Heartbeat(&r).ErrorCode
}

// awaitingJoin is how many members of a classic group are parked in
// JoinGroup.
func (h *harness) awaitingJoin(group string) int {
	n := -1
	h.shard(group, func(s *state) {
		if g := s.classicGroup(group); g != nil {
			n = g.numAwaitingJoin
		}
	})
	return n
}

func (h *harness) classicState(group string) string {
	st := "none"
	h.shard(group, func(s *state) {
		if g := s.classicGroup(group); g != nil {
			st = g.state.String()
		}
	})
	return st
}

func commitReq(version int16, group, member string, gen int32, offsets map[string]map[int32]int64) *kmsg.OffsetCommitRequest {
	r := kmsg.NewOffsetCommitRequest()
	r.Version = version
	r.Group, r.MemberID, r.Generation = group, member, gen
	for _, topic := range sortedKeys(offsets) {
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = topic
		ps := offsets[topic]
		keys := make([]int32, 0, len(ps))
		for p := range ps {
			keys = append(keys, p)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		for _, p := range keys {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, ps[p]
			t.Partitions = append(t.Partitions, rp)
		}
		r.Topics = append(r.Topics, t)
	}
	return &r
}

func (h *harness) commit(r *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	return h.c.OffsetCommit(context.Background(), r)
}

// commitCodes flattens an OffsetCommit response to topic/partition -> code.
func commitCodes(r *kmsg.OffsetCommitResponse) map[string]int16 {
	out := make(map[string]int16)
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			out[fmt.Sprintf("%s/%d", t.Topic, p.Partition)] = p.ErrorCode
		}
	}
	return out
}

// fetch fetches a group's offsets (v8) for topic/partitions, or all when
// topics is nil, as topic/partition -> offset.
func (h *harness) fetch(group string, topics map[string][]int32) (map[string]int64, int16) {
	r := kmsg.NewOffsetFetchRequest()
	r.Version = 8
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	if topics != nil {
		g.Topics = []kmsg.OffsetFetchRequestGroupTopic{}
		for _, t := range sortedKeys(topics) {
			g.Topics = append(g.Topics, kmsg.OffsetFetchRequestGroupTopic{Topic: t, Partitions: topics[t]})
		}
	}
	r.Groups = []kmsg.OffsetFetchRequestGroup{g}
	resp := h.c.OffsetFetch(&r)
	out := make(map[string]int64)
	for _, t := range resp.Groups[0].Topics {
		for _, p := range t.Partitions {
			out[fmt.Sprintf("%s/%d", t.Topic, p.Partition)] = p.Offset
		}
	}
	return out, resp.Groups[0].ErrorCode
}
