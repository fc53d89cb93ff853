package quorum

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// Files of the quorum beside the Raft log's segments (see the package doc).
const (
	// StateFile is the hard state (term, vote, commit index): its presence
	// marks a directory as a Raft log.
	StateFile        = "quorum-state"
	checkpointSuffix = ".checkpoint"
)

// ErrCorruptState is returned when a checkpoint or the quorum state does
// not decode: the node cannot know what it promised, so it does not start.
var ErrCorruptState = errors.New("quorum: corrupt state")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// disk is a node's durable Raft state: the entries in a storage.Log (one
// record batch per entry, base offset = entry index), the hard state in
// quorum-state, and snapshots in checkpoint files; and a raft.MemoryStorage
// holding the entries since the latest snapshot, which is what the Raft
// state machine reads. Only the node's loop goroutine calls it.
type disk struct {
	fs     vfs.FS
	dir    string
	wal    *storage.Log
	mem    *raft.MemoryStorage
	logger *slog.Logger
	now    func() time.Time

	// conf is the (static) voter configuration, stamped on snapshots.
	conf *pb.ConfState
	// hard is the hard state last written to quorum-state;
	// hardWritten when.
	hard        *pb.HardState
	hardWritten time.Time
}

// hardState is quorum-state's content.
type hardState struct {
	Term   uint64 `json:"term"`
	Vote   uint64 `json:"vote"`
	Commit uint64 `json:"commit"`
}

// openDisk loads the state in wal's directory into a MemoryStorage. A node
// with no checkpoint starts from the bootstrap snapshot: index 0, the
// voters, no data.
func openDisk(fs vfs.FS, wal *storage.Log, conf *pb.ConfState, logger *slog.Logger, now func() time.Time) (*disk, error) {
	d := &disk{fs: fs, dir: wal.Dir(), wal: wal, mem: raft.NewMemoryStorage(), logger: logger, now: now, conf: conf}
	snap, err := d.latestCheckpoint()
	if err != nil {
		return nil, err
	}
	if snap == nil {
		snap = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{ConfState: conf, Index: new(uint64(0)), Term: new(uint64(0))}}
	}
	if err := d.mem.ApplySnapshot(snap); err != nil {
		return nil, fmt.Errorf("quorum: loading the snapshot: %w", err)
	}
	snapIndex, snapTerm := snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
	entries, err := d.readEntries(snapIndex, snapTerm)
	if err != nil {
		return nil, err
	}
	// Raft takes every entry its Storage holds as persisted: it
	// acknowledges them to a leader's probe and votes by them. After a
	// crash of the process alone, entries appended but never synced come
	// back from the page cache, so sync them before Raft sees them, or a
	// power loss could take entries this node already counted towards a
	// commit.
	if err := wal.Flush(wal.LogEndOffset()); err != nil {
		return nil, fmt.Errorf("quorum: syncing the Raft log: %w", err)
	}
	if err := d.mem.Append(entries); err != nil {
		return nil, fmt.Errorf("quorum: loading entries: %w", err)
	}
	hs, err := d.readHardState()
	if err != nil {
		return nil, err
	}
	// The commit index is written lazily: it may lag the snapshot, and a
	// log that lost its tail (a torn write) may end before it. Raft
	// learns the real one from the leader.
	last, _ := d.mem.LastIndex()
	commit := min(max(hs.GetCommit(), snapIndex), last)
	hs.Commit = &commit
	if err := d.mem.SetHardState(hs); err != nil {
		return nil, err
	}
	d.hard = proto.Clone(hs).(*pb.HardState)
	d.logger.Info("quorum state loaded", "snapshot_index", snapIndex, "snapshot_term", snapTerm,
		"entries", len(entries), "last_index", last, "term", hs.GetTerm(), "vote", hs.GetVote(), "commit", commit)
	return d, nil
}

