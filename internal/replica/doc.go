// Package replica owns a partition on this broker: its log, its leader
// epoch and leader-epoch fencing (KIP-320), its high watermark, its
// idempotent producers' state (with their open transactions, txn.go), and
// the waiters for acks=all produces and long-polling fetches. It is the only
// place that decides what a fetch may read (up to the high watermark for
// consumers, the last stable offset for read_committed ones, with the
// aborted transactions of what they read) and when an acks=all produce is
// answered. The broker's handlers call it; storage is below it,
// and the broker never touches a partition's storage.Log.
//
// On a single node the in-sync replica set is {self} and the high watermark
// follows the log end offset, or, when every append is flushed
// (flush.messages=1), the flushed offset, so a consumer never reads what a
// crash could lose.
//
// The high watermark is handed to the log (storage.Log.SetHighWatermark)
// whenever it moves; the storage Manager checkpoints it in
// replication-offset-checkpoint. A replica opened after a restart starts
// from the checkpointed value, not from its log end: records past it may
// never have been committed. As leader it shows them only once the ISR
// has them, like any new leader, whose high watermark is the one it had as
// a follower. The sole replica of a partition, first led after opening,
// shows all it recovered.
//
// # Replication
//
// Kafka's ISR protocol over the Kafka protocol. The leader's view of its
// followers (their log end offsets and last caught-up times, the ISR, the
// high watermark, the acks=all produces waiting) is plain data, tracker
// (tracker.go): events in, effects out, no I/O, tested with the scripts in
// testdata/tracker. Partition is its edge: it feeds it the leader's appends,
// its followers' fetches (Read with a FollowerRead) and Tick, and carries
// out the effects; ISR changes go to the controller through
// Options.AlterPartition (AlterPartition, API 56).
//
// A follower (follower.go) is fed by a Fetcher (fetcher.go), one goroutine
// per source broker: it appends the leader's batches as stored, takes the
// leader's high watermark, and truncates where its log diverged from the
// leader's (Fetch's DivergingEpoch), never to its own high watermark.
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
// Lock order: Fetcher.mu, then Partition.appendMu, then Partition.mu.
// appendMu serializes appends and truncations, so that offsets and the
// producers' state advance together; mu guards the tracker, the watchers
// and the waiting produces. Fetcher.mu guards a fetcher's partitions. Neither is held while waiting for
// an fsync or for the high watermark, and no function that takes one calls
// out of the package while holding it.
package replica
