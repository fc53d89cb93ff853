package group

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/coordinator"
	"github.com/strata-io/strata/internal/record"
)

// TestMachine runs the scripts in testdata/machine against one partition's
// state, the machine the runtime runs, with no runtime, goroutine or clock:
// the script gives the time, completes the records queued for the
// partition, and sees each response the moment the machine sends it.
// Member ids the coordinator makes up are named m1, m2, ... in the order
// they first appear; ids a script gives (KIP-848 members) are used as
// they are. Run with -rewrite to regenerate expected output, and read the
// diff.
//
//	topic name=T parts=N                 create or grow a topic
//	join name=R g=G [member=M] [instance=I] [protocols=(range,...)] [version=V]
//	     [session=MS] [rebalance=MS]     a JoinGroup, parked as R
//	sync name=R g=G member=M gen=N [assign=(M:BYTES,...)] [version=V]
//	heartbeat g=G member=M gen=N
//	leave g=G members=(M,...)
//	cgh name=R g=G member=M epoch=E [instance=I] [topics=(T,...)] [regex=RE]
//	    [owned=(T:P.P,...)] [rebalance=MS]  a ConsumerGroupHeartbeat
//	offset-commit name=R g=G [member=M gen=N] offsets=(T/P=O,...)
//	txn-commit name=R g=G pid=P epoch=E [member=M gen=N] offsets=(T/P=O,...)
//	txn-complete pid=P epoch=E commit|abort  the transaction's marker is
//	                                     committed in the partition
//	offset-fetch g=G [stable]            committed offsets (RequireStable)
//	advance ms=MS                        move time, running due deadlines
//	commit [n=K] [error=NAME]            complete the oldest K (all) writes
//	group g=G                            show a group
//	reload                               a new state replays every committed
//	                                     record and is loaded (onLoaded)
//
// After every command the script shows the records queued for the
// partition ("write ...") and the responses sent ("R: ...").
func TestMachine(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		h := newScript(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type script struct {
	c         *Coordinator
	topics    *staticTopics
	s         *state
	ids       int
	aliases   map[string]string // member id -> name
	byAlias   map[string]string // name -> member id
	pending   []pendingReply
	writes    []coordinator.Write
	committed [][]byte // the partition's batches, for reload
}

type pendingReply struct {
	name string
	poll func() (string, bool)
}

var scriptEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newScript(t *testing.T) *script {
	cfg := DefaultConfig()
	cfg.OffsetsTopicNumPartitions = 1
	h := &script{topics: newTopics(), aliases: map[string]string{}, byAlias: map[string]string{}}
	h.c = NewCoordinator(cfg, Deps{Topics: h.topics, Logger: testLogger(t)})
	h.s = h.newState()
	return h
}

func (h *script) newState() *state {
	s := h.c.newState(0)
	s.uuid = func() [16]byte {
		h.ids++
		var u [16]byte
		binary.BigEndian.PutUint64(u[8:], uint64(h.ids))
		return u
	}
	s.now = scriptEpoch
	if h.s != nil {
		s.now = h.s.now
	}
	return s
}

// alias names a member id in the output.
func (h *script) alias(id string) string {
	if id == "" {
		return `""`
	}
	if a, ok := h.aliases[id]; ok {
		return a
	}
	a := fmt.Sprintf("m%d", len(h.aliases)+1)
	h.aliases[id], h.byAlias[a] = a, id
	return a
}

// member is the id a script's name stands for.
func (h *script) member(name string) string {
	if id, ok := h.byAlias[name]; ok {
		return id
	}
	if name != "" {
		h.aliases[name], h.byAlias[name] = name, name
	}
	return name
}

func code(c int16) string {
	if c == 0 {
		return "ok"
	}
	if err := kerr.ErrorForCode(c); err != nil {
		return err.(*kerr.Error).Message
	}
	return strconv.Itoa(int(c))
}

func (h *script) run(t *testing.T, d *datadriven.TestData) string {
	args := map[string][]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = a.Vals
	}
	str := func(k, def string) string {
		if v, ok := args[k]; ok && len(v) > 0 {
			return v[0]
		}
		return def
	}
	num := func(k string, def int64) int64 {
		v, ok := args[k]
		if !ok {
			return def
		}
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", d.Pos, k, v, err)
		}
		return n
	}
	var out strings.Builder
	s := h.s
	switch d.Cmd {
	case "topic":
		h.topics.set(topic(str("name", ""), int32(num("parts", 1))))
	case "join":
		r := kmsg.NewJoinGroupRequest()
		r.Version = int16(num("version", 9))
		r.Group, r.MemberID = str("g", ""), h.member(str("member", ""))
		if i, ok := args["instance"]; ok {
			r.InstanceID = kmsg.StringPtr(i[0])
		}
		r.SessionTimeoutMillis = int32(num("session", 10000))
		r.RebalanceTimeoutMillis = int32(num("rebalance", 30000))
		r.ProtocolType = "consumer"
		protocols := args["protocols"]
		if len(protocols) == 0 {
			protocols = []string{"range"}
		}
		for _, p := range protocols {
			r.Protocols = append(r.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: consumerMeta("t")})
		}
		reply := make(chan *kmsg.JoinGroupResponse, 1)
		s.append(s.classicJoin(&r, testClient, reply))
		await(h, str("name", "join"), reply, h.joinString)
	case "sync":
		r := kmsg.NewSyncGroupRequest()
		r.Version = int16(num("version", 5))
		r.Group, r.MemberID, r.Generation = str("g", ""), h.member(str("member", "")), int32(num("gen", -1))
		for _, a := range args["assign"] {
			m, bytes, _ := strings.Cut(a, ":")
			r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: h.member(m), MemberAssignment: []byte(bytes)})
		}
		reply := make(chan *kmsg.SyncGroupResponse, 1)
		s.append(s.classicSync(&r, reply))
		await(h, str("name", "sync"), reply, func(r *kmsg.SyncGroupResponse) string {
			return fmt.Sprintf("sync %s assignment=%q", code(r.ErrorCode), r.MemberAssignment)
		})
	case "heartbeat":
		r := kmsg.NewHeartbeatRequest()
		r.Version = 4
		r.Group, r.MemberID, r.Generation = str("g", ""), h.member(str("member", "")), int32(num("gen", -1))
		fmt.Fprintf(&out, "heartbeat %s\n", code(s.classicHeartbeat(&r)))
	case "leave":
		g := s.classicGroup(str("g", ""))
		if g == nil {
			t.Fatalf("%s: no classic group %q", d.Pos, str("g", ""))
		}
		r := kmsg.NewLeaveGroupRequest()
		r.Version = 5
		var members []kmsg.LeaveGroupRequestMember
		for _, m := range args["members"] {
			members = append(members, kmsg.LeaveGroupRequestMember{MemberID: h.member(m)})
		}
		resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
		s.append(s.classicLeave(g, members, resp))
		for _, m := range resp.Members {
			fmt.Fprintf(&out, "leave %s %s\n", h.alias(m.MemberID), code(m.ErrorCode))
		}
	case "cgh":
		r := kmsg.NewConsumerGroupHeartbeatRequest()
		r.Version = 1
		r.Group, r.MemberID, r.MemberEpoch = str("g", ""), h.member(str("member", "")), int32(num("epoch", 0))
		r.RebalanceTimeoutMillis = int32(num("rebalance", -1))
		if i, ok := args["instance"]; ok {
			r.InstanceID = kmsg.StringPtr(i[0])
		}
		if ts, ok := args["topics"]; ok {
			r.SubscribedTopicNames = append([]string{}, ts...)
		}
		if re, ok := args["regex"]; ok {
			r.SubscribedTopicRegex = kmsg.StringPtr(re[0])
		}
		if owned, ok := args["owned"]; ok {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			for _, o := range owned {
				if o == "" {
					continue
				}
				name, ps, _ := strings.Cut(o, ":")
				info, ok := h.topics.TopicByName(name)
				if !ok {
					t.Fatalf("%s: no topic %q", d.Pos, name)
				}
				rt := kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: info.ID, Partitions: []int32{}}
				for p := range strings.SplitSeq(ps, ".") {
					if p == "" {
						continue
					}
					n, _ := strconv.Atoi(p)
					rt.Partitions = append(rt.Partitions, int32(n))
				}
				r.Topics = append(r.Topics, rt)
			}
		}
		reply := make(chan *kmsg.ConsumerGroupHeartbeatResponse, 1)
		s.append(s.consumerGroupHeartbeat(&r, testClient, reply))
		await(h, str("name", "cgh"), reply, h.cghString)
	case "offset-commit":
		r := kmsg.NewOffsetCommitRequest()
		r.Version = 8
		r.Group, r.MemberID, r.Generation = str("g", ""), h.member(str("member", "")), int32(num("gen", -1))
		for _, o := range args["offsets"] {
			topic, p, offset := parseOffset(t, o)
			rt := kmsg.NewOffsetCommitRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, offset
			rt.Partitions = append(rt.Partitions, rp)
			r.Topics = append(r.Topics, rt)
		}
		resp, entries := h.c.offsetCommitEntries(&r)
		reply := make(chan *kmsg.OffsetCommitResponse, 1)
		s.append(s.offsetCommit(&r, resp, entries, reply))
		await(h, str("name", "commit"), reply, func(r *kmsg.OffsetCommitResponse) string {
			var ps []string
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					ps = append(ps, fmt.Sprintf("%s/%d %s", t.Topic, p.Partition, code(p.ErrorCode)))
				}
			}
			return "offset-commit " + strings.Join(ps, ", ")
		})
	case "txn-commit":
		r := kmsg.NewTxnOffsetCommitRequest()
		r.Version = 3
		r.Group, r.MemberID, r.Generation = str("g", ""), h.member(str("member", "")), int32(num("gen", -1))
		r.ProducerID, r.ProducerEpoch = num("pid", -1), int16(num("epoch", 0))
		for _, o := range args["offsets"] {
			topic, p, offset := parseOffset(t, o)
			r.Topics = append(r.Topics, kmsg.TxnOffsetCommitRequestTopic{Topic: topic,
				Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: p, Offset: offset, LeaderEpoch: -1}}})
		}
		resp, entries := h.c.txnOffsetCommitEntries(&r)
		reply := make(chan *kmsg.TxnOffsetCommitResponse, 1)
		s.append(s.txnOffsetCommit(&r, resp, entries, reply))
		await(h, str("name", "txn-commit"), reply, func(r *kmsg.TxnOffsetCommitResponse) string {
			var ps []string
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					ps = append(ps, fmt.Sprintf("%s/%d %s", t.Topic, p.Partition, code(p.ErrorCode)))
				}
			}
			return "txn-commit " + strings.Join(ps, ", ")
		})
	case "txn-complete":
		pid, commit := num("pid", -1), d.HasArg("commit")
		h.committed = append(h.committed, record.BuildMarker(nil, pid, int16(num("epoch", 0)), commit, 0, s.now.UnixMilli()))
		s.completeTxn(pid, commit, s.now)
	case "offset-fetch":
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = str("g", "")
		resp := s.offsetFetch(&rg, 8, d.HasArg("stable"))
		var ps []string
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					ps = append(ps, fmt.Sprintf("%s/%d %s", t.Topic, p.Partition, code(p.ErrorCode)))
				} else {
					ps = append(ps, fmt.Sprintf("%s/%d=%d", t.Topic, p.Partition, p.Offset))
				}
			}
		}
		sort.Strings(ps)
		fmt.Fprintf(&out, "offsets %s %s\n", code(resp.ErrorCode), strings.Join(ps, " "))
	case "advance":
		now := s.now.Add(time.Duration(num("ms", 0)) * time.Millisecond)
		s.now = now
		s.Deadlines().RunDue(now)
	case "commit":
		n := int(num("n", int64(len(h.writes))))
		var err error
		if e, ok := args["error"]; ok {
			err = errorNamed(t, e[0])
		}
		ws := h.writes[:min(n, len(h.writes))]
		h.writes = h.writes[len(ws):]
		for _, w := range ws {
			if err == nil && len(w.Records) > 0 {
				recs := make([]record.Rec, len(w.Records))
				for i, r := range w.Records {
					recs[i] = record.Rec{Key: r.Key, Value: r.Value, Timestamp: s.now.UnixMilli()}
				}
				if w.Producer != nil {
					h.committed = append(h.committed, record.BuildTransactional(nil, w.Producer.ID, w.Producer.Epoch, recs))
				} else {
					h.committed = append(h.committed, record.Build(nil, recs))
				}
			}
			if w.Done != nil {
				w.Done(err)
			}
		}
	case "group":
		h.showGroup(&out, str("g", ""))
	case "reload":
		for _, w := range h.writes {
			if w.Done != nil {
				w.Done(coordinator.ErrUnloaded)
			}
		}
		h.writes = nil
		s.onUnloaded()
		h.s = h.newState()
		s = h.s
		for _, b := range h.committed {
			if err := s.Replay(b, s.now); err != nil {
				t.Fatalf("%s: replay: %v", d.Pos, err)
			}
		}
		s.onLoaded()
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	h.flush(&out)
	return out.String()
}

