package share

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestPartition runs the scripts in testdata/partition against one
// share-partition whose writes go through a Store to a log of encoded
// __share_group_state records. Times are milliseconds given to each
// command. Run with -rewrite to regenerate expected output, and read the
// diff.
//
//	init start=N [locks=N] [limit=N] [lock-ms=N] [read-committed] [per-snapshot=N]
//	acquire member=M max=N now=T log=(F-L,F-Lt<pid>,F-Lc<pid>) [aborted=(<pid>@F)]
//	        t: a transactional batch; c: a control batch (a marker)
//	ack member=M acks=(F-L:accept,F-L:accept/release/reject/gap)
//	tick now=T
//	leave member=M
//	advance-start offset=N
//	reset offset=N
//	failover [leader-epoch=E]   a new leader recovers from the records replayed
//	show
func TestPartition(t *testing.T) {
	datadriven.Walk(t, "testdata/partition", func(t *testing.T, path string) {
		h := &harness{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

var testKey = Key{GroupID: "g", TopicID: [16]byte{1, 2, 3}, Partition: 4}

type harness struct {
	cfg         Config
	p           *Partition
	store       *Store
	log         []StoreRecord
	leaderEpoch int32
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	args := map[string]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = strings.Join(a.Vals, ",")
	}
	num := func(k string, def int64) int64 {
		v, ok := args[k]
		if !ok {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", d.Pos, k, v, err)
		}
		return n
	}
	var out strings.Builder
	now := num("now", 0)
	var w *Write
	switch d.Cmd {
	case "init":
		h.cfg = DefaultConfig()
		h.cfg.MaxRecordLocks = num("locks", h.cfg.MaxRecordLocks)
		h.cfg.DeliveryCountLimit = int16(num("limit", int64(h.cfg.DeliveryCountLimit)))
		h.cfg.LockDurationMs = num("lock-ms", h.cfg.LockDurationMs)
		_, h.cfg.ReadCommitted = args["read-committed"]
		h.store = NewStore()
		h.store.UpdatesPerSnapshot = int(num("per-snapshot", 500))
		h.leaderEpoch = 1
		h.p, w = Initialize(h.cfg, 0, h.leaderEpoch, num("start", 0))
	case "acquire":
		var batches []LogBatch
		for _, s := range strings.Split(args["log"], ",") {
			batches = append(batches, parseLogBatch(t, s))
		}
		var aborted []AbortedTransaction
		if a := args["aborted"]; a != "" {
			for _, s := range strings.Split(a, ",") {
				var at AbortedTransaction
				if _, err := fmt.Sscanf(s, "%d@%d", &at.ProducerID, &at.FirstOffset); err != nil {
					t.Fatalf("%s: aborted %q: %v", d.Pos, s, err)
				}
				aborted = append(aborted, at)
			}
		}
		var got []AcquiredRecords
		got, w = h.p.Acquire(args["member"], int(num("max", 500)), batches, aborted, now)
		fmt.Fprintf(&out, "acquired")
		for _, a := range got {
			fmt.Fprintf(&out, " %d-%d#%d", a.FirstOffset, a.LastOffset, a.DeliveryCount)
		}
		out.WriteString("\n")
	case "ack":
		var acks []AckBatch
		for _, s := range strings.Split(args["acks"], ",") {
			acks = append(acks, parseAck(t, s))
		}
		var err error
		w, err = h.p.Acknowledge(args["member"], acks)
		if err != nil {
			fmt.Fprintf(&out, "error %v\n", err)
		}
	case "tick":
		w = h.p.Tick(now)
	case "leave":
		w = h.p.MemberLeft(args["member"])
	case "advance-start":
		w = h.p.AdvanceStart(num("offset", 0))
	case "reset":
		w = h.p.Reset(num("offset", 0))
	case "failover":
		h.leaderEpoch = int32(num("leader-epoch", int64(h.leaderEpoch+1)))
		fresh := NewStore()
		fresh.UpdatesPerSnapshot = h.store.UpdatesPerSnapshot
		for _, r := range h.log {
			if err := fresh.Replay(r.Key, r.Value); err != nil {
				t.Fatalf("%s: replay: %v", d.Pos, err)
			}
		}
		st := fresh.Get(testKey)
		if st == nil {
			t.Fatalf("%s: no state replayed", d.Pos)
		}
		fmt.Fprintf(&out, "replayed %d records: %s\n", len(h.log), formatState(st))
		h.store = fresh
		h.p = Recover(h.cfg, h.leaderEpoch, st)
	case "show":
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	if w != nil {
		rec, err := h.store.Write(testKey, w, now)
		if err != nil {
			t.Fatalf("%s: store write: %v", d.Pos, err)
		}
		h.log = append(h.log, rec)
		kind := "update"
		if rec.Key[1] == byte(snapshotType) {
			kind = "snapshot"
		}
		fmt.Fprintf(&out, "write %s start=%d state-epoch=%d leader-epoch=%d%s\n", kind, w.StartOffset, w.StateEpoch, w.LeaderEpoch, formatBatches(w.Batches))
	}
	out.WriteString(h.format())
	return out.String()
}

func formatBatches(bs []StateBatch) string {
	var b strings.Builder
	for _, sb := range bs {
		fmt.Fprintf(&b, " %d-%d:%v#%d", sb.FirstOffset, sb.LastOffset, sb.DeliveryState, sb.DeliveryCount)
	}
	return b.String()
}

func formatState(s *State) string {
	return fmt.Sprintf("snapshot-epoch=%d state-epoch=%d leader-epoch=%d start=%d%s", s.SnapshotEpoch, s.StateEpoch, s.LeaderEpoch, s.StartOffset, formatBatches(s.Batches))
}

func (h *harness) format() string {
	var b strings.Builder
	fmt.Fprintf(&b, "spso=%d speo=%d fetch=%d", h.p.StartOffset(), h.p.EndOffset(), h.p.FetchOffset())
	if dl, ok := h.p.NextDeadline(); ok {
		fmt.Fprintf(&b, " deadline=%d", dl)
	}
	b.WriteString("\n")
	for _, s := range h.p.spans {
		fmt.Fprintf(&b, "  %d-%d %v #%d", s.first, s.last, s.state, s.count)
		if s.state == Acquired {
			fmt.Fprintf(&b, " %s until %d", s.member, s.deadlineMs)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func parseLogBatch(t *testing.T, s string) LogBatch {
	var b LogBatch
	rest := s
	if i := strings.IndexAny(s, "tc"); i >= 0 {
		rest = s[:i]
		b.Transactional = true
		b.Control = s[i] == 'c'
		pid, err := strconv.ParseInt(s[i+1:], 10, 64)
		if err != nil {
			t.Fatalf("log batch %q: %v", s, err)
		}
		b.ProducerID = pid
	}
	if _, err := fmt.Sscanf(rest, "%d-%d", &b.FirstOffset, &b.LastOffset); err != nil {
		t.Fatalf("log batch %q: %v", s, err)
	}
	return b
}

func parseAck(t *testing.T, s string) AckBatch {
	rng, types, ok := strings.Cut(s, ":")
	if !ok {
		t.Fatalf("ack %q: want F-L:TYPES", s)
	}
	var a AckBatch
	if _, err := fmt.Sscanf(rng, "%d-%d", &a.FirstOffset, &a.LastOffset); err != nil {
		t.Fatalf("ack %q: %v", s, err)
	}
	for _, ty := range strings.Split(types, "/") {
		switch ty {
		case "gap":
			a.Types = append(a.Types, AckGap)
		case "accept":
			a.Types = append(a.Types, AckAccept)
		case "release":
			a.Types = append(a.Types, AckRelease)
		case "reject":
			a.Types = append(a.Types, AckReject)
		case "bogus":
			a.Types = append(a.Types, 9)
		default:
			t.Fatalf("ack %q: type %q", s, ty)
		}
	}
	return a
}
