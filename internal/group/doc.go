// Package group is Strata's group coordinator: the classic consumer group
// protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup; eager and
// cooperative assignors alike, since the broker never looks inside an
// assignment), the KIP-848 consumer protocol (ConsumerGroupHeartbeat with
// the server-side uniform and range assignors), committed offsets, and the
// admin APIs over groups. It follows Kafka's GroupMetadataManager and
// OffsetMetadataManager (Kafka 4.x, the "new" coordinator) in behaviour and
// error codes; the places it departs are listed at the end.
//
// # Shards
//
// Group state lives in the internal topic __consumer_offsets. A group
// belongs to partition HashPartition(groupID), and the broker leading that
// partition is the group's coordinator. The broker calls Load when it becomes
// leader of a partition and Unload when it stops being leader. Each loaded
// partition is a shard: the groups and offsets that hash to it, rebuilt by
// replaying the partition, plus a write queue and a set of deadlines. Shards
// are independent; requests to different shards never contend. The shared
// coordinator runtime (internal/coordinator) runs them: status, loading and
// unloading, replay, the writer, the timer.
//
// # Wiring it into the broker
//
//   - FindCoordinator (key type GROUP): the coordinator is the leader of
//     __consumer_offsets partition HashPartition(key). The broker creates
//     the topic on first use (compacted, offsets.topic.num.partitions
//     partitions) and answers COORDINATOR_NOT_AVAILABLE while the partition
//     has no leader.
//   - When this broker becomes leader of a __consumer_offsets partition,
//     call Load with a coordinator.Partition over that replica; when it stops
//     being leader (or the partition goes away), call Unload; on shutdown,
//     Close. Requests in between get COORDINATOR_LOAD_IN_PROGRESS or
//     NOT_COORDINATOR, which clients retry.
//   - Call one method per API with the decoded request (api.go). JoinGroup
//     and SyncGroup park until the rebalance gets there; OffsetCommit,
//     OffsetDelete, LeaveGroup, DeleteGroups and ConsumerGroupHeartbeat wait
//     for their append. Run them as deferred responses. Authorization
//     (GROUP and TOPIC ACLs, AuthorizedOperations) stays in the broker.
//   - DeleteTopics calls DeleteTopicOffsets; metrics and the CLI read
//     GroupOffsets and subtract committed offsets from high watermarks.
//
// # State machine and edges
//
// The protocol logic (classic.go, consumer.go, offsets.go, admin.go,
// txn.go) is methods of state (state.go), the coordinator.Machine of one
// partition. It runs under the shard's mutex and touches no goroutine,
// socket or clock: it reads the time the runtime gives it (state.now), and
// its effects are data — records queued for the partition (state.out, taken
// by the runtime when the event ends), deadlines in a keyed timer set
// (state.timers), and responses sent on buffered channels the request
// handler waits on. The edges are the runtime's: one goroutine per shard
// appends queued records and runs their completions in log order, and one
// Clock timer armed for the earliest deadline feeds expirations back under
// the mutex. Scripts (machine_test.go, testdata/machine) drive the state
// alone — requests, time, and the commit or failure of its records — for
// the classic protocol and KIP-848; the other tests run the whole
// coordinator with a fake Clock and an in-memory partition.
//
// # Lock order
//
//	coordinator.Runtime.mu  →  coordinator.Shard.mu
//
// The runtime's mutex guards the shard map and is held only to look a shard
// up, add or remove one; it is never taken while a shard's mutex is held.
// The shard's mutex guards everything inside a shard, state included (api.go
// takes it with shardFor, lockEvent and unlockEvent). Nothing is called with
// it held that can block: Partition.Append and ReadBatches run without it,
// responses go to buffered channels, and Clock.AfterFunc must not run its
// function synchronously.
//
// # Persistence
//
// Every record this package writes is a key/value pair in a magic v2 record
// batch built by the runtime with record.Build (no compression, producer id
// -1, CRC-32C; the broker assigns offsets and the leader epoch), encoded
// with kmsg's codecs:
//
//	key                         value                         meaning
//	OffsetCommitKey v1          OffsetCommitValue v3 (v1 when  a committed offset
//	 (group, topic, partition)   the commit set a retention)
//	OffsetCommitKey v1          nil (tombstone)               offset deleted or expired
//	GroupMetadataKey v2 (group) GroupMetadataValue v3         a classic group's generation:
//	                                                          protocol, leader, members with
//	                                                          subscriptions and assignments
//	GroupMetadataKey v2 (group) GroupMetadataValue v4 with     a KIP-848 group exists, with its
//	                             tag 0x53545241 = "consumer"  group epoch in Generation
//	GroupMetadataKey v2 (group) nil (tombstone)               group deleted
//
// A TxnOffsetCommit's records go in a batch of their own, transactional,
// with the producer's id and epoch (sequence 0, as Kafka's coordinator
// writes them); they pend until the transaction's marker reaches the
// partition (CompleteTransaction; on load, the control batch that follows
// them), and OffsetFetch with RequireStable answers UNSTABLE_OFFSET_COMMIT
// for their partitions meanwhile (txn.go).
//
// An offset commit is appended, and committed, before it is answered and
// before OffsetFetch sees it. A classic group's record is appended when a
// generation ends empty, when the leader's SyncGroup brings assignments (the
// members get their assignments once it is committed), when a static member
// is replaced without a rebalance, and when a group is created. Load replays
// the partition in order: the last record for a key wins and tombstones
// delete, as the log cleaner also makes true on disk (__consumer_offsets is
// compacted).
//
// KIP-848 groups persist only their existence, type and group epoch, not
// members, target assignments or member assignments (Kafka writes those as
// ConsumerGroup* records, which kmsg has no codec for). After the
// coordinator moves, a KIP-848 group is Empty at its last epoch: members
// heartbeating with a non-zero epoch get UNKNOWN_MEMBER_ID, as from a Kafka
// coordinator that lost them, and rejoin with epoch 0 (their partitions are
// treated as lost by the client, not revoked); committed offsets are intact,
// and epochs keep increasing so no stale member can commit. Static members
// rejoin as new static members.
//
// # Departures from Kafka
//
//   - A classic JoinGroup for a non-empty KIP-848 group, and a
//     ConsumerGroupHeartbeat for a non-empty classic group, are refused
//     (INCONSISTENT_GROUP_PROTOCOL and GROUP_ID_NOT_FOUND) instead of mixing
//     protocols in one group (Kafka's online migration, KIP-848 "upgrade").
//     Empty groups convert either way, as in Kafka.
//   - Responses that write nothing are sent at once; Kafka also holds them
//     until earlier writes of the shard are committed.
//   - A failed append is compensated per operation (as Kafka's callbacks
//     do) rather than by rolling the whole shard back to the last committed
//     snapshot.
//   - Ties Kafka breaks by hash-map order (protocol votes, leader
//     re-election, member order in responses) are broken by sorting.
package group