// readEntries returns the log's entries after the snapshot. Entries that
// do not continue the snapshot (left by a crash while a snapshot from the
// leader was installed) are dropped from the log; Raft fetches them again.
func (d *disk) readEntries(snapIndex, snapTerm uint64) ([]*pb.Entry, error) {
	start, end := d.wal.LogStartOffset(), d.wal.LogEndOffset()
	after := int64(snapIndex) + 1
	follows := start == after || start <= 1 && snapIndex == 0
	if !follows && start <= int64(snapIndex) && int64(snapIndex) < end {
		// The log still holds the snapshot's own entry: what comes after
		// follows on only if it is of the snapshot's term.
		err := d.scan(int64(snapIndex), func(e *pb.Entry) bool {
			follows = e.GetIndex() == snapIndex && e.GetTerm() == snapTerm
			return false
		})
		if err != nil {
			return nil, err
		}
	}
	if !follows {
		if end > start {
			d.logger.Warn("dropping Raft log entries that do not follow the snapshot", "snapshot_index", snapIndex,
				"snapshot_term", snapTerm, "log_start", start, "log_end", end)
		}
		if err := d.wal.TruncateFullyAndStartAt(after); err != nil {
			return nil, err
		}
		return nil, nil
	}
	var entries []*pb.Entry
	next := uint64(after)
	if after >= end {
		return nil, nil
	}
	err := d.scan(max(after, start), func(e *pb.Entry) bool {
		if e.GetIndex() < next {
			return true
		}
		if e.GetIndex() != next {
			return false // a gap: the log ends here
		}
		entries = append(entries, e)
		next++
		return true
	})
	if err != nil {
		return nil, err
	}
	if int64(next) < d.wal.LogEndOffset() {
		d.logger.Warn("truncating the Raft log at a gap", "offset", next, "log_end", d.wal.LogEndOffset())
		if err := d.wal.TruncateTo(int64(next)); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// scan decodes the log's entries from offset on, until fn returns false.
func (d *disk) scan(from int64, fn func(e *pb.Entry) bool) error {
	var derr error
	err := d.wal.ReadBatches(from, math.MaxInt32, func(h record.Header, batch []byte) bool {
		var e *pb.Entry
		derr = record.Records(batch, func(offset, _ int64, r *kmsg.Record) error {
			var err error
			e, err = decodeEntry(offset, r.Key, r.Value)
			return err
		})
		if derr != nil {
			return false
		}
		return e == nil || fn(e)
	})
	if derr != nil {
		return fmt.Errorf("%w: Raft log: %v", ErrCorruptState, derr)
	}
	return err
}

// An entry's record: key = type (1 byte) + term (8 bytes), value = data.
func encodeEntry(dst []byte, e *pb.Entry, now int64) []byte {
	key := make([]byte, 9)
	key[0] = byte(e.GetType())
	binary.BigEndian.PutUint64(key[1:], e.GetTerm())
	start := len(dst)
	dst = record.Build(dst, []record.Rec{{Key: key, Value: nonNil(e.GetData()), Timestamp: now}})
	record.SetBaseOffset(dst[start:], int64(e.GetIndex()))
	return dst
}

// nonNil keeps an empty entry's data from encoding as a tombstone.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func decodeEntry(index int64, key, value []byte) (*pb.Entry, error) {
	if len(key) != 9 || key[0] > byte(pb.EntryConfChangeV2) {
		return nil, fmt.Errorf("entry %d: bad key %x", index, key)
	}
	typ := pb.EntryType(key[0])
	// A copy: value aliases a read buffer that the next read reuses.
	var data []byte
	if len(value) > 0 {
		data = bytes.Clone(value)
	}
	return &pb.Entry{Type: &typ, Term: new(binary.BigEndian.Uint64(key[1:])), Index: new(uint64(index)), Data: data}, nil
}

// save persists what a Ready asks for, in the order that keeps a crash
// safe: the snapshot, the hard state, then the entries (after cutting off
// any they replace), each synced. Only after it returns may the Ready's
// messages be sent.
func (d *disk) save(rd *raft.Ready) error {
	if snap := rd.Snapshot; snap != nil && !raft.IsEmptySnap(snap) {
		if err := d.installSnapshot(snap); err != nil {
			return err
		}
	}
	// The hard state before the entries: quorum-state marks the directory
	// as a Raft log from its first entry on. A commit index it names past
	// the entries a crash kept is cut back on load.
	if hs := rd.HardState; hs != nil && !raft.IsEmptyHardState(hs) {
		if err := d.saveHardState(hs, false); err != nil {
			return err
		}
	}
	if n := len(rd.Entries); n > 0 {
		first := int64(rd.Entries[0].GetIndex())
		if first < d.wal.LogEndOffset() {
			if err := d.wal.TruncateTo(first); err != nil {
				return fmt.Errorf("quorum: truncating the Raft log to %d: %w", first, err)
			}
		}
		now := d.now().UnixMilli()
		var buf []byte
		for _, e := range rd.Entries {
			buf = encodeEntry(buf, e, now)
		}
		if _, err := d.wal.Append(buf, storage.AppendOptions{LogAppendTime: -1}); err != nil {
			return fmt.Errorf("quorum: appending to the Raft log: %w", err)
		}
		if err := d.wal.Flush(d.wal.LogEndOffset()); err != nil {
			return fmt.Errorf("quorum: syncing the Raft log: %w", err)
		}
		if err := d.mem.Append(rd.Entries); err != nil {
			return err
		}
	}
	return nil
}

// saveHardState writes quorum-state when the term or vote changed (before
// anything is sent, as Raft requires), and otherwise, for the commit index
// alone, at most once a second or when forced: a stale commit index only
// costs a restarted node a round trip to learn it again.
func (d *disk) saveHardState(hs *pb.HardState, force bool) error {
	if err := d.mem.SetHardState(hs); err != nil {
		return err
	}
	changed := hs.GetTerm() != d.hard.GetTerm() || hs.GetVote() != d.hard.GetVote()
	if !changed && (hs.GetCommit() == d.hard.GetCommit() || !force && d.now().Sub(d.hardWritten) < time.Second) {
		return nil
	}
	data, err := json.Marshal(hardState{Term: hs.GetTerm(), Vote: hs.GetVote(), Commit: hs.GetCommit()})
	if err != nil {
		return err
	}
	if err := vfs.WriteFileAtomic(d.fs, filepath.Join(d.dir, StateFile), data); err != nil {
		return fmt.Errorf("quorum: writing %s: %w", StateFile, err)
	}
	d.hard = proto.Clone(hs).(*pb.HardState)
	d.hardWritten = d.now()
	return nil
}

func (d *disk) readHardState() (*pb.HardState, error) {
	data, err := vfs.ReadFile(d.fs, filepath.Join(d.dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return &pb.HardState{Term: new(uint64(0)), Vote: new(uint64(0)), Commit: new(uint64(0))}, nil
	}
	if err != nil {
		return nil, err
	}
	var s hardState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptState, StateFile, err)
	}
	return &pb.HardState{Term: &s.Term, Vote: &s.Vote, Commit: &s.Commit}, nil
}

