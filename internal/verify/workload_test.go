package verify_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata"
	"github.com/strata-io/strata/internal/verify"
)

// The workload against real brokers over real sockets: a Strata node
// started in this process, and franz-go's kfake as the baseline (a
// Kafka-protocol broker that is not Strata). Both must come out valid.

// startStrata starts a durable Strata node; a group's first member is not
// held back for others (group.initial.rebalance.delay.ms=0, as Kafka's
// test configurations do).
func startStrata(t *testing.T, settings map[string]string) *strata.Node {
	t.Helper()
	all := map[string]string{"group.initial.rebalance.delay.ms": "0"}
	for k, v := range settings {
		all[k] = v
	}
	n, err := strata.Start(strata.Options{Dir: t.TempDir(), Settings: all})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// smallRun is a run short enough for a loaded 2-core machine, with every
// kind of consumer.
func smallRun(brokers ...string) verify.Config {
	return verify.Config{
		Brokers:           brokers,
		Partitions:        4,
		Producers:         3,
		AssignedConsumers: 2,
		GroupConsumers:    2,
		Records:           3000,
		Idempotent:        true,
		DrainTimeout:      30 * time.Second,
		RequestTimeout:    30 * time.Second,
	}
}

func runVerify(t *testing.T, cfg verify.Config) (*verify.History, *verify.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h, res, err := verify.Verify(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h, res
}

// requireValid checks a run that must find nothing, and that it really
// looked: every record acknowledged, read by every assigned consumer, by
// the group, and by the final read, which reached every partition's end.
func requireValid(t *testing.T, h *verify.History, res *verify.Result, records int) {
	t.Helper()
	var report bytes.Buffer
	res.WriteText(&report)
	if !res.Valid || len(res.Warnings) > 0 {
		t.Fatalf("run not valid:\n%s", report.String())
	}
	if res.Stats.Sent != records || res.Stats.Acknowledged != records || res.Stats.Distinct != records {
		t.Fatalf("sent %d, acknowledged %d, read %d distinct; want %d each\n%s", res.Stats.Sent, res.Stats.Acknowledged, res.Stats.Distinct, records, report.String())
	}
	kinds := map[string]map[string]bool{}
	for _, c := range h.Consumers {
		if kinds[c.Kind] == nil {
			kinds[c.Kind] = map[string]bool{}
		}
		for _, e := range c.Events {
			if e.Type == verify.EventPoll {
				kinds[c.Kind][c.Name+"/"+e.Value] = true
			}
		}
	}
	if got := len(kinds[verify.KindAssigned]); got != 2*records {
		t.Errorf("the assigned consumers read %d of the %d records each should", got, records)
	}
	if got := len(kinds[verify.KindFinal]); got != records {
		t.Errorf("the final read read %d of %d records", got, records)
	}
	if len(kinds[verify.KindGroup]) < records {
		t.Errorf("the group read %d of %d records", len(kinds[verify.KindGroup]), records)
	}
	for _, f := range h.Final {
		if !f.Reached {
			t.Errorf("final read of partition %d did not reach its end: %+v", f.Partition, f)
		}
	}
}

func TestVerifyStrata(t *testing.T) {
	n := startStrata(t, nil)
	cfg := smallRun(n.Addr())
	var progress bytes.Buffer
	cfg.Progress = &progress
	h, res := runVerify(t, cfg)
	requireValid(t, h, res, int(cfg.Records))
	if h.ReplicationFactor != 1 {
		t.Errorf("replication factor %d on one broker", h.ReplicationFactor)
	}
	for _, want := range []string{"verify: topic " + h.Topic, "verify: producing stopped", "verify: reading every partition"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress does not say %q:\n%s", want, progress.String())
		}
	}
	// A valid run deletes its topic.
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has(h.Topic) {
		t.Errorf("topic %s kept after a valid run", h.Topic)
	}
}

// TestVerifyKfake: the same run against franz-go's kfake, a Kafka-protocol
// broker that is not Strata.
func TestVerifyKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := smallRun(c.ListenAddrs()...)
	h, res := runVerify(t, cfg)
	requireValid(t, h, res, int(cfg.Records))
}

// txnRun is smallRun made transactional: the group consumers are the
// copy stage.
func txnRun(brokers ...string) verify.Config {
	cfg := smallRun(brokers...)
	cfg.Transactional = true
	cfg.Records = 2000
	cfg.AbortRate = 0.3
	return cfg
}

// requireValidTxn checks a transactional run that must find nothing, and
// that it really looked: transactions both committed and aborted, every
// record of a committed transaction read by the final read, and every one
// copied once into the output, which the output's final read read to its
// end.
func requireValidTxn(t *testing.T, h *verify.History, res *verify.Result) {
	t.Helper()
	var report bytes.Buffer
	res.WriteText(&report)
	if !res.Valid || len(res.Warnings) > 0 {
		t.Fatalf("run not valid:\n%s", report.String())
	}
	t.Logf("verdict:\n%s", report.String())
	st := res.Stats
	if st.Txns.Committed == 0 || st.Txns.Aborted == 0 || st.Txns.Unknown != 0 || st.Copies.Committed == 0 {
		t.Fatalf("transactions %+v, copy transactions %+v: want some committed and aborted, none unknown\n%s", st.Txns, st.Copies, report.String())
	}
	committed := map[string]bool{}
	outcome := map[[2]int64]string{}
	for _, tx := range h.Txns {
		outcome[[2]int64{int64(tx.Producer), tx.ID}] = tx.Outcome
	}
	for _, s := range h.Sends {
		if outcome[[2]int64{int64(s.Producer), s.Txn}] == verify.OutcomeCommitted {
			committed[s.Value] = true
		}
	}
	finalIn, finalOut := map[string]bool{}, map[string]bool{}
	for _, c := range h.Consumers {
		if c.Kind != verify.KindFinal {
			continue
		}
		for _, e := range c.Events {
			if e.Type != verify.EventPoll {
				continue
			}
			if c.Topic == h.OutputTopic {
				finalOut[e.Value] = true
			} else {
				finalIn[e.Value] = true
			}
		}
	}
	if len(committed) == 0 || len(finalIn) != len(committed) || len(finalOut) != len(committed) || st.Copied != len(committed) {
		t.Fatalf("%d records committed; the final read read %d, the output's %d, the copy stage copied %d\n%s",
			len(committed), len(finalIn), len(finalOut), st.Copied, report.String())
	}
	for _, f := range h.Final {
		if !f.Reached {
			t.Errorf("final read of %q partition %d did not reach its end: %+v", f.Topic, f.Partition, f)
		}
	}
}

// TestVerifyTransactionalStrata: the transactional mode against one
// Strata node, nothing broken.
func TestVerifyTransactionalStrata(t *testing.T) {
	n := startStrata(t, nil)
	h, res := runVerify(t, txnRun(n.Addr()))
	requireValidTxn(t, h, res)
}

// TestVerifyTransactionalKfake: the same against kfake.
func TestVerifyTransactionalKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, res := runVerify(t, txnRun(c.ListenAddrs()...))
	requireValidTxn(t, h, res)
}
