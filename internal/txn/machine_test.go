package txn

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestMachine runs the scripts in testdata/machine against one Machine at
// coordinator epoch 5, with transaction.max.timeout.ms 900000 and
// transactional.id.expiration.ms 1000000. Times are milliseconds given to
// each command; records are committed only when the script says so. Run
// with -rewrite to regenerate expected output, and read the diff.
//
//	init id=ID timeout=MS [pid=P epoch=E] [fresh=P] now=T
//	add id=ID pid=P epoch=E parts=(t/0,u/1) [verify|v2] now=T   v2: a leader's implicit add
//	end id=ID pid=P epoch=E commit|abort [v2] [fresh=P] now=T   v2: EndTxn v5+
//	written id=ID [error=NAME]      commit (or fail) the id's oldest pending write
//	markers-done id=ID now=T         the markers of the id's last marker set are in
//	tick now=T [abort] [remove]
//	force-epoch id=ID epoch=E        set the epoch in memory (exhaustion)
//	show [id=ID]
//	reload [epoch=E]                 a new machine replays every committed record
func TestMachine(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		h := newHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type harness struct {
	m         *Machine
	cfg       Config
	pending   map[string][]*Write
	committed []*Write
	markers   map[string]Markers
}

func newHarness() *harness {
	cfg := DefaultConfig()
	cfg.IDExpirationMs = 1000000
	return &harness{m: NewMachine(cfg, 5), cfg: cfg, pending: map[string][]*Write{}, markers: map[string]Markers{}}
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
	id := args["id"]
	var out strings.Builder
	switch d.Cmd {
	case "init":
		res := h.m.InitProducerID(InitProducerIDRequest{
			TransactionalID: id, TimeoutMs: int32(num("timeout", 60000)),
			ProducerID: num("pid", -1), ProducerEpoch: int16(num("epoch", -1)),
			FreshProducerID: num("fresh", -1), NowMs: num("now", 0),
		})
		h.result(&out, res)
	case "add":
		var tps []TopicPartition
		for _, s := range strings.Split(args["parts"], ",") {
			topic, p, _ := strings.Cut(s, "/")
			n, _ := strconv.Atoi(p)
			tps = append(tps, TopicPartition{topic, int32(n)})
		}
		_, verify := args["verify"]
		var res Result
		var errs map[TopicPartition]error
		if _, v2 := args["v2"]; v2 {
			res = h.m.AddPartitionsImplicitly(id, num("pid", -1), int16(num("epoch", -1)), tps, num("now", 0))
		} else {
			res, errs = h.m.AddPartitions(id, num("pid", -1), int16(num("epoch", -1)), tps, verify, num("now", 0))
		}
		h.result(&out, res)
		for _, tp := range tps {
			if err, ok := errs[tp]; ok {
				fmt.Fprintf(&out, "%s/%d: %s\n", tp.Topic, tp.Partition, code(err))
			}
		}
	case "end":
		_, commit := args["commit"]
		_, v2 := args["v2"]
		h.result(&out, h.m.EndTxn(EndTxnRequest{TransactionalID: id, ProducerID: num("pid", -1), ProducerEpoch: int16(num("epoch", -1)),
			Commit: commit, V2: v2, FreshProducerID: num("fresh", -1), NowMs: num("now", 0)}))
	case "written":
		q := h.pending[id]
		if len(q) == 0 {
			t.Fatalf("%s: no pending write for %q", d.Pos, id)
		}
		w := q[0]
		h.pending[id] = q[1:]
		var err error
		if name, ok := args["error"]; ok {
			err = kerr.TypedErrorForCode(kerrCode(t, name))
		} else {
			h.committed = append(h.committed, w)
		}
		for _, mk := range h.m.Written(w, err) {
			h.markers[mk.TransactionalID] = mk
			fmt.Fprintf(&out, "markers %s\n", fmtMarkers(mk))
		}
		h.show(&out, id)
	case "markers-done":
		mk, ok := h.markers[id]
		if !ok {
			t.Fatalf("%s: no markers for %q", d.Pos, id)
		}
		h.write(&out, h.m.MarkersWritten(mk, num("now", 0)))
	case "tick":
		_, abort := args["abort"]
		_, remove := args["remove"]
		for _, w := range h.m.Tick(num("now", 0), abort, remove) {
			h.write(&out, w)
		}
	case "force-epoch":
		h.m.txns[id].ProducerEpoch = int16(num("epoch", 0))
		h.show(&out, id)
	case "show":
		if id != "" {
			h.show(&out, id)
			break
		}
		for _, md := range h.m.All() {
			h.show(&out, md.TransactionalID)
		}
	case "reload":
		h.m = NewMachine(h.cfg, int32(num("epoch", 6)))
		h.pending = map[string][]*Write{}
		for _, w := range h.committed {
			if err := h.m.Replay(w.Key, w.Value); err != nil {
				t.Fatalf("%s: replay: %v", d.Pos, err)
			}
		}
		for _, mk := range h.m.Loaded() {
			h.markers[mk.TransactionalID] = mk
			fmt.Fprintf(&out, "markers %s\n", fmtMarkers(mk))
		}
		for _, md := range h.m.All() {
			h.show(&out, md.TransactionalID)
		}
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	if out.Len() == 0 {
		return "ok\n"
	}
	return out.String()
}

func (h *harness) result(out *strings.Builder, res Result) {
	switch {
	case res.NeedProducerID:
		out.WriteString("need producer id\n")
		return
	case res.Err != nil:
		fmt.Fprintf(out, "error %s\n", code(res.Err))
	case res.ProducerID != 0 || res.ProducerEpoch != 0:
		fmt.Fprintf(out, "producer %d epoch %d\n", res.ProducerID, res.ProducerEpoch)
	}
	h.write(out, res.Write)
}

func (h *harness) write(out *strings.Builder, w *Write) {
	if w == nil {
		return
	}
	h.pending[w.TransactionalID] = append(h.pending[w.TransactionalID], w)
	if w.Value == nil {
		fmt.Fprintf(out, "write %s tombstone\n", w.TransactionalID)
		return
	}
	md, err := decodeValue(w.TransactionalID, w.Value)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(out, "write %s\n", fmtMetadata(md))
}

func (h *harness) show(out *strings.Builder, id string) {
	md, ok := h.m.Get(id)
	if !ok {
		fmt.Fprintf(out, "%s: none\n", id)
		return
	}
	pending := ""
	if t := h.m.txns[id]; t.pending != nil {
		pending = " pending=" + t.pending.State.String()
	}
	fmt.Fprintf(out, "%s last-epoch=%d prev-pid=%d%s\n", fmtMetadata(&md), md.LastProducerEpoch, md.PreviousProducerID, pending)
}

func fmtMetadata(md *Metadata) string {
	parts := make([]string, len(md.Partitions))
	for i, tp := range md.Partitions {
		parts[i] = fmt.Sprintf("%s/%d", tp.Topic, tp.Partition)
	}
	s := fmt.Sprintf("%s %v pid=%d epoch=%d timeout=%d parts=(%s) start=%d updated=%d",
		md.TransactionalID, md.State, md.ProducerID, md.ProducerEpoch, md.TimeoutMs, strings.Join(parts, ","), md.StartMs, md.LastUpdateMs)
	// Transactions v2's fields, when set.
	if md.NextProducerID >= 0 {
		s += fmt.Sprintf(" next-pid=%d", md.NextProducerID)
	}
	if md.ClientTransactionVersion != 0 {
		s += fmt.Sprintf(" tv=%d", md.ClientTransactionVersion)
	}
	return s
}

func fmtMarkers(mk Markers) string {
	parts := make([]string, len(mk.Partitions))
	for i, tp := range mk.Partitions {
		parts[i] = fmt.Sprintf("%s/%d", tp.Topic, tp.Partition)
	}
	return fmt.Sprintf("%s pid=%d epoch=%d commit=%v coordinator-epoch=%d parts=(%s)",
		mk.TransactionalID, mk.ProducerID, mk.ProducerEpoch, mk.Commit, mk.CoordinatorEpoch, strings.Join(parts, ","))
}

func code(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}

func kerrCode(t *testing.T, name string) int16 {
	for c := int16(-1); c < 130; c++ {
		if e := kerr.ErrorForCode(c); e != nil && e.(*kerr.Error).Message == name {
			return c
		}
	}
	t.Fatalf("unknown error %q", name)
	return 0
}
