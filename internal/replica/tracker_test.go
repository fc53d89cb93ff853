package replica

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestTracker runs the scripts in testdata/tracker against one tracker on
// node 1, as etcd raft's interaction tests run its node: every command is
// an event (or a query), and its output is the effects it returned. Times
// are milliseconds on a manual clock. Run with -rewrite to regenerate the
// expected output after a deliberate change, and read the diff.
//
//	restart high-watermark=O    a new tracker, as a restarted replica starts
//	config min-insync=N lag=MS
//	become-leader epoch=E partition-epoch=P replicas=(..) isr=(..) log-end=O [committable=O] time=T
//	become-follower leader=L epoch=E partition-epoch=P replicas=(..)
//	append log-end=O [committable=O] time=T
//	fetch replica=R offset=O leader-log-end=O [log-start=O] time=T
//	tick time=T
//	alter-done [change=pending|previous] [partition-epoch=P] [error=NAME] time=T
//	await-ack id=N end=O
//	cancel-ack id=N
//	check-append acks=A
//	status
func TestTracker(t *testing.T) {
	datadriven.Walk(t, "testdata/tracker", func(t *testing.T, path string) {
		h := &trackerHarness{t: newTracker(1, 0, 1, 30000)}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type trackerHarness struct {
	t *tracker
	// proposed are the changes proposed so far, oldest first.
	proposed []*ISRChange
}

func (h *trackerHarness) run(t *testing.T, d *datadriven.TestData) string {
	args := map[string][]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = a.Vals
	}
	num := func(key string) int64 {
		vals, ok := args[key]
		if !ok || len(vals) != 1 {
			d.Fatalf(t, "%s: want one %s=", d.Cmd, key)
		}
		n, err := strconv.ParseInt(vals[0], 10, 64)
		if err != nil {
			d.Fatalf(t, "%s: %s: %v", d.Cmd, key, err)
		}
		return n
	}
	numOr := func(key string, def int64) int64 {
		if _, ok := args[key]; !ok {
			return def
		}
		return num(key)
	}
	ids := func(key string) []int32 {
		var out []int32
		for _, v := range args[key] {
			if strings.TrimSpace(v) == "" {
				continue // ids=() is the empty list
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
			if err != nil {
				d.Fatalf(t, "%s: %s: %v", d.Cmd, key, err)
			}
			out = append(out, int32(n))
		}
		return out
	}
	if d.Cmd == "restart" {
		*h = trackerHarness{t: newTracker(1, num("high-watermark"), 1, 30000)}
		return h.status()
	}
	tr := h.t
	var eff effects
	switch d.Cmd {
	case "config":
		tr.configure(int(num("min-insync")), num("lag"))
		return "ok"
	case "become-leader":
		s := State{Leader: 1, LeaderEpoch: int32(num("epoch")), PartitionEpoch: int32(num("partition-epoch")),
			Replicas: ids("replicas"), ISR: ids("isr"), Ineligible: ids("ineligible")}
		end := num("log-end")
		eff = tr.becomeLeader(s, end, numOr("committable", end), num("time"))
	case "become-follower":
		s := State{Leader: int32(num("leader")), LeaderEpoch: int32(num("epoch")), PartitionEpoch: int32(num("partition-epoch")),
			Replicas: ids("replicas")}
		var newEpoch bool
		eff, newEpoch = tr.becomeFollower(s)
		return fmt.Sprintf("new-epoch=%v\n%s", newEpoch, h.print(eff))
	case "append":
		end := num("log-end")
		eff = tr.appended(end, numOr("committable", end), num("time"))
	case "fetch":
		replica := int32(num("replica"))
		if err := tr.isReplica(replica); err != nil {
			return "error: " + errName(err)
		}
		eff = tr.followerFetched(followerFetch{replica: replica, fetchOffset: num("offset"),
			logStartOffset: numOr("log-start", 0), leaderLogEnd: num("leader-log-end"), nowMs: num("time")})
	case "tick":
		eff = tr.tick(num("time"))
	case "ineligible":
		eff = tr.setIneligible(ids("ids"), num("time"))
	case "alter-done":
		change := tr.pending
		if v := args["change"]; len(v) == 1 && v[0] == "previous" {
			if len(h.proposed) < 2 {
				d.Fatalf(t, "alter-done change=previous: fewer than two proposals")
			}
			change = h.proposed[len(h.proposed)-2]
		}
		if change == nil {
			return "no change in flight"
		}
		var err error
		if v := args["error"]; len(v) == 1 {
			err = errorNamed(d, t, v[0])
		}
		eff = tr.alterPartitionDone(change, int32(numOr("partition-epoch", -1)), err, num("time"))
	case "await-ack":
		eff = tr.awaitAck(uint64(num("id")), num("end"))
	case "cancel-ack":
		tr.cancelAck(uint64(num("id")))
		return "ok"
	case "check-append":
		if err := tr.checkAppend(int16(num("acks"))); err != nil {
			return "error: " + errName(err)
		}
		return "ok"
	case "status":
		return h.status()
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	return h.print(eff)
}

// print renders effects, one per line, and remembers proposals.
func (h *trackerHarness) print(eff effects) string {
	var b strings.Builder
	if eff.highWatermarkMoved {
		fmt.Fprintf(&b, "high watermark %d\n", h.t.highWatermark)
	}
	if eff.propose != nil {
		h.proposed = append(h.proposed, eff.propose)
		fmt.Fprintf(&b, "propose %s\n", eff.propose)
	}
	if eff.committed != nil {
		fmt.Fprintf(&b, "committed %s\n", eff.committed)
	}
	for _, a := range eff.acks {
		if a.err == nil {
			fmt.Fprintf(&b, "ack %d ok\n", a.id)
		} else {
			fmt.Fprintf(&b, "ack %d %s\n", a.id, errName(a.err))
		}
	}
	if b.Len() == 0 {
		return "ok"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (h *trackerHarness) status() string {
	tr := h.t
	var b strings.Builder
	role := "follower"
	if tr.leader {
		role = "leader"
	}
	fmt.Fprintf(&b, "%s of %d: leader=%d epoch=%d partition-epoch=%d replicas=%v\n", role, tr.nodeID, tr.leaderID, tr.leaderEpoch, tr.partitionEpoch, tr.replicas)
	pending := "none"
	if tr.pending != nil {
		pending = tr.pending.String()
	}
	fmt.Fprintf(&b, "isr=%v maximal=%v in-flight: %s\n", tr.isr, tr.maximalISR(), pending)
	fmt.Fprintf(&b, "high-watermark=%d log-end=%d committable=%d epoch-start=%d\n", tr.highWatermark, tr.logEnd, tr.committable, tr.epochStart)
	for _, id := range slices.Sorted(maps.Keys(tr.followers)) {
		f := tr.followers[id]
		fmt.Fprintf(&b, "follower %d: log-end=%d log-start=%d caught-up=%d last-fetch=%d last-fetch-leader-log-end=%d\n",
			id, f.logEndOffset, f.logStartOffset, f.lastCaughtUpMs, f.lastFetchMs, f.lastFetchLeaderLogEnd)
	}
	for _, a := range tr.acks {
		fmt.Fprintf(&b, "waiting ack %d end=%d\n", a.id, a.end)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// errName is the Kafka name of the error err wraps.
func errName(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}

func errorNamed(d *datadriven.TestData, t *testing.T, name string) error {
	if name == "network" {
		return errors.New("connection refused")
	}
	for code := int16(-1); code < 200; code++ {
		if e := kerr.ErrorForCode(code); e != nil {
			var ke *kerr.Error
			if errors.As(e, &ke) && ke.Message == name {
				return ke
			}
		}
	}
	d.Fatalf(t, "no Kafka error named %s", name)
	return nil
}
