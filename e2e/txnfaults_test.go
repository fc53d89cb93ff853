package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/verify"
)

// The fault schedule of verify's transactional mode (issue 20): SIGKILLs
// of transaction coordinators and partition leaders of a three-node
// cluster of strata serve processes, while transactional producers commit
// and abort at random, read_committed consumers read, and a copy stage
// copies in transactions. Any anomaly fails the run. It is not in the
// default run until exactly-once holds under these kills; run it with
//
//	go test ./e2e -run TestFaultsTransactional -v -faults.txn
//
// and, like TestFaults, -faults.runs, -faults.duration, -faults.kinds and
// -faults.history for the long mode.
var faultTxn = flag.Bool("faults.txn", false, "run TestFaultsTransactional, the transactional mode's fault schedule")

var txnFaultKinds = []faultKind{
	{"kill-txn-coordinator", func(f *faultCluster, tl *timeline, topic string) {
		killCoordinator(f, tl, verify.ProducerTransactionalID(topic, 0), "producer 0")
	}},
	{"kill-copier-coordinator", func(f *faultCluster, tl *timeline, topic string) {
		killCoordinator(f, tl, verify.CopierTransactionalID(topic, 0), "copier 0")
	}},
	{"kill-leader", func(f *faultCluster, tl *timeline, topic string) {
		l := f.leader(topic)
		tl.add("SIGKILL node %d, leader of partition 0", l)
		f.nodes[l].kill()
		hold(sessionTimeout + time.Second)
		tl.add("restart node %d", l)
		f.nodes[l].restart()
	}},
}

// killCoordinator kills the node coordinating txnID, and restarts it once
// the others noticed.
func killCoordinator(f *faultCluster, tl *timeline, txnID, whose string) {
	f.t.Helper()
	var c int32 = -1
	for _, id := range f.alive() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r := f.cluster.admin(id).FindTxnCoordinators(ctx, txnID)[txnID]
		cancel()
		if r.Err == nil {
			c = r.NodeID
			break
		}
	}
	if c < 0 || f.nodes[c] == nil {
		f.t.Fatalf("no coordinator of %s's transactional id %s", whose, txnID)
	}
	tl.add("SIGKILL node %d, transaction coordinator of %s (%s)", c, whose, txnID)
	f.nodes[c].kill()
	hold(sessionTimeout + time.Second)
	tl.add("restart node %d", c)
	f.nodes[c].restart()
}

func TestFaultsTransactional(t *testing.T) {
	if !*faultTxn {
		t.Skip("the transactional fault schedule runs with -faults.txn")
	}
	var kinds []faultKind
	for _, k := range txnFaultKinds {
		if *faultKinds == "" || slices.Contains(strings.Split(*faultKinds, ","), k.name) {
			kinds = append(kinds, k)
		}
	}
	var mu sync.Mutex
	var runs []faultRun
	for _, k := range kinds {
		for run := range *faultRuns {
			t.Run(fmt.Sprintf("%s/%d", k.name, run), func(t *testing.T) {
				r := runTxnFault(t, k)
				mu.Lock()
				runs = append(runs, r)
				mu.Unlock()
			})
		}
	}
	t.Logf("transactional fault schedule: %d runs per kind, -faults.duration %v\n%s", *faultRuns, *faultDuration, txnFaultTable(runs))
}

