package producer

import (
	"errors"
	"testing"

	"github.com/strata-io/strata/internal/record"
)

// produceVerified is testLog.produce after BeginVerified(guard).
func (l *testLog) produceVerified(guard VerificationGuard, hs ...record.Header) error {
	a := l.state.BeginVerified(guard)
	for _, h := range hs {
		if _, err := a.Check(h); err != nil {
			return err
		}
	}
	base := l.leo
	for _, h := range hs {
		h.BaseOffset = l.leo
		l.log = append(l.log, h)
		l.leo = h.NextOffset()
	}
	a.Commit(base)
	return nil
}

// TestVerificationGuard plays, in order, the steps that the broker runs
// with the append lock released between them: the leader starts a
// verification, the coordinator answers, and only then does the batch get
// appended. A marker landing in between (the coordinator ended the
// transaction after answering) clears the guard, and the append that would
// open a transaction no marker will end is refused.
func TestVerificationGuard(t *testing.T) {
	const pid = 7
	l := newTestLog()

	// No marker in between: the verified batch opens the transaction,
	// which clears the guard.
	g, needed := l.state.StartVerification(pid, 0, 0, 1000)
	if !needed || g == 0 {
		t.Fatalf("verification of a producer with no transaction open: guard %d, needed %v", g, needed)
	}
	if again, _ := l.state.StartVerification(pid, 0, 0, 1001); again != g {
		t.Fatalf("a second verification before the append: guard %d, want the same %d", again, g)
	}
	if err := l.produceVerified(g, txnal(batch(pid, 0, 0, 2))); err != nil {
		t.Fatalf("verified first batch: %v", err)
	}
	if l.state.FirstUnstableOffset() != 0 {
		t.Fatalf("first unstable offset %d, want 0", l.state.FirstUnstableOffset())
	}
	// The transaction is open: later batches need no verification, and
	// the zero guard will do for them.
	if _, needed := l.state.StartVerification(pid, 0, 0, 1002); needed {
		t.Fatal("verification needed with the transaction open")
	}
	if err := l.produceVerified(0, txnal(batch(pid, 0, 2, 1))); err != nil {
		t.Fatalf("batch in the open transaction: %v", err)
	}
	// A batch checked while the transaction was open, appended after its
	// marker: the zero guard opens nothing.
	l.state.EndTxn(marker(pid, 1, l.leo), record.Marker{CoordinatorEpoch: 1})
	l.leo++
	if err := l.produceVerified(0, txnal(batch(pid, 1, 0, 1))); !errors.Is(err, ErrInvalidTxnState) {
		t.Fatalf("unverified batch opening a transaction after the marker: %v, want ErrInvalidTxnState", err)
	}

	// KAFKA-17754's late produce with the window closed: the verification
	// starts, the coordinator answers that the partition is in the
	// transaction, then the transaction is aborted and its marker lands
	// here before the append.
	g1, needed := l.state.StartVerification(pid, 1, 0, 2000)
	if !needed || g1 == g {
		t.Fatalf("new verification: guard %d (old %d), needed %v", g1, g, needed)
	}
	l.state.EndTxn(marker(pid, 1, l.leo), record.Marker{CoordinatorEpoch: 1})
	l.leo++
	end := l.leo
	if err := l.produceVerified(g1, txnal(batch(pid, 1, 0, 1))); !errors.Is(err, ErrInvalidTxnState) {
		t.Fatalf("batch verified before the marker, appended after it: %v, want ErrInvalidTxnState", err)
	}
	if l.leo != end || l.state.FirstUnstableOffset() != -1 {
		t.Fatalf("the refused batch left log end %d (want %d), first unstable offset %d", l.leo, end, l.state.FirstUnstableOffset())
	}
	// The client's retry verifies again, with a new guard; the stale one
	// stays refused.
	g2, _ := l.state.StartVerification(pid, 1, 0, 2001)
	if g2 == g1 {
		t.Fatalf("the retry got the cleared guard %d again", g2)
	}
	if err := l.produceVerified(g1, txnal(batch(pid, 1, 0, 1))); !errors.Is(err, ErrInvalidTxnState) {
		t.Fatalf("stale guard: %v", err)
	}
	if err := l.produceVerified(g2, txnal(batch(pid, 1, 0, 1))); err != nil {
		t.Fatalf("retry with its own guard: %v", err)
	}

	// A producer new here: its first request's verification failed with
	// a retriable error (nothing appended) and its second, pipelined
	// behind it, is verified meanwhile. The second cannot open the
	// transaction before the first is retried, or the retry would be out
	// of order for good.
	g5, _ := l.state.StartVerification(20, 0, 0, 4000)
	if g6, _ := l.state.StartVerification(20, 0, 5, 4001); g6 != g5 {
		t.Fatalf("second verification of producer 20: guard %d, want %d", g6, g5)
	}
	if err := l.produceVerified(g5, txnal(batch(20, 0, 5, 1))); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("a batch after the lowest one verified: %v, want ErrOutOfOrderSequence", err)
	}
	if err := l.produceVerified(g5, txnal(batch(20, 0, 0, 5)), txnal(batch(20, 0, 5, 1))); err != nil {
		t.Fatalf("the retry in order: %v", err)
	}

	// Without BeginVerified (coordinator writes, replay) nothing is
	// checked, as before.
	if _, _, err := l.produce(txnal(batch(9, 0, 0, 1))); err != nil {
		t.Fatalf("unverified append of another producer: %v", err)
	}

	// A verification never completed expires with the producers; Reset
	// forgets all of them.
	g3, _ := l.state.StartVerification(11, 0, 0, 3000)
	l.state.Expire(3000+DefaultExpirationMs, DefaultExpirationMs)
	if err := l.produceVerified(g3, txnal(batch(11, 0, 0, 1))); !errors.Is(err, ErrInvalidTxnState) {
		t.Fatalf("expired guard: %v", err)
	}
	g4, _ := l.state.StartVerification(12, 0, 0, 3000)
	l.state.Reset()
	if err := l.produceVerified(g4, txnal(batch(12, 0, 0, 1))); !errors.Is(err, ErrInvalidTxnState) {
		t.Fatalf("guard after Reset: %v", err)
	}
}

