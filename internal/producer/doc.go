// Package producer holds what a broker knows about idempotent producers:
// producer ids, and per partition the epoch and the last batches of each
// producer, so that a retried batch is answered with its original offset
// instead of being appended twice (KIP-98), and a gap or a zombie is refused.
//
// It is Kafka's ProducerStateManager, ProducerAppendInfo and
// ProducerStateEntry (storage module, Kafka 3.x/4.x), with their
// transaction bookkeeping: a transactional batch opens its producer's
// transaction on the partition, a marker (CheckMarker, then EndTxn once it
// is in the log) ends it, and FirstUnstableOffset, the first offset of the
// oldest open transaction, bounds the last stable offset. The transaction
// coordinator itself is internal/txn.
//
// # Who calls what
//
// One PartitionState belongs to one partition log. It is not safe for
// concurrent use: every call is made holding the partition's append lock, the
// lock that orders appends to the log, so the state always describes exactly
// the batches below the log end offset.
//
// Produce (leader), for one partition of one request, under the append lock:
//
//	a := state.BeginVerified(guard)   // Begin() for the coordinators' own writes
//	for each batch h in the request's records, in order:
//		dup, err := a.Check(h)   // every batch, with or without a producer id
//		err != nil → answer the partition ErrorCode(err); append nothing
//	dup != nil   → answer the partition with dup.FirstOffset (and, on
//	               LogAppendTime topics, LogAppendTime dup.Timestamp; Kafka
//	               sends it on CreateTime topics too); append nothing
//	otherwise    → append the records; on success a.Commit(baseOffset),
//	               on failure simply do not commit (the next Begin discards)
//
// where guard comes from StartVerification, called under the append lock
// before the broker asks the transaction coordinator about a batch that
// would open its producer's transaction (verify.go), or is zero.
//
// Replication (follower) and rebuild: Update(h) for every batch appended, in
// log order, with h.BaseOffset as stored (a follower passes markers to
// EndTxn instead, with the marker its body holds).
//
// WriteTxnMarkers (leader), under the append lock: CheckMarker, append the
// marker, then EndTxn with the header as stored.
//
// Segment roll, under the append lock with the log end offset leo:
//
//	data := state.Snapshot()                  // serialised here, under the lock
//	log.Snapshots().Write(leo, data)          // may be written after unlocking
//
// Also at clean shutdown, at the log end offset.
//
// Open, and truncation to offset t (after the log above t and the snapshots
// named above t are gone, as are those below the log start offset):
//
//	off, data := latest snapshot with off ≤ log end (or none: from the log start)
//	err := state.Rebuild(data, func(apply func(record.Header) bool) error {
//		return log.ScanBatchHeaders(off, func(h record.Header, _ int64) bool { return apply(h) })
//	})
//	errors.Is(err, ErrCorruptSnapshot) → delete that snapshot, try the next older
//	state.Expire(now, producer.id.expiration.ms)
//
// Every producer.id.expiration.check.interval.ms (Kafka: 600000), under the
// append lock: state.Expire(now, producer.id.expiration.ms).
//
// DescribeProducers, under the append lock: state.Producers().
//
// InitProducerId without a transactional id: IDAllocator.InitIdempotent (a
// new id, epoch 0, as Kafka answers even when v3+ names an id and epoch).
//
// # Locks
//
// PartitionState and Append take no locks; the caller's partition append
// lock covers them. IDAllocator has one mutex, held while its reservation
// callback runs; the callback must not call back into the allocator. Neither
// calls the other, so there is no lock order to keep.
//
// # Departures from Kafka
//
// A snapshot keeps all cached batches of a producer, not only the last one,
// so duplicates are still recognised across a restart; see below.
//
// Markers are applied from their header alone when the state is rebuilt
// from the log (the coordinator epoch in the marker's body is not read
// then); the leader and followers read it as they append.
//
// Several batches for one producer in one request are checked against each
// other (the second must follow the first), and a request that mixes
// retried and new batches is refused with OUT_OF_ORDER_SEQUENCE_NUMBER rather
// than answered as a duplicate, which would drop the new batches silently.
//
// # Snapshot file format (version 1)
//
// Kafka's producer snapshot (ProducerStateManager PID_SNAPSHOT_MAP_SCHEMA,
// file <20-digit offset>.snapshot), all integers big-endian:
//
//	offset  size  field
//	     0     2  version                    1
//	     2     4  crc                        CRC-32C of bytes [6, end)
//	     6     4  entry count n              ≥ 0
//	    10  46·n  entries, each:
//	                 0   8  producerId
//	                 8   2  producerEpoch
//	                10   4  lastSequence     -1 when no batch
//	                14   8  lastOffset       -1 when no batch
//	                22   4  offsetDelta      lastOffset - firstOffset
//	                26   8  timestamp        the batch's max timestamp
//	                34   4  coordinatorEpoch -1 until transactions
//	                38   8  currentTxnFirstOffset  -1 when none
//
// Kafka writes one entry per producer, describing its last batch. Strata
// writes one entry per cached batch (up to five), oldest first, consecutive
// for one producer, each with the producer's epoch and fields; the last one
// of a producer is exactly the entry Kafka writes. Kafka's reader keeps the
// last entry per producer id, so it reads these files as its own; Strata's
// reader rebuilds the whole batch cache. A file is accepted whole or not at
// all: a bad version, CRC, length or an entry that breaks the rules above
// (a producer's entries not consecutive or more than five, different epochs,
// offsets not increasing) is ErrCorruptSnapshot and leaves the state as it
// was.
package producer
