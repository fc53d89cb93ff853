package coordinator

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/record"
)

// Partition is the seam to one partition of a coordinator's internal topic
// that this broker leads; the broker implements it over the partition's
// replica. The runtime calls Append and ReadBatches from one goroutine per
// shard at a time, never both at once, and never with a lock of a
// coordinator held.
type Partition interface {
	// Append appends one record batch built by the runtime (magic v2,
	// CRC-32C, no compression; the broker sets the base offset and leader
	// epoch) and returns once it is committed, with acks=all semantics,
	// or failed, or when ctx ends. Errors should wrap the *kerr.Error a
	// produce would get (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS,
	// KAFKA_STORAGE_ERROR, ...); coordinators map them to the errors Kafka
	// answers with. batch is not used after Append returns.
	Append(ctx context.Context, batch []byte) error
	// ReadBatches calls fn with each committed batch from offset from (0
	// means the log start), in offset order, until fn returns false or the
	// log ends. fn must not keep batch after it returns.
	ReadBatches(from int64, fn func(batch []byte) bool) error
}

// ErrUnloaded completes the writes of a shard that stopped serving, and is
// what they fail with if the shard stops while their append is in flight.
// Coordinators answer it as NOT_COORDINATOR.
var ErrUnloaded = errors.New("coordinator: partition unloaded")

// Record is one key/value record of a Write; a nil Value is a tombstone.
type Record struct {
	Key, Value []byte
}

// Producer is the transactional producer a Write's records belong to (a
// TxnOffsetCommit's offsets): they are written in a transactional batch
// with its id and epoch, as Kafka's coordinator writes them.
type Producer struct {
	ID    int64
	Epoch int16
}

// Write is records for the shard's partition and what to do once their
// append is over.
type Write struct {
	Records []Record
	// Producer is set for records of a transaction; nil for the
	// coordinator's own.
	Producer *Producer
	// Done, if set, runs with the shard's mutex held, in log order, with
	// nil once the records are committed or with the append's error.
	Done func(err error)
}

// size is the bound coalescing counts a write against.
func (w *Write) size() int {
	n := 0
	for _, r := range w.Records {
		n += len(r.Key) + len(r.Value) + 16
	}
	return n
}

func sameProducer(a, b *Producer) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// buildBatch is the batch holding recs, stamped with timestampMs.
func buildBatch(recs []Record, p *Producer, timestampMs int64) []byte {
	rs := make([]record.Rec, len(recs))
	for i, r := range recs {
		rs[i] = record.Rec{Key: r.Key, Value: r.Value, Timestamp: timestampMs}
	}
	if p != nil {
		// Sequence 0: the partition does not check a coordinator's
		// sequences.
		return record.BuildTransactional(nil, p.ID, p.Epoch, rs)
	}
	return record.Build(nil, rs)
}

// AppendError is the error a request answers with when its write failed
// with err (Kafka's CoordinatorOperationExceptionHelper, and the group and
// transaction state managers' mappings before it): a coordinator that lost
// its partition is NOT_COORDINATOR, one whose partition cannot take writes
// now COORDINATOR_NOT_AVAILABLE, and a write too large for the log an
// UNKNOWN_SERVER_ERROR; any other Kafka error is answered as it is. It
// returns nil for a nil err.
func AppendError(err error) *kerr.Error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrUnloaded) || errors.Is(err, context.Canceled) {
		return kerr.NotCoordinator
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return kerr.CoordinatorNotAvailable
	}
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return kerr.UnknownServerError
	}
	switch ke {
	case kerr.UnknownTopicOrPartition, kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend, kerr.RequestTimedOut:
		return kerr.CoordinatorNotAvailable
	case kerr.NotLeaderForPartition, kerr.KafkaStorageError:
		return kerr.NotCoordinator
	case kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidFetchSize:
		return kerr.UnknownServerError
	}
	return ke
}
