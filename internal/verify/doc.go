// Package verify is `strata verify`: a Jepsen-style safety check of any
// Kafka-protocol cluster. A workload (Run) creates a topic of its own,
// produces records whose values name their producer and sequence number,
// consumes them with consumers assigned partitions directly and with
// consumers in a group, and records every send, every acknowledgement
// (with the offset it reported) and every record polled, in a History.
// After producing stops, a final consumer reads every partition from its
// start to its end. Check, a pure function of the History, then looks for
// the anomalies Jepsen's Kafka queue workload (jepsen.tests.kafka) looks
// for. Nothing in Check does I/O or reads a clock, so it is tested on
// histories written by hand.
//
// The anomalies (Kind), in the terms of a partition's log, where an
// observation of (offset, value) is a record polled by any consumer or an
// acknowledgement that reported that offset for that value:
//
//   - lost-write: an acknowledged record that no consumer ever read, at an
//     offset at or below the highest offset any consumer read in its
//     partition (Jepsen's definition: a reader got past it), or anywhere
//     in a partition the final read read to its end (nothing more was
//     there to read).
//   - duplicate: one value observed at two or more offsets (a retry
//     appended twice).
//   - inconsistent-offset: one offset observed with two or more values
//     (two readers disagree, or a reader disagrees with the
//     acknowledgement).
//   - nonmonotonic-send: a producer's later record (by sequence) of a
//     partition at an offset at or below an earlier one's.
//   - nonmonotonic-poll: a consumer reading, within one assignment of a
//     partition, an offset at or below the one it read before.
//   - poll-skip: a consumer's successive reads of a partition, within one
//     assignment, jumping over offsets at which some value was observed.
//     Offsets at which nothing was ever observed are gaps, not skips:
//     Jepsen allows them for transaction markers and compaction (this
//     workload makes neither). A new assignment (a rebalance gave the
//     consumer the partition, at its committed offset) starts afresh: a
//     consumer never skips what it was not assigned.
//   - unexpected-value: a record read that this run never sent to that
//     partition.
//
// A transactional run (Config.Transactional, txn.go) adds, for
// read_committed readers, a copy stage and its output topic:
//
//   - aborted-read: a record of an aborted transaction read (a producer's,
//     or a copy of the copy stage's).
//   - intermediate-read: a record read before its transaction's producer
//     or copier asked to commit it (the reader's clock is the run's, and
//     a read is timed after the poll returned, so this never fires
//     falsely).
//   - nonmonotonic-copy: the output partition holding a copy after the
//     copy of a later input.
//
// and extends lost-write (a committed input the copy stage skipped below
// an input it committed a copy of, or a committed copy the output's final
// read did not find) and duplicate (an input copied by two committed copy
// transactions). In such a run only a committed transaction's records
// must be read; an offset a reader skips because its record was aborted
// is no poll-skip, and a record of a transaction whose commit was not
// confirmed is indeterminate.
//
// Not anomalies, but counted: a record whose send failed or was never
// answered but that a consumer read is indeterminate (a producer cannot
// tell a lost request from a lost response, so either outcome is
// allowed); an acknowledged record that nobody read, beyond every offset
// read, in a partition the final read did not finish, is unread (it cannot
// be judged).
package verify
