package replica

import (
	"errors"
	"testing"

	"github.com/strata-io/strata/internal/producer"
)

// TestAppendVerifiedAfterAMarker: on a real log, a marker appended
// between a transactional batch's verification and its append (the
// coordinator ended the transaction after answering) makes the append
// fail, so the late batch opens no transaction that would hold the last
// stable offset back; the retry, verified again, goes in.
func TestAppendVerifiedAfterAMarker(t *testing.T) {
	p := newLeader(t, openLog(t, t.TempDir()), Settings{MinInsyncReplicas: 1})
	if _, err := p.AppendAsLeader(batch(2, -1, 0), -1); err != nil {
		t.Fatal(err)
	}
	late := txnBatch(1, 7, 0)
	id, epoch, guard, needed := p.StartTxnVerification(late)
	if id != 7 || epoch != 0 || !needed {
		t.Fatalf("verification of the first transactional batch: producer %d epoch %d needed %v", id, epoch, needed)
	}
	// The coordinator answers "in the transaction", then aborts it; the
	// marker finds nothing open here.
	if _, err := p.AppendMarker(7, 0, false, 1); err != nil {
		t.Fatal(err)
	}
	end := p.log.LogEndOffset()
	if _, err := p.AppendVerified(late, -1, guard); !errors.Is(err, producer.ErrInvalidTxnState) {
		t.Fatalf("append verified before the marker: %v, want ErrInvalidTxnState", err)
	}
	if p.log.LogEndOffset() != end || p.LastStableOffset() != p.HighWatermark() {
		t.Fatalf("after the refused append: log end %d (want %d), last stable offset %d, high watermark %d",
			p.log.LogEndOffset(), end, p.LastStableOffset(), p.HighWatermark())
	}
	// The retry is verified again.
	_, _, guard, needed = p.StartTxnVerification(late)
	if !needed {
		t.Fatal("the retry needs no verification")
	}
	if _, err := p.AppendVerified(late, -1, guard); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if lso := p.LastStableOffset(); lso != end {
		t.Fatalf("last stable offset %d, want %d (the transaction the retry opened)", lso, end)
	}
	// Batches of the open transaction need no guard.
	if _, _, _, needed := p.StartTxnVerification(txnBatch(1, 7, 1)); needed {
		t.Fatal("verification needed inside the open transaction")
	}
	if _, err := p.AppendVerified(txnBatch(1, 7, 1), -1, 0); err != nil {
		t.Fatal(err)
	}
}