// parseOffset reads T/P=O.
func parseOffset(t *testing.T, s string) (topic string, partition int32, offset int64) {
	tp, o, _ := strings.Cut(s, "=")
	topic, p, _ := strings.Cut(tp, "/")
	pn, err1 := strconv.Atoi(p)
	on, err2 := strconv.ParseInt(o, 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("offset %q: want topic/partition=offset", s)
	}
	return topic, int32(pn), on
}

func errorNamed(t *testing.T, name string) error {
	for c := int16(1); c < 200; c++ {
		if err := kerr.ErrorForCode(c); err != nil && err.(*kerr.Error).Message == name {
			return err
		}
	}
	t.Fatalf("no Kafka error %q", name)
	return nil
}

// await parks a request's reply channel until the machine answers it.
func await[T any](h *script, name string, ch chan T, format func(T) string) {
	h.pending = append(h.pending, pendingReply{name, func() (string, bool) {
		select {
		case v := <-ch:
			return format(v), true
		default:
			return "", false
		}
	}})
}

// flush prints the writes queued and the responses sent since the last
// command.
func (h *script) flush(out *strings.Builder) {
	for _, w := range h.s.TakeWrites() {
		h.writes = append(h.writes, w)
		var recs []string
		for _, r := range w.Records {
			recs = append(recs, h.recordString(r))
		}
		if w.Producer != nil {
			fmt.Fprintf(out, "write txn pid=%d epoch=%d %s\n", w.Producer.ID, w.Producer.Epoch, strings.Join(recs, "; "))
			continue
		}
		fmt.Fprintf(out, "write %s\n", strings.Join(recs, "; "))
	}
	kept := h.pending[:0]
	for _, p := range h.pending {
		if v, ok := p.poll(); ok {
			fmt.Fprintf(out, "%s: %s\n", p.name, v)
		} else {
			kept = append(kept, p)
		}
	}
	h.pending = kept
}