// TestVerificationAtANewEpoch is transactions version 2's race: the
// epoch is bumped at every EndTxn, and the coordinator answers EndTxn
// before its markers have reached every partition, so the first batch of
// the producer's next transaction (epoch e+1) can reach a partition
// where its last one (epoch e) is still open. That batch is not in the
// open transaction: it must be verified with the coordinator (which
// answers CONCURRENT_TRANSACTIONS until the markers are written), and it
// can never join the open one, whose marker would commit or abort it
// with the wrong transaction.
func TestVerificationAtANewEpoch(t *testing.T) {
	const pid = 7
	l := newTestLog()
	g, _ := l.state.StartVerification(pid, 0, 0, 1000)
	if err := l.produceVerified(g, txnal(batch(pid, 0, 0, 2))); err != nil {
		t.Fatalf("first transaction: %v", err)
	}
	if _, needed := l.state.StartVerification(pid, 0, 2, 1001); needed {
		t.Fatal("a batch of the open transaction's epoch needs no verification")
	}
	g1, needed := l.state.StartVerification(pid, 1, 0, 1002)
	if !needed || g1 == 0 {
		t.Fatalf("first batch of epoch 1 with epoch 0's transaction open: guard %d, needed %v; want a verification", g1, needed)
	}
	// Even verified, it does not join epoch 0's transaction, and without
	// verification (the coordinators' own appends) neither.
	end := l.leo
	if err := l.produceVerified(g1, txnal(batch(pid, 1, 0, 1))); !errors.Is(err, ErrInvalidTxnState) {
		t.Fatalf("epoch 1's batch into epoch 0's open transaction: %v, want ErrInvalidTxnState", err)
	}
	if _, _, err := l.produce(txnal(batch(pid, 1, 0, 1))); !errors.Is(err, ErrInvalidTxnState) {
		t.Fatalf("unverified, epoch 1's batch into epoch 0's open transaction: %v, want ErrInvalidTxnState", err)
	}
	if l.leo != end || l.state.FirstUnstableOffset() != 0 {
		t.Fatalf("refused batches left log end %d (want %d), first unstable offset %d (want 0)", l.leo, end, l.state.FirstUnstableOffset())
	}
	// The marker (epoch 1, as transactions version 2 writes it) ends
	// epoch 0's transaction; the next batch opens epoch 1's, verified.
	done := l.state.EndTxn(marker(pid, 1, l.leo), record.Marker{Commit: true})
	l.leo++
	if done.FirstOffset != 0 {
		t.Fatalf("the marker ended a transaction from %d, want 0", done.FirstOffset)
	}
	g2, needed := l.state.StartVerification(pid, 1, 0, 1003)
	if !needed {
		t.Fatal("no verification for the first batch of epoch 1's transaction")
	}
	first := l.leo
	if err := l.produceVerified(g2, txnal(batch(pid, 1, 0, 1))); err != nil {
		t.Fatalf("epoch 1's transaction after the marker: %v", err)
	}
	if l.state.FirstUnstableOffset() != first {
		t.Fatalf("first unstable offset %d, want %d", l.state.FirstUnstableOffset(), first)
	}
}

