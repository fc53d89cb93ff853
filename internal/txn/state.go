package txn

import (
	"cmp"
	"math"
	"slices"
	"unicode/utf16"
)

// State is a transaction's state, with Kafka's on-disk numbering
// (TransactionState.id, the State byte of TxnMetadataValue).
type State int8

// Kafka's transaction states.
const (
	Empty             State = 0 // no transaction open; the producer id is initialized
	Ongoing           State = 1 // partitions or offsets added, no EndTxn yet
	PrepareCommit     State = 2 // EndTxn(commit) written; markers being sent
	PrepareAbort      State = 3 // EndTxn(abort) or expiry written; markers being sent
	CompleteCommit    State = 4 // every partition has the COMMIT marker
	CompleteAbort     State = 5 // every partition has the ABORT marker
	Dead              State = 6 // the transactional id expired; its tombstone is being written
	PrepareEpochFence State = 7 // a newer producer fences an ongoing transaction; never persisted
)

var stateNames = [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

// String is the name DescribeTransactions and ListTransactions use.
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "Unknown"
}

// ParseState is the inverse of String; ok is false for a name that is none.
func ParseState(name string) (State, bool) {
	for i, n := range stateNames {
		if n == name {
			return State(i), true
		}
	}
	return 0, false
}

// validPrevious is Kafka's TransactionState.validPreviousStates: the states
// a transition into each state may start from.
var validPrevious = map[State][]State{
	Empty:             {Empty, CompleteCommit, CompleteAbort},
	Ongoing:           {Ongoing, Empty, CompleteCommit, CompleteAbort},
	PrepareCommit:     {Ongoing},
	PrepareAbort:      {Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort}, // the last three: v2's empty abort
	CompleteCommit:    {PrepareCommit},
	CompleteAbort:     {PrepareAbort},
	Dead:              {Empty, CompleteAbort, CompleteCommit},
	PrepareEpochFence: {Ongoing},
}

// TopicPartition names one partition of a transaction.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func compareTP(a, b TopicPartition) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// Metadata is what the coordinator knows of one transactional id: Kafka's
// TransactionMetadata, less the lock (the shard's covers it).
type Metadata struct {
	TransactionalID string
	ProducerID      int64
	// PreviousProducerID is the id before the last rotation (epoch
	// exhausted), so that a retried InitProducerId or EndTxn is
	// recognised; -1.
	PreviousProducerID int64
	// NextProducerID is the id a transactions-v2 EndTxn rotated to
	// because the epoch was exhausted: the transaction ends (markers) at
	// ProducerID and the id becomes NextProducerID, at epoch 0, once it
	// is complete; -1 otherwise.
	NextProducerID int64
	ProducerEpoch  int16
	// LastProducerEpoch is the epoch before the last bump, for KIP-360
	// retries of InitProducerId; -1.
	LastProducerEpoch int16
	TimeoutMs         int32
	State             State
	// ClientTransactionVersion is the transactions version of the
	// client's last EndTxn or implicit add: 2 once it bumps the epoch
	// per transaction (EndTxn v5+, Produce v12+), 0 before.
	ClientTransactionVersion int16
	// Partitions are the transaction's partitions, sorted.
	Partitions []TopicPartition
	// StartMs is when the transaction went Ongoing (-1 when none), and
	// LastUpdateMs when the metadata last changed.
	StartMs      int64
	LastUpdateMs int64

	// pending is the transition being written, nil when none: while it is
	// set, requests for the id get CONCURRENT_TRANSACTIONS.
	pending *Metadata
	// markersSent is set while the markers of a PrepareCommit or
	// PrepareAbort are out.
	markersSent bool
}

func (m *Metadata) clone() *Metadata {
	c := *m
	c.Partitions = slices.Clone(m.Partitions)
	c.pending = nil
	c.markersSent = false
	return &c
}

func (m *Metadata) hasPartition(tp TopicPartition) bool {
	_, ok := slices.BinarySearchFunc(m.Partitions, tp, compareTP)
	return ok
}

// addPartitions returns m's partitions with tps added, sorted, deduplicated.
func addPartitions(have, tps []TopicPartition) []TopicPartition {
	out := append(slices.Clone(have), tps...)
	slices.SortFunc(out, compareTP)
	return slices.CompactFunc(out, func(a, b TopicPartition) bool { return compareTP(a, b) == 0 })
}

// epochExhausted is Kafka's TransactionMetadata.isEpochExhausted: the epoch
// must not be bumped further (Short.MaxValue - 1: a bump for fencing may
// still be needed).
func epochExhausted(epoch int16) bool { return epoch >= math.MaxInt16-1 }

// javaStringHashCode is Java's String.hashCode over the UTF-16 code units
// of s, in wrapping int32 arithmetic.
func javaStringHashCode(s string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(u)
	}
	return h
}

// PartitionFor is Kafka's TransactionStateManager.partitionFor:
// Utils.abs(transactionalId.hashCode) % numPartitions.
func PartitionFor(transactionalID string, numPartitions int32) int32 {
	h := javaStringHashCode(transactionalID)
	switch {
	case h == math.MinInt32:
		h = 0
	case h < 0:
		h = -h
	}
	return h % numPartitions
}
