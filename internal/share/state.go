package share

import "fmt"

// DeliveryState is a record's state in a share-partition, with Kafka's
// codes (the codes of ShareSnapshotValue and WriteShareGroupState).
type DeliveryState int8

const (
	Available    DeliveryState = 0
	Acquired     DeliveryState = 1 // in memory only: written as Available
	Acknowledged DeliveryState = 2
	Archived     DeliveryState = 4
)

func (s DeliveryState) String() string {
	switch s {
	case Available:
		return "AVAILABLE"
	case Acquired:
		return "ACQUIRED"
	case Acknowledged:
		return "ACKNOWLEDGED"
	case Archived:
		return "ARCHIVED"
	}
	return fmt.Sprintf("DeliveryState(%d)", int8(s))
}

// done reports whether a record in state s is never delivered again.
func (s DeliveryState) done() bool { return s == Acknowledged || s == Archived }

// AckType is how a consumer acknowledges records, with the codes of
// ShareFetch and ShareAcknowledge (AcknowledgeTypes).
type AckType int8

const (
	AckGap     AckType = 0 // the offsets hold no records (compacted, markers)
	AckAccept  AckType = 1
	AckRelease AckType = 2
	AckReject  AckType = 3
)

// Config is a share-partition's configuration.
type Config struct {
	// LockDurationMs is group.share.record.lock.duration.ms (30000): how
	// long an acquired record stays locked to its member.
	LockDurationMs int64
	// DeliveryCountLimit is group.share.delivery.count.limit (5): a
	// record released or timed out after this many deliveries is archived.
	DeliveryCountLimit int16
	// MaxRecordLocks is group.share.partition.max.record.locks (2000):
	// the most offsets in flight (SPEO-SPSO+1) when new ones are acquired.
	MaxRecordLocks int64
	// ReadCommitted is share.isolation.level=read_committed (default
	// read_uncommitted): aborted transactions' records are archived, never
	// delivered.
	ReadCommitted bool
}

// DefaultConfig is Kafka's defaults.
func DefaultConfig() Config {
	return Config{LockDurationMs: 30000, DeliveryCountLimit: 5, MaxRecordLocks: 2000}
}

// StateBatch is a range of offsets in one durable state: the state batch
// of WriteShareGroupState, ReadShareGroupState and the __share_group_state
// records. DeliveryState is never Acquired in what a Partition writes.
type StateBatch struct {
	FirstOffset   int64
	LastOffset    int64
	DeliveryState DeliveryState
	DeliveryCount int16
}

// Write is a Partition's effect: a change to its durable state, which the
// persister writes (WriteShareGroupState) before the input's result is
// acted on. Snapshot is set when Batches are the whole state (an
// initialization or a reset); otherwise they are the batches that changed.
type Write struct {
	Snapshot    bool
	StateEpoch  int32
	LeaderEpoch int32
	StartOffset int64
	Batches     []StateBatch
}

// AcquiredRecords is a range of offsets acquired by one member: the
// AcquiredRecords of a ShareFetch response partition.
type AcquiredRecords struct {
	FirstOffset   int64
	LastOffset    int64
	DeliveryCount int16
}

// LogBatch is a batch read from the partition's log, as Acquire needs it.
type LogBatch struct {
	FirstOffset   int64
	LastOffset    int64
	ProducerID    int64
	Transactional bool
	Control       bool // a transaction marker: never delivered
}

// AbortedTransaction is an aborted transaction overlapping the batches
// read, as a Fetch response lists them: the producer's records from
// FirstOffset up to its abort marker are aborted.
type AbortedTransaction struct {
	ProducerID  int64
	FirstOffset int64
}

// AckBatch is one acknowledgement batch of ShareFetch or
// ShareAcknowledge: Types holds one type for the whole range, or one per
// offset.
type AckBatch struct {
	FirstOffset int64
	LastOffset  int64
	Types       []AckType
}