// TestVerificationAcrossABumpedMarker: the first batch of epoch 1's
// transaction meets epoch 0's still open, is verified, and epoch 0's
// marker (at epoch 1, as transactions version 2 writes it) lands while
// the coordinator is asked. The coordinator confirms epoch 1's
// transaction only once epoch 0's is complete, so the verification was
// about the next transaction and still holds: the batch opens it,
// instead of being refused with INVALID_TXN_STATE, which fails a
// version 2 producer for good. A marker at the data's epoch (version 1)
// still clears every verification (TestVerificationGuard).
func TestVerificationAcrossABumpedMarker(t *testing.T) {
	const pid = 7
	l := newTestLog()
	g, _ := l.state.StartVerification(pid, 0, 0, 1000)
	if err := l.produceVerified(g, txnal(batch(pid, 0, 0, 2))); err != nil {
		t.Fatalf("epoch 0's transaction: %v", err)
	}
	g1, needed := l.state.StartVerification(pid, 1, 0, 1001)
	if !needed {
		t.Fatal("epoch 1's first batch not verified")
	}
	l.state.EndTxn(marker(pid, 1, l.leo), record.Marker{Commit: true})
	l.leo++
	first := l.leo
	if err := l.produceVerified(g1, txnal(batch(pid, 1, 0, 1))); err != nil {
		t.Fatalf("epoch 1's batch, verified across epoch 0's marker: %v", err)
	}
	if l.state.FirstUnstableOffset() != first {
		t.Fatalf("first unstable offset %d, want %d", l.state.FirstUnstableOffset(), first)
	}

	// A verification of the ended epoch does not survive the marker.
	const other = 8
	g2, _ := l.state.StartVerification(other, 0, 0, 2000)
	if err := l.produceVerified(g2, txnal(batch(other, 0, 0, 1))); err != nil {
		t.Fatalf("producer 8's transaction: %v", err)
	}
	g3, _ := l.state.StartVerification(other, 0, 5, 2001) // not needed: open at epoch 0
	l.state.EndTxn(marker(other, 1, l.leo), record.Marker{})
	l.leo++
	if err := l.produceVerified(g3, txnal(batch(other, 0, 1, 1))); err == nil {
		t.Fatal("a batch of the epoch a marker ended was appended")
	}
}
