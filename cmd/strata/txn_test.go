package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTxnListAndDescribe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ok(t, "", "topic", "create", "txn-cli", "--partitions", "2")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.TransactionalID("cli-txn"), kgo.DefaultProduceTopic("txn-cli"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	listed := okJSON[[]txnListEntry](t, "", "txn", "list", "--state", "Ongoing")
	found := false
	for _, e := range listed {
		found = found || e.TransactionalID == "cli-txn"
	}
	if !found {
		t.Fatalf("txn list --state Ongoing: %+v", listed)
	}
	// --pattern matches whole ids (ListTransactions v2): "cli-txn" and
	// ".*txn", not "cli".
	for pattern, want := range map[string]bool{"cli-txn": true, "c.i-t.n": true, ".*txn": true, "cli": false, "txn": false} {
		listed := okJSON[[]txnListEntry](t, "", "txn", "list", "--pattern", pattern)
		found := false
		for _, e := range listed {
			found = found || e.TransactionalID == "cli-txn"
		}
		if found != want {
			t.Errorf("txn list --pattern %q: %+v, want cli-txn listed: %v", pattern, listed, want)
		}
	}
	fails(t, "INVALID_REGULAR_EXPRESSION", "txn", "list", "--pattern", "(?=cli)")
	d := okJSON[[]txnDescribeEntry](t, "", "txn", "describe", "cli-txn")
	if len(d) != 1 || d[0].State != "Ongoing" || len(d[0].Partitions) == 0 || d[0].StartTime == "" || d[0].Error != "" {
		t.Fatalf("txn describe: %+v", d)
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if out := ok(t, "", "txn", "describe", "cli-txn"); len(out) == 0 {
		t.Fatal("no table")
	}
}
