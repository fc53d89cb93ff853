package producer

import "fmt"

// Verification guards (KIP-890 part 1, Kafka's VerificationGuard and
// VerificationStateEntry). Before a transactional batch opens its
// producer's transaction on a partition, the leader asks the transaction
// coordinator whether the partition is in the producer's ongoing
// transaction (or, with transactions version 2, has it added). The answer
// comes back after the partition's append lock was released, so a marker
// can land in between: the coordinator ended the transaction after
// answering, the marker found no transaction open here, and the batch
// would now open one that no marker will ever end (a hanging transaction)
// or, worse, slip into the producer's next transaction. So the leader
// takes a guard when it starts the verification, a marker or a
// transactional batch of the producer clears it, and the append opens a
// transaction only if the guard it verified with is still the
// producer's. (A marker above the epoch of the transaction it ends, as
// transactions version 2 writes them, keeps a verification at its epoch
// or later: that one is about the producer's next transaction, which the
// coordinator confirms only once the ended one is complete; EndTxn.)
//
//	under the append lock:  guard, needed := state.StartVerification(id, epoch, seq, now)
//	no lock held:           ask the coordinator (if needed)
//	under the append lock:  a := state.BeginVerified(guard); a.Check(...)
//	                        → ErrInvalidTxnState if the guard was cleared
//
// Guards are not persisted: a leader that restarts or takes over has none,
// and the first write of a transaction is verified again.

// VerificationGuard identifies one verification of a producer's
// transaction on a partition. The zero value is Kafka's sentinel: it
// verifies nothing.
type VerificationGuard uint64

// verificationEntry is a producer's verification in progress, with the
// lowest first sequence (of its latest epoch) verified: a batch after it
// cannot open the transaction while it is retried.
type verificationEntry struct {
	guard     VerificationGuard
	epoch     int16
	lowestSeq int32
	startMs   int64
}

// StartVerification is called under the append lock before a
// transactional batch of producerID at epoch is verified with the
// coordinator. needed is false when the producer has a transaction open
// here at this epoch already (nothing to verify; guard is then the zero
// guard, so an append that finds it ended since fails): Kafka's
// hasOngoingTransaction(producerId, producerEpoch). A transaction open at
// an older epoch is not the batch's: with transactions version 2 the
// epoch is bumped at every end, and the first batch of the producer's
// next transaction can arrive before the marker of the last one, which
// the coordinator is still writing. Verified, it waits for the
// coordinator (CONCURRENT_TRANSACTIONS until the markers are written);
// unverified, it would join the old transaction and be committed or
// aborted with it. Otherwise guard is the
// producer's verification entry's, made now if it has none: concurrent
// verifications of one producer share it, as in Kafka, and a marker (but
// a bumped one for a later epoch, above) or a transactional batch of the
// producer clears it. The entry keeps the
// lowest first sequence verified at the producer's latest epoch: a batch
// with a higher one cannot open the transaction before it
// (ErrOutOfOrderSequence), so that when a verification fails with a
// retriable error, a later batch verified meanwhile does not go in first
// and leave the retry out of order for good (Kafka's
// maybeUpdateLowestSequenceAndEpoch).
func (s *PartitionState) StartVerification(producerID int64, epoch int16, sequence int32, nowMs int64) (guard VerificationGuard, needed bool) {
	if s.txnOpenAt(producerID, epoch) {
		return 0, false
	}
	v, ok := s.verifying[producerID]
	switch {
	case !ok:
		s.lastGuard++
		v = verificationEntry{guard: VerificationGuard(s.lastGuard), epoch: epoch, lowestSeq: sequence, startMs: nowMs}
	case epoch > v.epoch:
		v.epoch, v.lowestSeq = epoch, sequence
	case epoch == v.epoch:
		v.lowestSeq = min(v.lowestSeq, sequence)
	}
	s.verifying[producerID] = v
	return v.guard, true
}

// afterLowestVerified reports whether a batch at epoch with first
// sequence seq comes after the lowest one being verified for the
// producer.
func (s *PartitionState) afterLowestVerified(producerID int64, epoch int16, seq int32) bool {
	v, ok := s.verifying[producerID]
	return ok && v.epoch == epoch && seq > v.lowestSeq
}

// BeginVerified opens the partition's Append, as Begin, for a produce
// whose transactional batches were verified with guard (zero when none
// was): a batch that would open its producer's transaction is refused
// with ErrInvalidTxnState unless guard is still the producer's.
func (s *PartitionState) BeginVerified(guard VerificationGuard) *Append {
	a := s.Begin()
	a.verify, a.guard = true, guard
	return a
}

// verified reports whether guard is producerID's current verification.
func (s *PartitionState) verified(producerID int64, guard VerificationGuard) bool {
	v, ok := s.verifying[producerID]
	return guard != 0 && ok && v.guard == guard
}

// clearVerification forgets producerID's verification: its transaction
// opened or ended here.
func (s *PartitionState) clearVerification(producerID int64) {
	delete(s.verifying, producerID)
}

// expireVerifications forgets verifications started expirationMs or more
// before nowMs (never completed: the client gave up).
func (s *PartitionState) expireVerifications(nowMs, expirationMs int64) {
	for id, v := range s.verifying {
		if nowMs-v.startMs >= expirationMs {
			delete(s.verifying, id)
		}
	}
}

// errUnverified is the refusal of a transaction-opening batch whose
// verification no longer holds.
func errUnverified(guard VerificationGuard) string {
	if guard == 0 {
		return "it would open a transaction and was not verified with the coordinator"
	}
	return fmt.Sprintf("it would open a transaction, and its verification (guard %d) was overtaken by a marker", guard)
}