// checkpointName is "%020d-%020d.checkpoint": the snapshot's index and term.
func checkpointName(index, term uint64) string {
	return fmt.Sprintf("%020d-%020d%s", index, term, checkpointSuffix)
}

func parseCheckpointName(name string) (index, term uint64, ok bool) {
	stem, ok := strings.CutSuffix(name, checkpointSuffix)
	if !ok || len(stem) != 41 || stem[20] != '-' {
		return 0, 0, false
	}
	_, err := fmt.Sscanf(stem, "%d-%d", &index, &term)
	return index, term, err == nil
}

// checkpoints lists the checkpoint files, oldest first.
func (d *disk) checkpoints() ([]string, error) {
	names, err := d.fs.List(d.dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if _, _, ok := parseCheckpointName(n); ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// latestCheckpoint reads the newest checkpoint, nil when there is none. A
// checkpoint file is the CRC-32C of the rest (4 bytes) and the Snapshot
// protobuf.
func (d *disk) latestCheckpoint() (*pb.Snapshot, error) {
	names, err := d.checkpoints()
	if err != nil || len(names) == 0 {
		return nil, err
	}
	name := names[len(names)-1]
	data, err := vfs.ReadFile(d.fs, filepath.Join(d.dir, name))
	if err != nil {
		return nil, err
	}
	if len(data) < 4 || crc32.Checksum(data[4:], castagnoli) != binary.BigEndian.Uint32(data) {
		return nil, fmt.Errorf("%w: %s: checksum mismatch", ErrCorruptState, name)
	}
	snap := new(pb.Snapshot)
	if err := proto.Unmarshal(data[4:], snap); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptState, name, err)
	}
	return snap, nil
}

