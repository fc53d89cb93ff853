// Package replica owns a partition on this broker: its log, its leader
// epoch and leader-epoch fencing (KIP-320), its high watermark, its
// idempotent producers' state, and the waiters for acks=all produces and
// long-polling fetches. It is the only place that decides what a fetch may
// read (up to the high watermark for consumers) and when an acks=all
// produce is answered. The broker's handlers call it; storage is below it,
// and the broker never touches a partition's storage.Log.
//
// On a single node the in-sync replica set is {self} and the high watermark
// follows the log end offset, or, when every append is flushed
// (flush.messages=1), the flushed offset, so a consumer never reads what a
// crash could lose.
//
// # What a caller may do
//
// Every method of Partition is safe for concurrent use. Reads (Read,
// OffsetForTime, EndOffsetForEpoch) and administrative calls
// (DeleteRecordsBefore, ActiveProducers) check the caller's view of the
// leader epoch and that this replica leads, as Kafka's Partition does:
// FENCED_LEADER_EPOCH when the caller's epoch is older, UNKNOWN_LEADER_EPOCH
// when it is newer, NOT_LEADER_OR_FOLLOWER when this replica does not lead.
// A caller that does not know the epoch passes -1.
//
// # Locks
//
// Lock order: Partition.appendMu, then Partition.mu. appendMu serializes
// appends, so that offsets and the producers' state advance together; mu
// guards the leadership and the watchers. Neither is held while waiting for
// an fsync or for the high watermark, and no function that takes one calls
// out of the package while holding it.
package replica