func (h *script) joinString(r *kmsg.JoinGroupResponse) string {
	if r.ErrorCode != 0 {
		return fmt.Sprintf("join %s member=%s", code(r.ErrorCode), h.alias(r.MemberID))
	}
	protocol := ""
	if r.Protocol != nil {
		protocol = *r.Protocol
	}
	var b strings.Builder
	fmt.Fprintf(&b, "join ok member=%s gen=%d protocol=%s leader=%s", h.alias(r.MemberID), r.Generation, protocol, h.alias(r.LeaderID))
	if len(r.Members) > 0 {
		var ms []string
		for _, m := range r.Members {
			ms = append(ms, h.alias(m.MemberID))
		}
		fmt.Fprintf(&b, " members=(%s)", strings.Join(ms, ","))
	}
	return b.String()
}

func (h *script) cghString(r *kmsg.ConsumerGroupHeartbeatResponse) string {
	if r.ErrorCode != 0 {
		return "cgh " + code(r.ErrorCode)
	}
	var b strings.Builder
	id := ""
	if r.MemberID != nil {
		id = *r.MemberID
	}
	fmt.Fprintf(&b, "cgh ok member=%s epoch=%d", h.alias(id), r.MemberEpoch)
	if r.Assignment != nil {
		var ts []string
		for _, t := range r.Assignment.Topics {
			ps := append([]int32(nil), t.Partitions...)
			sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
			ts = append(ts, h.topicName(t.TopicID)+":"+joinInts(ps))
		}
		sort.Strings(ts)
		fmt.Fprintf(&b, " assigned=(%s)", strings.Join(ts, ","))
	}
	return b.String()
}

