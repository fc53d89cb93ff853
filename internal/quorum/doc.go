// Package quorum replicates the metadata log among the controllers with
// etcd raft (go.etcd.io/raft/v3), as KRaft's quorum does in Kafka. A Node is
// one voter: the library's RawNode, a pure state machine, driven by one
// goroutine at the edge (Node.run) that ticks it, steps it with messages
// from peers, proposes entries, and for every Ready persists the entries,
// hard state and snapshot (synced) before it sends the Ready's messages,
// then hands the committed entries to the state machine (the controller's
// applier) through Node.Apply.
//
// PreVote and CheckQuorum are on: a node cut off from the others cannot
// disrupt the quorum when it returns, and a leader that loses its majority
// steps down. Proposal forwarding is off: only the leader proposes. The
// voters are fixed by controller.quorum.voters and set, identically on
// every node, in the bootstrap snapshot (index 0, no data); there are no
// configuration-change entries.
//
// # On disk
//
// Everything lives in the metadata log's partition directory:
//
//	__cluster_metadata-0/
//	  00000000000000000000.log        Raft entries, one record batch each
//	  00000000000000000000.index      (storage's segments, indexes and
//	  00000000000000000000.timeindex   recovery of torn tails)
//	  quorum-state                    {"term":T,"vote":V,"commit":C}
//	  00000000000000004096-00000000000000000007.checkpoint
//	                                  snapshot at index 4096, term 7
//
// An entry is a record batch whose base offset is the entry's index, with
// one record:
//
//	key   = type (1 byte: 0 normal, 1 conf change, 2 conf change v2)
//	        + term (8 bytes, big-endian)
//	value = the entry's data (the controller's JSON; empty for the entry a
//	        new leader appends)
//
// A checkpoint is the CRC-32C (4 bytes, big-endian) of the rest, then the
// raftpb.Snapshot protobuf (metadata: index, term, voters; data: the
// metadata image as records). The newest two are kept. quorum-state is
// written atomically (temporary file, fsync, rename) before anything is
// sent whenever the term or vote changes, and otherwise at most once a
// second for the commit index alone: a commit index that lags only costs a
// restarted node the time to learn it again, and one past the log's end
// (a torn tail) is cut back on load.
//
// On start the node loads the newest checkpoint (or the bootstrap
// snapshot), the entries after it, and the hard state, into a
// raft.MemoryStorage; entries left by a crash while a snapshot from the
// leader was installed, which do not follow the snapshot, are dropped. The
// entries are synced before Raft sees them: after a crash of the process
// alone, entries never synced come back from the page cache, and Raft
// would acknowledge them as persisted.
// Every metadata.log.max.record.bytes.between.snapshots of applied data,
// the controller hands the node a snapshot of its image; the node writes a
// checkpoint and compacts the log behind it, keeping Config.SnapshotKeep
// entries for followers a little behind. A follower further behind gets
// the snapshot in one message.
//
// # On the wire
//
// Voters talk over the controller listener (controller.listener.names),
// which also serves the Kafka protocol to brokers. A Raft connection opens
// with Magic, which no Kafka client sends (read as a frame size it is above
// any limit), then one hello frame, then messages:
//
//	frame = length (4 bytes, big-endian) + bytes
//	hello = {"nodeId":N,"clusterId":"…"}   (JSON, at most 4 KiB)
//	message = raftpb.Message                 (protobuf, at most MaxFrameBytes)
//
// On an SSL or SASL_SSL controller listener all of it runs in TLS. On a
// SASL listener the dialer authenticates between Magic and the hello
// (Config.Authenticate), with Kafka's SaslHandshake v1 and SaslAuthenticate
// requests and responses, framed as Kafka frames them; the listener's side
// (the broker, before it calls ServeConn) answers them and serves the
// connection only for a principal allowed CLUSTER_ACTION on the cluster,
// as Kafka authorizes Vote and BeginQuorumEpoch.
//
// Lengths are checked against the limit before anything is allocated. A
// connection from a node that is not a voter, or that names another
// cluster, is dropped with a log line; so is a message whose addresses do
// not match the hello. Each peer has one outbound connection, written by
// its own goroutine from a bounded queue (Raft's messages beyond it are
// dropped, and Raft retries), reconnected with backoff up to a second.
//
// # Brokers that are not controllers
//
// Brokers follow the committed log as KRaft's observers do rather than as
// Raft learners: a learner must be added to the Raft configuration, which
// would make broker membership a Raft reconfiguration, and the leader would
// push to every broker. Observers ask the active controller for what is
// committed, at their own pace, and load a snapshot when they are far
// behind.
package quorum
