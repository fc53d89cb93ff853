package quorum

import (
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// TestLoadedEntriesSurvivePowerLoss: etcd raft takes every entry its
// Storage holds as persisted, and a node acknowledges them (MsgAppResp to a
// leader's probe) and votes by them. A node killed between appending
// entries and syncing them finds them again when it restarts (the page
// cache outlives the process); if it loaded them without syncing, it would
// acknowledge entries a later power loss takes away, and a leader would
// count it towards committing them.
func TestLoadedEntriesSurvivePowerLoss(t *testing.T) {
	conf := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	open := func(fs *vfs.MemFS) *disk {
		t.Helper()
		logs, err := storage.OpenManager(fs, "/data", storage.ManagerOptions{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		wal, err := logs.GetOrCreate("__cluster_metadata", 0, storage.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		d, err := openDisk(fs, wal, conf, quiet(), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	entry := func(index uint64) *pb.Entry {
		return &pb.Entry{Term: new(uint64(1)), Index: new(index), Type: pb.EntryNormal.Enum(), Data: []byte("x")}
	}
	fs := vfs.NewMem()
	d := open(fs)
	rd := raft.Ready{HardState: &pb.HardState{Term: new(uint64(1)), Vote: new(uint64(1)), Commit: new(uint64(0))},
		Entries: []*pb.Entry{entry(1), entry(2), entry(3)}}
	if err := d.save(&rd); err != nil {
		t.Fatal(err)
	}
	// Killed after appending entries 4 and 5, before syncing them.
	var buf []byte
	for _, i := range []uint64{4, 5} {
		buf = encodeEntry(buf, entry(i), time.Now().UnixMilli())
	}
	if _, err := d.wal.Append(buf, storage.AppendOptions{LogAppendTime: -1}); err != nil {
		t.Fatal(err)
	}
	// Restarted on the same page cache: the entries are back.
	restarted := open(fs)
	loaded, _ := restarted.mem.LastIndex()
	if loaded != 5 {
		t.Fatalf("restarted with entries up to %d, want 5 (the page cache's)", loaded)
	}
	// Then the power goes: what the restarted node held, and could have
	// acknowledged, must still be there.
	afterPowerLoss := open(fs.CrashClone())
	if last, _ := afterPowerLoss.mem.LastIndex(); last < loaded {
		t.Fatalf("after a power loss the node has entries up to %d; it had loaded (and could have acknowledged) up to %d", last, loaded)
	}
}