func (h *script) topicName(id [16]byte) string {
	if info, ok := h.topics.TopicByID(id); ok {
		return info.Name
	}
	return fmt.Sprintf("%x", id)
}

func joinInts(ps []int32) string {
	var s []string
	for _, p := range ps {
		s = append(s, strconv.Itoa(int(p)))
	}
	return strings.Join(s, ".")
}

func (h *script) partitionsString(ps partitions) string {
	var ts []string
	for _, t := range sortedTopicIDs(ps) {
		ts = append(ts, h.topicName(t)+":"+joinInts(ps.sortedPartitions(t)))
	}
	sort.Strings(ts)
	return "(" + strings.Join(ts, ",") + ")"
}

// recordString shows a record of __consumer_offsets.
func (h *script) recordString(r coordinator.Record) string {
	switch binary.BigEndian.Uint16(r.Key) {
	case keyOffsetCommitV0, keyOffsetCommitV1:
		var k kmsg.OffsetCommitKey
		_ = k.ReadFrom(r.Key)
		if r.Value == nil {
			return fmt.Sprintf("offset %s %s/%d tombstone", k.Group, k.Topic, k.Partition)
		}
		var v kmsg.OffsetCommitValue
		_ = v.ReadFrom(r.Value)
		return fmt.Sprintf("offset %s %s/%d=%d", k.Group, k.Topic, k.Partition, v.Offset)
	case keyGroupMetadataV2:
		var k kmsg.GroupMetadataKey
		_ = k.ReadFrom(r.Key)
		if r.Value == nil {
			return fmt.Sprintf("group %s tombstone", k.Group)
		}
		var v kmsg.GroupMetadataValue
		_ = v.ReadFrom(r.Value)
		if isConsumerGroupValue(&v) {
			return fmt.Sprintf("consumer-group %s epoch=%d", k.Group, v.Generation)
		}
		var ms []string
		for _, m := range v.Members {
			ms = append(ms, fmt.Sprintf("%s=%q", h.alias(m.MemberID), m.Assignment))
		}
		p, l := "", ""
		if v.Protocol != nil {
			p = *v.Protocol
		}
		if v.Leader != nil {
			l = h.alias(*v.Leader)
		}
		return fmt.Sprintf("group %s gen=%d protocol=%s leader=%s members=(%s)", k.Group, v.Generation, p, l, strings.Join(ms, ","))
	}
	return fmt.Sprintf("record %x", r.Key)
}

