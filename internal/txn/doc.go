// Package txn is Strata's transaction coordinator (KIP-98): InitProducerId
// for transactional ids (epoch bumps and fencing of zombies),
// AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, transaction timeouts and the
// expiry of idle transactional ids, with the state in the compacted
// internal topic __transaction_state. It follows Kafka's
// TransactionCoordinator, TransactionMetadata and TransactionStateManager
// (Kafka 3.x/4.x, transactions version 1) in behaviour and error codes.
//
// # Shards
//
// A transactional id belongs to partition PartitionFor(id) of
// __transaction_state (transaction.state.log.num.partitions, 50), and the
// broker leading that partition is its coordinator (FindCoordinator with key
// type TRANSACTION). The broker calls Load when it becomes the partition's
// leader, with the leader epoch as the coordinator epoch, and Unload when it
// stops leading. Load replays the partition; requests meanwhile get
// COORDINATOR_LOAD_IN_PROGRESS, and requests for partitions not loaded here
// NOT_COORDINATOR, which clients retry after FindCoordinator.
//
// # State machine and edges
//
// Machine (machine.go) is the state of one partition: transactional ids and
// their metadata. It does no I/O and reads no clock: requests come in with
// the time, and out come a Result, the Write (a record) whose commit
// completes a transition, and Markers to send. Like Kafka, a transition is
// first pending (requests for the id get CONCURRENT_TRANSACTIONS) and takes
// effect in Written once its record is committed:
//
//	InitProducerId   Empty|CompleteCommit|CompleteAbort → Empty, epoch+1
//	                 (a new producer id when the epoch is exhausted)
//	                 Ongoing → PrepareAbort, epoch+1 (fencing), answer
//	                 CONCURRENT_TRANSACTIONS; the client retries
//	AddPartitions    Empty|Complete* → Ongoing (start time), Ongoing → Ongoing
//	EndTxn           Ongoing → PrepareCommit|PrepareAbort; answered once
//	                 written; markers go out. With transactions v2
//	                 (EndTxn v5+) at epoch+1 (a new producer id, held in
//	                 NextProducerID, when the epoch is exhausted), and
//	                 Empty|Complete* → PrepareAbort, epoch+1, for an
//	                 abort of nothing
//	markers written  PrepareCommit → CompleteCommit, PrepareAbort →
//	                 CompleteAbort, partitions cleared; a v2 rotation
//	                 moves to NextProducerID at epoch 0
//	Tick             Ongoing past its timeout → PrepareAbort, epoch+1;
//	                 idle past transactional.id.expiration.ms → Dead (tombstone)
//
// The edges (coordinator.go) run on the shared coordinator runtime
// (internal/coordinator): it loads and unloads shards with the partition's
// leadership, replays them, and appends the queued records in order from
// one writer goroutine per shard. Two periodic deadlines of the runtime
// drive Tick, and one goroutine per marker set calls MarkerWriter until
// every partition has its marker.
// A load resends the markers of the transactions it finds prepared.
//
// # Persistence
//
// Every record is a key/value pair in a magic v2 batch built by
// record.Build, encoded with kmsg:
//
//	key                          value                      meaning
//	TxnMetadataKey v0            TxnMetadataValue v1         the transactional id's state:
//	 (int16 0, transactional id)  producer id, epoch,        Empty 0, Ongoing 1,
//	                              timeout, state, topics     PrepareCommit 2, PrepareAbort 3,
//	                              and partitions, last       CompleteCommit 4, CompleteAbort 5
//	                              update and start times,
//	                              tag 0: previous producer id,
//	                              tag 1: next producer id,
//	                              tag 2: client's transactions
//	                              version
//	TxnMetadataKey v0            nil (tombstone)            the id expired (Dead)
//
// The last record of an id wins on load, as compaction makes true on disk.
// Dead and PrepareEpochFence are never written.
//
// # Departures from Kafka
//
//   - EndTxn is answered once the markers are written and the transaction
//     is complete (or after completionWait, 5 s), not as soon as the
//     decision is: the producer's next AddPartitionsToTxn then finds the
//     id ready instead of getting CONCURRENT_TRANSACTIONS and backing off.
//     The decision is durable at the same point as in Kafka.
//   - Transactions version 2 (KIP-890 part 2) is decided per request, by
//     its version (EndTxn v5+), as Kafka's KafkaApis does; an
//     InitProducerId or timeout fence of an ongoing transaction bumps the
//     epoch once, whatever the version (Kafka after KAFKA-19367).
//   - A failed write of an epoch fence is simply dropped (Kafka remembers
//     hasFailedEpochFence); the next timeout tick or InitProducerId fences
//     again.
package txn
