// Package storage is Strata's partition log, stored byte for byte as Apache
// Kafka stores it, so that a data directory can be read by Kafka's own tools
// (kafka-dump-log) and reasoned about with Kafka's documentation.
//
// A Manager owns one data directory (a log.dirs entry) and the Logs in it; a
// Log is one partition: a sequence of segments, each a .log file of record
// batches exactly as producers sent them (offsets and leader epoch written in
// place), with a sparse offset index and a time index. There is no network
// code here: reads return file regions that the fetch path hands to
// sendfile(2).
//
// # Layout
//
//	<data dir>/
//	    recovery-point-offset-checkpoint   flushed offset per partition
//	    log-start-offset-checkpoint        log start offset per partition
//	    cleaner-offset-checkpoint          where compaction reached, per compacted partition
//	    replication-offset-checkpoint      high watermark per partition
//	    .kafka_cleanshutdown               present only after a clean Close
//	    <topic>-<partition>/               topic names may contain '-': split on the last one
//	        00000000000000000000.log       segment: batches with offsets [0, 368)
//	        00000000000000000000.index     its offset index
//	        00000000000000000000.timeindex its time index
//	        00000000000000000368.log       the active segment (the last)
//	        00000000000000000368.index     preallocated to segment.index.bytes with its first entry
//	        00000000000000000368.timeindex
//	        00000000000000000368.snapshot  producer state at offset 368
//	        00000000000000000368.txnindex  aborted transactions whose ABORT marker is in this segment
//	        leader-epoch-checkpoint
//	    <topic>-<partition>.<32 hex>-delete/  a deleted partition, removed after file.delete.delay.ms
//
// Segment files are named by their base offset, the offset of their first
// batch (or, after compaction, at most it), as %020d. A file being deleted
// is renamed with a ".deleted" suffix and removed after
// file.delete.delay.ms; checkpoint files are written as "<name>.tmp",
// synced, renamed over the old file and the directory synced. The log
// cleaner writes a segment as "<file>.cleaned" and commits it by renaming
// it "<file>.swap" (see cleaner_swap.go); opening a log removes .cleaned
// files and finishes the swaps of .swap ones.
//
// # Log segment (.log)
//
// Record batches (magic v2, see package record) back to back, nothing else:
//
//	+-------------------+-------------------+-----+
//	| batch (offsets    | batch (offsets    | ... |  each: 8-byte base offset, 4-byte length,
//	|  368..371)        |  372..372)        |     |  then length bytes (61-byte header + records)
//	+-------------------+-------------------+-----+
//
// Base offsets increase; a batch's offsets are [base, base+lastOffsetDelta].
// A compacted log (and a follower of one) has gaps between batches, and
// batches holding fewer records than offsets, or none (a header alone). A
// segment rolls to a new one based at the log end offset, or at the first
// appended batch when its offsets cannot be indexed relative to the log end;
// recovery relies on that to tell a lost segment tail from a gap, and the
// cleaner keeps it true by keeping the last batch of every segment it
// writes, emptied if need be. Such an emptied batch without a producer id
// is a boundary marker that reads skip: Kafka's cleaner would have dropped
// it (see cleaner.go).
//
// # Offset index (.index)
//
// Entries of 8 bytes, big-endian:
//
//	+-------------------------+-------------------------+
//	| relative offset (int32) | file position (int32)   |
//	+-------------------------+-------------------------+
//
// relative offset = the LAST offset of the batch starting at file position,
// minus the segment's base offset. An entry is added for a batch that starts
// more than index.interval.bytes after the batch of the last entry (so the
// first batch never has one: a lookup that finds no entry starts at
// position 0). This is Kafka's rule when it rebuilds an index; Strata applies
// it per batch on append too, so an appended index equals a rebuilt one. Entries increase strictly in both fields. The
// active segment's file is preallocated to segment.index.bytes (rounded down
// to a multiple of 8) and memory-mapped with its first entry (until then it
// is empty and not even open); it is trimmed to its entries when the segment
// rolls or the log closes. Past the entries, a preallocated file is zeros
// (entries a truncation drops are zeroed), so after a crash the entries end
// at the first zero entry.
//
// # Time index (.timeindex)
//
// Entries of 12 bytes, big-endian:
//
//	+-------------------------+-------------------------+
//	| timestamp (int64, ms)   | relative offset (int32) |
//	+-------------------------+-------------------------+
//
// Written together with an offset-index entry, holding the greatest batch
// max timestamp so far in the segment and the last offset of the batch that
// first reached it, but only when that timestamp grew. When a segment rolls
// or closes, a last entry records the segment's final max timestamp (Kafka's
// onBecomeInactiveSegment), which is what time-based retention reads after a
// restart. Preallocated to segment.index.bytes rounded down to a multiple of
// 12; the index counts as full one entry early, keeping room for that last
// entry.
//
// # Aborted-transaction index (.txnindex)
//
// Kafka's TransactionIndex: entries of 34 bytes, big-endian, appended when
// the leader writes an ABORT marker (or recovery finds one not indexed), in
// the file of the segment that holds the marker; no file until one is:
//
//	+---------+--------------+---------------+---------------+------------------+
//	| version | producer id  | first offset  | last offset   | last stable      |
//	| int16 0 | int64        | int64         | int64: the    | offset (int64)   |
//	|         |              |               | marker's      | after the marker |
//	+---------+--------------+---------------+---------------+------------------+
//
// A read_committed fetch of [from, upTo) gets the entries whose last offset
// is at or after from and whose first offset is below upTo (AbortedTxns).
// Flush syncs the files written to since the last flush, as Kafka's
// LogSegment.flush syncs its txnIndex, so the entries of the segments
// below the recovery point are durable. After a crash, the entries of
// the segments recovery checked (from the one holding the recovery point)
// and of any file found torn may be missing or stale: the replica rebuilds
// them from the log, replaying the producers' state from the newest
// snapshot at or below them (or the log start) and the markers after it
// (TxnIndex.SuspectFrom, TxnIndex.Rebuild), as Kafka's LogLoader rebuilds
// the transaction index of the segments it recovers. Like Kafka, a file
// deleted by hand from a segment below the recovery point is not
// noticed. The cleaner reads it too: an aborted transaction's
// records shadow no older value of their keys and are removed, and
// cleaning stops below the first offset of a transaction still open
// (SetFirstUnstableOffset), as in Kafka. A truncation rewrites the files it cuts into; entries
// whose marker is below the log start are dropped; a file whose segment the
// cleaner merged away keeps its name and its entries.
//
// # Checkpoint files
//
// Kafka's text formats, lines ending in '\n':
//
//	recovery-point-offset-checkpoint,   leader-epoch-checkpoint:
//	log-start-offset-checkpoint,
//	cleaner-offset-checkpoint,
//	replication-offset-checkpoint:
//	    0                 version          0            version
//	    2                 entry count      2            entry count
//	    orders 0 1200     topic part off   0 0          epoch start-offset
//	    my-topic 3 77                      3 1200
//
// replication-offset-checkpoint holds the high watermark of every
// partition whose replica set one (Log.SetHighWatermark), written every
// replica.high.watermark.checkpoint.interval.ms and at a clean Close,
// independently of the flushes: after a crash it may be ahead of the
// recovered log end, and a Log bounds it by its log start and end offsets.
// A restarted replica starts from it, not from its log end (see package
// replica). Partitions the replica layer does not own (the metadata log)
// have no entry.
//
// A producer-state snapshot (%020d.snapshot) holds the bytes the producer
// package gives ProducerSnapshots.Write; this package only names, writes (atomically)
// and prunes them.
//
// # Durability and recovery
//
// Appends reach the page cache; Flush(upTo) fsyncs (fdatasync) the segments
// holding unflushed data, their indexes and, after a roll, the partition
// directory, then advances the recovery point. Concurrent Flush callers share
// one fsync (group commit). A roll does not wait for an fsync: under a
// started Manager it queues its log, and the Manager's roll flusher (one
// goroutine) calls FlushRolled, which syncs the segments before the active
// one (data, indexes, .txnindex, directory entries) and moves the recovery
// point to the active segment's base offset, as Kafka's roll schedules
// flushUptoOffsetExclusive(newSegment.baseOffset), and syncs the producer
// snapshot the roll wrote unsynced (ProducerSnapshots.WriteRoll); the Manager also queues
// at open every log whose recovery point is below its active segment. The
// Manager writes the recovery points to recovery-point-offset-checkpoint
// every log.flush.offset.checkpoint.interval.ms (60 s) and at Close, so a
// crash recovers about the active segment, not the whole log. On open without .kafka_cleanshutdown,
// every segment from the one holding the recovery point on is recovered:
// the entries of its offset index that increase and point inside the log
// are kept (an entry is written after its batch, so what it covers reached
// the file first), and the log is scanned from the batch of the last one,
// which must be there, to the end. Each batch scanned is CRC-checked and
// must follow its predecessor's offsets; the first bad or torn batch and
// everything after it (later segments too) is truncated, and index entries
// are added for what was scanned. An index that disagrees with its log is
// rebuilt from the start of its segment. So an empty log reads nothing, and
// a log killed with nothing unflushed reads at most index.interval.bytes
// and a batch. Recovery syncs nothing it did not repair: what it kept stays
// above the recovery point until the next flush. With the marker, no log is
// read, but the first and last entries of every index are checked (within
// the file, increasing) and the index is rebuilt if they fail, as Kafka's
// sanityCheck does. The Manager opens logs num.recovery.threads.per.data.dir
// at a time (at most the cores) and logs one line for all of them, a
// warning counting corrupt logs by cause when recovery repaired any. A
// failed write or fsync takes the log offline: it returns ErrLogOffline
// from then on.
//
// # Compaction
//
// Logs with cleanup.policy=compact are cleaned as Kafka's log cleaner
// cleans them: the latest record of each key is kept, offsets never change,
// tombstones go delete.retention.ms after the cleaning that first kept them
// (KIP-534's delete horizon), and a cleaned segment replaces the old ones
// through a crash-safe swap. See cleaner.go and cleaner_swap.go; the
// Manager runs the cleaner (CleanLogs) every log.cleaner.backoff.ms.
//
// # The remote tier (planned)
//
// Tiered storage (KIP-405) will be one more concern a Log owns, beside
// those below, and a segment will live locally, remotely or both. The
// seams are where a segment is found, read and let go: a read finds the
// segment holding its offset in the segment list (floorSegment) and asks
// that segment for its batches from the offset on (segment.read, a call a
// remote segment can answer from its own storage); retention and
// DeleteRecords let segments go through deletePrefixLocked, which is
// where a segment must have been copied before its local files are
// retired (the delete queue removes local files only). As in Kafka, the
// log start offset will then be the remote tier's and a local log start
// the first local segment's.
//
// # Concurrency and lock order
//
// A Log allows one appender at a time (callers serialize Append per
// partition) and any number of concurrent readers and Flush callers. Each
// of its concerns is a type the Log owns, with its own lock: the cleaner's
// state (cleanerState, cleaner.go), the producer snapshots
// (ProducerSnapshots, snapshot.go), group commit (groupCommit, flush.go),
// the aborted-transaction index (TxnIndex, txnindex.go) and the segment
// deletion queue (deleteQueue, deletequeue.go). Every mutex of the package
// is in the two tables below (a test checks them against the code). Locks,
// always taken in this order:
//
//	cleanerState.running     (Log.cleaner) serializes cleanings; held across
//	                         a cleaning's I/O, never by anything else
//	Log.appendMu             serializes mutations: Append, roll, truncation,
//	                         retention, DeleteRecordsBefore, epoch changes,
//	                         Close, and a cleaning's swap of a cleaned segment
//	                         into the list (never its I/O)
//	ProducerSnapshots.fileMu (Log.snapshots) the snapshot files' changes
//	                         (Write runs beside Append)
//	groupCommit.syncMu       (Log.commit) serializes fsyncs; held by a Flush
//	                         round's leader, and by anything that removes
//	                         segments (no fsync runs on a closing file)
//	TxnIndex.mu              (Log.txns) the aborted-transaction entries and
//	                         the files a flush must sync; held across the
//	                         .txnindex files' I/O
//	Log.mu                   (RWMutex) the segment list, directory, epoch
//	                         cache, closed and deleted; held only briefly,
//	                         never across I/O but a deleted log's rename
//
// Leaves, taken under any of the above (or none), with no lock taken under
// them and never two at once:
//
//	indexFile.mu             (RWMutex) one index's entries and mapping
//	segment.statMu           one segment's max timestamp and its offset
//	ProducerSnapshots.mu     the snapshot offsets, and those WriteRoll
//	                         wrote unsynced
//	groupCommit.mu           (with its condition) whether a Flush round
//	                         runs: Flush callers wait on it for a round to
//	                         end, never on syncMu; never held across I/O
//	deleteQueue.mu           (Log.deletes) the retired segments waiting out
//	                         file.delete.delay.ms
//
// The Manager's:
//
//	Manager.mu               (RWMutex) the map of logs; never held while a
//	                         Log's locks are taken, except Log.mu through
//	                         read-only accessors
//	Manager.rollMu           the roll flusher's queue, a leaf; a roll takes
//	                         it under Log.appendMu
//	Manager.checkpointMu     serializes the checkpoint files' writes; held
//	                         across their I/O, with no other lock held or
//	                         taken under it
//
// The Manager's fan-outs (openAll, Close, CleanLogs) guard their own
// results with a local mutex that nothing else sees.
//
// The log end offset, recovery point and each segment's size are atomics:
// readers load them without locks. Data below a segment's published size is
// never rewritten except by truncation, which readers may race with (as in
// Kafka, a region read concurrently with a truncation may come up short).
// Cleaning never rewrites a file: it replaces whole segments, and readers
// holding the old ones read them until file.delete.delay.ms has passed.
package storage
