package producer

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Errors returned by Append.Check. The broker answers the partition with
// ErrorCode(err) and appends none of the request's batches for it.
var (
	// ErrOutOfOrderSequence is returned when a batch's first sequence does
	// not follow the producer's last one (a gap, or a retry older than the
	// cached batches), when a new epoch does not start at sequence 0, and
	// when one request mixes retried and new batches.
	ErrOutOfOrderSequence = errors.New("producer: out of order sequence number")
	// ErrInvalidProducerEpoch is returned when a batch's epoch is lower
	// than the producer's current one: a zombie, fenced by a newer
	// instance.
	ErrInvalidProducerEpoch = errors.New("producer: invalid producer epoch")
	// ErrInvalidRecord is returned for a batch with a producer id but a
	// negative base sequence, which Kafka's LogValidator refuses, or a
	// negative epoch, which no producer id is handed out with.
	ErrInvalidRecord = errors.New("producer: invalid sequence number in idempotent batch")
	// ErrInvalidTxnState is returned for a non-transactional batch from a
	// producer with a transaction open on the partition, and (after
	// BeginVerified) for a batch that would open a transaction whose
	// verification with the coordinator no longer holds.
	ErrInvalidTxnState = errors.New("producer: batch does not match the producer's transaction state")
	// ErrCoordinatorFenced is returned by CheckMarker for a marker from a
	// transaction coordinator older than the last one that wrote one.
	ErrCoordinatorFenced = errors.New("producer: transaction coordinator fenced")
)

// Errors of the producer id allocator.
var (
	// ErrIDsUnavailable is returned by IDAllocator.NextID when the next
	// block of ids could not be reserved. Kafka answers
	// COORDINATOR_LOAD_IN_PROGRESS while it waits for a block, and clients
	// retry InitProducerId.
	ErrIDsUnavailable = errors.New("producer: no producer id block available")
	// ErrIDsExhausted is returned when the reservation callback hands out a
	// block that overlaps ids already given out or runs past MaxInt64: a
	// broken metadata log. It is not retried.
	ErrIDsExhausted = errors.New("producer: producer id block invalid or exhausted")
)

// ErrCorruptSnapshot is returned by LoadSnapshot and Rebuild for a snapshot
// that cannot be trusted; the state is left as it was. Recovery deletes the
// file and falls back to an older snapshot or to the log start, as Kafka
// does.
var ErrCorruptSnapshot = errors.New("producer: corrupt producer state snapshot")

// ErrorCode returns the Kafka error code the broker answers for err, which
// should come from this package; 0 for nil and UNKNOWN_SERVER_ERROR for
// anything it does not know.
func ErrorCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, ErrInvalidProducerEpoch):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, ErrInvalidRecord):
		return kerr.InvalidRecord.Code
	case errors.Is(err, ErrInvalidTxnState):
		return kerr.InvalidTxnState.Code
	case errors.Is(err, ErrCoordinatorFenced):
		return kerr.TransactionCoordinatorFenced.Code
	case errors.Is(err, ErrIDsUnavailable):
		return kerr.CoordinatorLoadInProgress.Code
	default:
		return kerr.UnknownServerError.Code
	}
}