func (h *script) showGroup(out *strings.Builder, id string) {
	grp := h.s.groups[id]
	switch {
	case grp == nil:
		fmt.Fprintf(out, "%s: none\n", id)
	case grp.classic != nil:
		g := grp.classic
		fmt.Fprintf(out, "%s: classic %s gen=%d protocol=%s leader=%s\n", id, g.state, g.generation, g.protocolName, h.alias(g.leader))
		for _, mid := range g.sortedMemberIDs() {
			m := g.members[mid]
			var flags []string
			if m.awaitingJoin() {
				flags = append(flags, "awaiting-join")
			}
			if m.awaitingSync() {
				flags = append(flags, "awaiting-sync")
			}
			if m.instanceID != nil {
				flags = append(flags, "instance="+*m.instanceID)
			}
			fmt.Fprintf(out, "  %s\n", strings.Join(append([]string{h.alias(mid)}, flags...), " "))
		}
	default:
		g := grp.consumer
		fmt.Fprintf(out, "%s: consumer %s epoch=%d assignment-epoch=%d\n", id, g.state(), g.groupEpoch, g.assignmentEpoch)
		ids := make([]string, 0, len(g.members))
		for mid := range g.members {
			ids = append(ids, mid)
		}
		sort.Strings(ids)
		for _, mid := range ids {
			m := g.members[mid]
			fmt.Fprintf(out, "  %s epoch=%d %s assigned=%s", h.alias(mid), m.memberEpoch, m.state, h.partitionsString(m.assigned))
			if m.pendingRevocation.count() > 0 {
				fmt.Fprintf(out, " revoking=%s", h.partitionsString(m.pendingRevocation))
			}
			out.WriteString("\n")
		}
	}
}
