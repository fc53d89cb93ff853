package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTxnLateEndTxnProcess is KAFKA-17754's late EndTxn against a strata
// serve process: franz-go's transactional producer, through a faultproxy
// that holds its EndTxn, gives up on it (the context ends; TryAbort, and
// a new client if franz-go is fenced), begins the next transaction and
// writes to it; the held EndTxn reaches the broker; the next transaction
// writes again and ends the other way; a last one commits. Four rounds,
// the broker SIGKILLed and restarted after the second. A read_committed consumer then reads no
// record of an aborted transaction, every record of a committed one, none
// twice, and each transaction whole or not at all.
func TestTxnLateEndTxnProcess(t *testing.T) {
	ctx := ctxTimeout(t, 180*time.Second)
	p, proxy := startProxied(t, 1, 0, "transaction.state.log.num.partitions=3", "offsets.topic.num.partitions=3")
	const topic = "late-txn"
	createTopic(t, client(t, p.addr), topic, 1, nil)
	newProducer := func() *kgo.Client {
		return client(t, proxy.Addr(), kgo.TransactionalID(topic), kgo.DefaultProduceTopic(topic),
			kgo.RequestTimeoutOverhead(3*time.Second))
	}
	cl := newProducer()

	type txn struct {
		values []string
		// committed or aborted: what the client was told; neither when
		// it was told nothing for sure.
		committed, aborted bool
	}
	var txns []*txn
	produce := func(x *txn, v string) bool {
		x.values = append(x.values, v)
		return cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr() == nil
	}
	end := func(x *txn, commit bool) {
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Logf("EndTransaction(%v): %v", commit, err)
			return
		}
		x.committed, x.aborted = commit, !commit
	}
	begin := func() {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Logf("BeginTransaction: %v; a new client", err)
			cl.Close()
			cl = newProducer()
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
		}
	}

	for round := range 4 {
		lateCommit := round%2 == 0
		n := &txn{}
		txns = append(txns, n)
		begin()
		for j := range 3 {
			if !produce(n, fmt.Sprintf("r%d-N-%d", round, j)) {
				t.Fatalf("round %d: producing", round)
			}
		}
		h := proxy.HoldRequest(kmsg.EndTxn.Int16())
		endCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- cl.EndTransaction(endCtx, kgo.TransactionEndTry(lateCommit)) }()
		select {
		case <-h.Arrived():
		case <-ctx.Done():
			t.Fatal("the EndTxn never reached the proxy")
		}
		cancel()
		if err := <-done; err == nil {
			n.committed, n.aborted = lateCommit, !lateCommit
		} else if err := cl.EndTransaction(ctx, kgo.TryAbort); err == nil {
			n.aborted = true
		}

		next := &txn{}
		txns = append(txns, next)
		begin()
		ok := produce(next, fmt.Sprintf("r%d-N+1-a", round))
		h.Release()
		if !h.AnsweredByBroker() {
			t.Fatalf("round %d: the late EndTxn's connection closed before the broker answered it", round)
		}
		ok = produce(next, fmt.Sprintf("r%d-N+1-b", round)) && ok
		end(next, !lateCommit && ok)

		// And then a transaction with nothing late about it commits.
		after := &txn{}
		txns = append(txns, after)
		begin()
		if !produce(after, fmt.Sprintf("r%d-N+2", round)) {
			t.Fatalf("round %d: producing after the late EndTxn", round)
		}
		if end(after, true); !after.committed {
			t.Fatalf("round %d: the transaction after the late EndTxn did not commit", round)
		}

		if round == 1 {
			p.kill()
			p.restart()
		}
	}

	// A sentinel from another transactional id, committed last: reading
	// up to it reads everything, and gets there only if nothing was left
	// open that no marker ends.
	sentinel := "sentinel"
	sc := client(t, proxy.Addr(), kgo.TransactionalID(topic+"-sentinel"), kgo.DefaultProduceTopic(topic))
	if err := sc.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := sc.ProduceSync(ctx, &kgo.Record{Value: []byte(sentinel)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := sc.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	consumer := client(t, proxy.Addr(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	var read []string
	for !slices.Contains(read, sentinel) {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_committed read %q, never the sentinel: %v", read, ctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch: %v", e.Err)
		}
		for _, r := range fs.Records() {
			read = append(read, string(r.Value))
		}
	}
	count := map[string]int{}
	for _, v := range read {
		count[v]++
		if count[v] == 2 {
			t.Errorf("duplicate: %q read twice", v)
		}
	}
	for i, x := range txns {
		n := 0
		for _, v := range x.values {
			if count[v] > 0 {
				n++
			}
		}
		switch {
		case n > 0 && n < len(x.values):
			t.Errorf("torn transaction %d: read %d of %q", i, n, x.values)
		case n > 0 && x.aborted:
			t.Errorf("aborted read: transaction %d was aborted, %q read", i, x.values)
		case n == 0 && x.committed:
			t.Errorf("lost write: transaction %d was committed, none of %q read", i, x.values)
		}
	}
	t.Logf("read_committed read %q", read)
}
