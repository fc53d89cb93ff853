// Package share holds the state of share groups (KIP-932) as pure
// machines: inputs in, effects out, no I/O, goroutines or clocks. Times
// are milliseconds given with each input.
//
// # The share-partition
//
// A Partition is one share group's view of one topic partition, kept by
// the partition's leader. Offsets below the share-partition start offset
// (SPSO) are done; offsets above the share-partition end offset (SPEO)
// have never been acquired. Between them every offset is in flight, in one
// of Kafka's delivery states:
//
//	           acquire (count+1)               ACCEPT
//	AVAILABLE ─────────────────▶ ACQUIRED ─────────────▶ ACKNOWLEDGED
//	    ▲                           │  │  REJECT, GAP
//	    └── RELEASE, lock timeout, ─┘  └──────────────▶ ARCHIVED
//	        member left (count < limit; else ARCHIVED)
//
// The in-flight offsets are kept per fetched batch (first and last
// offset, one state); a batch is split into per-offset states only when
// its offsets part ways (a partial acknowledgement, an acquisition cut by
// max records), and joined again when they agree. When the lowest
// in-flight offsets are ACKNOWLEDGED or ARCHIVED the SPSO moves past
// them. group.share.partition.max.record.locks bounds SPEO-SPSO+1: no new
// offsets are acquired beyond it until the start moves.
//
// # The durable form
//
// Every change a Partition makes returns a Write: the state batches that
// changed (first and last offset, delivery state, delivery count), the
// start offset, the state epoch and the leader epoch; that is a
// WriteShareGroupState partition. The persister must have it committed
// before the records it acquires are returned to a consumer, so that a
// delivery count never goes back. Unlike Kafka, which does not persist an
// acquisition, an acquisition is written, as AVAILABLE with its raised
// delivery count: that is the state the records return to after a
// failover (Recover), and the delivery-count limit then still holds for a
// record that keeps killing its consumers.
//
// The share coordinator keeps the writes in __share_group_state as Kafka
// does: a ShareSnapshot record holds the whole state of a share-partition,
// ShareUpdate records hold deltas over it; a State replays them, and a
// new snapshot is written after Config.UpdatesPerSnapshot updates, which
// log compaction then keeps alone. The record formats (Kafka's
// coordinator records; the key's version is the record type, the value's
// version is 0 and flexible, with compact strings and arrays and a tag
// buffer after each struct):
//
//	key     type int16 (0 snapshot, 1 update) | group id string (int16 length)
//	        | topic id [16]byte | partition int32
//	ShareSnapshotValue v0:
//	        snapshot epoch int32 | state epoch int32 | leader epoch int32
//	        | start offset int64 | create time int64 | write time int64
//	        | state batches | tags (0: delivery complete count int32)
//	ShareUpdateValue v0:
//	        snapshot epoch int32 | leader epoch int32 | start offset int64
//	        | state batches | tags (0: delivery complete count int32)
//	state batches: compact array of
//	        first offset int64 | last offset int64 | delivery state int8
//	        (0 available, 2 acknowledged, 4 archived) | delivery count int16 | tags
//
// The snapshot's int32 snapshot epoch and its two timestamps follow Kafka
// 4.x's ShareSnapshotValue; the byte layout has not yet been checked
// against records a Kafka 4.2 broker wrote.
//
// A State is what a coordinator Machine (internal/coordinator) holds per
// share-partition key; replaying a record never panics, a record that
// does not decode is ErrCorruptRecord.
package share
