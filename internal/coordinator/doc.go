// Package coordinator is the runtime Strata's coordinators run on: the
// group coordinator (internal/group, over __consumer_offsets), the
// transaction coordinator (internal/txn, over __transaction_state), and
// the share-group coordinator to come (KIP-932, over __share_group_state).
// It is Kafka's CoordinatorRuntime: it owns everything about a coordinator
// that is not protocol logic, so that the logic can be a pure machine.
//
// # Shards
//
// A coordinator's state is split by the partitions of its internal topic.
// This broker coordinates the keys (group ids, transactional ids) of the
// partitions it leads; each such partition is a Shard, holding one Machine:
//
//	Load(p, epoch, log)   Loading ──replay ok──▶ Active ──Unload(p)──▶ Unloaded
//	                         │                                  ▲
//	                         └──replay failed──▶ Failed ────────┘ (Unload, Close)
//
// The broker calls Runtime.Load when it becomes the leader of partition p
// (at leader epoch epoch) and Runtime.Unload when it stops leading it; a
// Load of a partition already loaded unloads the old shard first. Load
// replays the partition from its start into a fresh Machine in the
// background. Requests for a shard's keys get, by the shard's status
// (Runtime.Acquire):
//
//	no shard here       NOT_COORDINATOR
//	Loading             COORDINATOR_LOAD_IN_PROGRESS
//	Active              the shard, locked, for one event
//	Unloaded, Failed    NOT_COORDINATOR
//	runtime closed      COORDINATOR_NOT_AVAILABLE
//
// # The contract with a Machine
//
// A Machine is one partition's state and protocol logic. It does no I/O,
// starts no goroutine and reads no clock; the runtime calls it with the
// shard's mutex held, one call at a time:
//
//   - Replay(batch, now) applies one committed batch of the partition, in
//     offset order, while loading. An error fails the load.
//   - An event (a request, acquired with Runtime.Acquire; a due deadline;
//     a completed write; the end of the load) is first given its time
//     with SetTime, also Shard.Now. Its effects are
//     data: Writes, taken with TakeWrites when the event ends and appended
//     in order, and deadlines in the Machine's Timers, read with Deadlines.
//   - A Write's Done runs, with the mutex held and in log order, once its
//     records are committed (nil) or failed (the append's error, or
//     ErrUnloaded when the shard stopped serving). Done may queue more
//     writes and deadlines; a Write with no records still waits for the
//     writes before it, so completions keep log order.
//   - A deadline's function runs, with the mutex held, once Shard.Now has
//     reached it; it is given that time.
//
// Options.Loaded and Options.Unloaded are the coordinator's hooks around a
// shard's life (under the mutex): a transaction coordinator resends the
// markers of prepared transactions on load, a group coordinator answers
// parked JoinGroups NOT_COORDINATOR on unload.
//
// # Edges
//
// One writer goroutine per Active shard appends the queued writes to the
// Partition, coalescing what queued up while the previous append was in
// flight into one batch (up to Options.MaxAppendBytes; writes of
// different transactional producers never share a batch), and runs their
// Done. One Clock timer per shard is armed for the earliest deadline.
// Shard.Go starts a goroutine bound to the shard's life (the transaction
// coordinator's marker writers); its context ends on unload.
//
// # Lock order
//
//	Runtime.mu  →  Shard.mu
//
// Runtime.mu guards the shard map and is held only to look a shard up, add
// or remove one. Shard.mu guards the shard's status, Machine, write queue
// and timer. Nothing that blocks is called with Shard.mu held:
// Partition.Append and ReadBatches run without it, and Clock.AfterFunc must
// not run its function synchronously.
package coordinator