func runTxnFault(t *testing.T, k faultKind) faultRun {
	f := startFaultCluster(t,
		"broker.session.timeout.ms="+fmt.Sprint(sessionTimeout.Milliseconds()), "broker.heartbeat.interval.ms=500",
		"replica.lag.time.max.ms=3000", "controller.quorum.election.timeout.ms=1000",
		"group.initial.rebalance.delay.ms=0")
	topic := "txnfaults-" + k.name
	var seeds []string
	for _, id := range ids(3) {
		seeds = append(seeds, f.nodes[id].addr)
	}
	cfg := verify.Config{
		Brokers: seeds, Topic: topic, Partitions: 3, ReplicationFactor: 3,
		Producers: 3, AssignedConsumers: 1, GroupConsumers: 2,
		Duration: time.Hour, // ended by the schedule
		Rate:     200, Transactional: true, AbortRate: 0.2, TxnRecords: 10,
		DeliveryTimeout: 60 * time.Second, DrainTimeout: 60 * time.Second, RequestTimeout: 10 * time.Second,
		KeepTopic: true,
	}
	ready := &readyWriter{match: "replication factor", ready: make(chan struct{})}
	cfg.Progress = ready
	produce, stop := context.WithCancel(context.Background())
	defer stop()
	type outcome struct {
		h   *verify.History
		res *verify.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		h, res, err := verify.Verify(produce, cfg)
		done <- outcome{h, res, err}
	}()
	tl := &timeline{start: time.Now()}
	select {
	case <-ready.ready:
	case o := <-done:
		t.Fatalf("the workload ended before it started: %v", o.err)
	case <-time.After(60 * time.Second):
		t.Fatal("the workload did not start within 60s")
	}
	tl.add("workload running on %s", topic)
	hold(3 * time.Second)
	injections := 0
	end := time.Now().Add(*faultDuration)
	for {
		k.inject(f, tl, topic)
		f.healthy(topic)
		injections++
		tl.add("cluster healthy again")
		hold(2 * time.Second)
		if time.Now().After(end) {
			break
		}
	}
	tl.add("stop producing; drain and final reads")
	stop()
	o := <-done
	tl.add("workload done")
	if o.err != nil {
		t.Fatalf("workload: %v\nfault timeline:\n%s", o.err, tl)
	}
	var report bytes.Buffer
	o.res.WriteText(&report)
	t.Logf("%s: fault timeline:\n%s\n\nverdict:\n%s", k.name, tl, report.String())
	st := o.res.Stats
	if !o.res.Valid || st.Txns.Committed == 0 || st.Copies.Committed == 0 {
		if *faultHistory != "" {
			path := filepath.Join(*faultHistory, fmt.Sprintf("txn-%s-%d.json", k.name, time.Now().UnixNano()))
			if b, err := json.Marshal(o.h); err == nil && os.WriteFile(path, b, 0o644) == nil {
				t.Logf("history written to %s", path)
			}
		}
		t.Errorf("%s: %s (%d transactions committed, %d copy transactions committed)", k.name, o.res.Summary(), st.Txns.Committed, st.Copies.Committed)
	}
	return faultRun{kind: k.name, injections: injections, res: o.res}
}

// txnFaultTable is the long mode's summary: per kind, the transactions by
// outcome and the anomalies by kind.
func txnFaultTable(runs []faultRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-24s %4s %4s %22s %22s %7s", "FAULT", "RUNS", "KILL", "TXNS COMMIT/ABORT/UNKN", "COPIES COMMIT/ABORT/UN", "RECORDS")
	for _, k := range verify.Kinds {
		fmt.Fprintf(&b, " %s", k)
	}
	b.WriteString("\n")
	var kinds []string
	by := map[string][]faultRun{}
	for _, r := range runs {
		if _, ok := by[r.kind]; !ok {
			kinds = append(kinds, r.kind)
		}
		by[r.kind] = append(by[r.kind], r)
	}
	for _, k := range kinds {
		var inj, records int
		var txns, copies verify.TxnStats
		counts := make([]int, len(verify.Kinds))
		for _, r := range by[k] {
			inj += r.injections
			if r.res == nil {
				continue
			}
			st := r.res.Stats
			records += st.Acknowledged
			txns.Committed, txns.Aborted, txns.Unknown = txns.Committed+st.Txns.Committed, txns.Aborted+st.Txns.Aborted, txns.Unknown+st.Txns.Unknown
			copies.Committed, copies.Aborted, copies.Unknown = copies.Committed+st.Copies.Committed, copies.Aborted+st.Copies.Aborted, copies.Unknown+st.Copies.Unknown
			for i, kind := range verify.Kinds {
				counts[i] += r.res.Count(kind)
			}
		}
		fmt.Fprintf(&b, "%-24s %4d %4d %22s %22s %7d", k, len(by[k]), inj,
			fmt.Sprintf("%d/%d/%d", txns.Committed, txns.Aborted, txns.Unknown), fmt.Sprintf("%d/%d/%d", copies.Committed, copies.Aborted, copies.Unknown), records)
		for i, kind := range verify.Kinds {
			fmt.Fprintf(&b, " %*d", len(kind), counts[i])
		}
		b.WriteString("\n")
	}
	return b.String()
}