// writeCheckpoint stores a snapshot durably and removes all but the newest
// two checkpoints.
func (d *disk) writeCheckpoint(snap *pb.Snapshot) error {
	body, err := proto.Marshal(snap)
	if err != nil {
		return err
	}
	data := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), crc32.Checksum(body, castagnoli))
	data = append(data, body...)
	md := snap.GetMetadata()
	if err := vfs.WriteFileAtomic(d.fs, filepath.Join(d.dir, checkpointName(md.GetIndex(), md.GetTerm())), data); err != nil {
		return fmt.Errorf("quorum: writing a checkpoint: %w", err)
	}
	names, err := d.checkpoints()
	if err != nil {
		return err
	}
	for len(names) > 2 {
		if err := d.fs.Remove(filepath.Join(d.dir, names[0])); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		names = names[1:]
	}
	return nil
}

// installSnapshot persists a snapshot received from the leader: the
// checkpoint first, then the log restarts after it.
func (d *disk) installSnapshot(snap *pb.Snapshot) error {
	if err := d.writeCheckpoint(snap); err != nil {
		return err
	}
	if err := d.wal.TruncateFullyAndStartAt(int64(snap.GetMetadata().GetIndex()) + 1); err != nil {
		return fmt.Errorf("quorum: restarting the Raft log after a snapshot: %w", err)
	}
	return d.mem.ApplySnapshot(snap)
}

// snapshot records a snapshot of the applied state at index (data is the
// image's encoding) and compacts the log behind it, keeping keep entries
// so that a follower a little behind catches up from the log rather than
// from a snapshot.
func (d *disk) snapshot(index uint64, data []byte, keep uint64) error {
	snap, err := d.mem.CreateSnapshot(index, d.conf, data)
	if err != nil {
		if errors.Is(err, raft.ErrSnapOutOfDate) {
			return nil
		}
		return err
	}
	if err := d.writeCheckpoint(snap); err != nil {
		return err
	}
	if index <= keep {
		return nil
	}
	compact := index - keep
	if err := d.mem.Compact(compact); err != nil && !errors.Is(err, raft.ErrCompacted) {
		return err
	}
	if _, err := d.wal.DeleteRecordsBefore(int64(compact)); err != nil {
		return fmt.Errorf("quorum: compacting the Raft log: %w", err)
	}
	return nil
}

// Seed starts a new quorum's log from a state machine snapshot instead of
// from nothing: a checkpoint at index 1, term 1, holding data, with the log
// to follow it. It is how a single node's metadata from before the quorum
// enters it. It does nothing to a directory that already holds a quorum's
// state (its StateFile), so a crash and a second Seed are harmless. Every
// voter of a cluster must be seeded alike, or none.
func Seed(fs vfs.FS, wal *storage.Log, voters []int32, data []byte) error {
	if vfs.Exists(fs, filepath.Join(wal.Dir(), StateFile)) {
		return nil
	}
	d := &disk{fs: fs, dir: wal.Dir(), wal: wal, now: time.Now}
	ids := make([]uint64, len(voters))
	for i, v := range voters {
		ids[i] = raftID(v)
	}
	slices.Sort(ids)
	snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
		ConfState: &pb.ConfState{Voters: ids}, Index: new(uint64(1)), Term: new(uint64(1)),
	}}
	if err := d.writeCheckpoint(snap); err != nil {
		return err
	}
	if err := wal.TruncateFullyAndStartAt(2); err != nil {
		return err
	}
	state, _ := json.Marshal(hardState{Term: 1, Commit: 1})
	return vfs.WriteFileAtomic(fs, filepath.Join(wal.Dir(), StateFile), state)
}
