package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-io/strata/internal/vfs"
)

// be builds big-endian bytes by hand: be(4, 5) is the 4-byte 5.
func be(fields ...int64) []byte {
	var out []byte
	for i := 0; i < len(fields); i += 2 {
		switch fields[i] {
		case 4:
			out = binary.BigEndian.AppendUint32(out, uint32(fields[i+1]))
		case 8:
			out = binary.BigEndian.AppendUint64(out, uint64(fields[i+1]))
		}
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFormatsByteForByte(t *testing.T) {
	dataDir := t.TempDir()
	m, err := OpenManager(vfs.Default, dataDir, ManagerOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Eight equal batches of two records fill the first segment; the
	// ninth rolls. Batch i has max timestamp 1000+10i, except batch 3
	// (900, out of order) and batch 7 (1200).
	ts := func(i int) int64 {
		switch i {
		case 3:
			return 900
		case 7:
			return 1200
		}
		return 1000 + 10*int64(i)
	}
	var batches [][]byte
	for i := range 10 {
		batches = append(batches, makeBatch(t, spec{records: 2, ts: ts(i), seed: byte(i)}))
	}
	n := int64(len(batches[0]))
	if n <= 50 || n > 100 {
		t.Fatalf("test assumes batches of 51..100 bytes, got %d", n)
	}
	cfg := DefaultConfig()
	cfg.SegmentBytes = 8 * n
	cfg.IndexIntervalBytes = 100
	cfg.SegmentIndexBytes = 125 // the offset index rounds to 120 bytes (15 entries), the time index to 120 (10)
	l, err := m.GetOrCreate("my-topic", 3, cfg)
	if err != nil {
		t.Fatal(err)
	}
	partDir := filepath.Join(dataDir, "my-topic-3")
	if l.Dir() != partDir {
		t.Fatalf("Dir = %s", l.Dir())
	}
	var want []byte // the .log of the first segment as it must be stored
	for i, b := range batches {
		epoch := int32(3)
		if i >= 5 {
			epoch = 5
		}
		stored := bytes.Clone(b)
		info := mustAppend(t, l, b, leader(epoch))
		if info.FirstOffset != int64(2*i) || info.LastOffset != int64(2*i+1) {
			t.Fatalf("batch %d got offsets %d..%d", i, info.FirstOffset, info.LastOffset)
		}
		// The stored batch is the producer's bytes with the base offset
		// and leader epoch written in place; the CRC is untouched.
		copy(stored[0:], be(8, int64(2*i)))
		copy(stored[12:], be(4, int64(epoch)))
		if !bytes.Equal(b, stored) {
			t.Fatalf("batch %d not edited in place as expected", i)
		}
		if i < 8 {
			want = append(want, stored...)
		}
		if i == 8 && info.RolledTo != 16 {
			t.Fatalf("append 8 RolledTo = %d, want 16", info.RolledTo)
		}
	}
	seg0 := filepath.Join(partDir, "00000000000000000000")
	seg1 := filepath.Join(partDir, "00000000000000000016")
	if got := readFile(t, seg0+".log"); !bytes.Equal(got, want) {
		t.Fatalf(".log differs: %d bytes, want %d", len(got), len(want))
	}
	// Offset index: an entry before each batch that starts more than 100
	// bytes after the last entry's batch: batches 2, 4, 6, holding the
	// batch's LAST offset relative to 0 and its position. Trimmed on roll.
	wantIndex := concat(be(4, 5, 4, 2*n), be(4, 9, 4, 4*n), be(4, 13, 4, 6*n))
	if got := readFile(t, seg0+".index"); !bytes.Equal(got, wantIndex) {
		t.Fatalf(".index = %x\nwant     %x", got, wantIndex)
	}
	// Time index: the max timestamp so far and the offset that reached
	// it, at each offset-index entry, plus the segment's final max (1200
	// at offset 15) written when it rolled.
	wantTime := concat(be(8, 1020, 4, 5), be(8, 1040, 4, 9), be(8, 1060, 4, 13), be(8, 1200, 4, 15))
	if got := readFile(t, seg0+".timeindex"); !bytes.Equal(got, wantTime) {
		t.Fatalf(".timeindex = %x\nwant         %x", got, wantTime)
	}
	// The active segment's indexes are preallocated with their first
	// entry, zero beyond entries; without one they are empty.
	if got := readFile(t, seg1+".index"); len(got) != 0 {
		t.Fatalf("active .index: %d bytes %x", len(got), got)
	}
	if got := readFile(t, seg1+".timeindex"); len(got) != 0 {
		t.Fatalf("active .timeindex: %d bytes", len(got))
	}
	if got := readFile(t, seg1+".log"); !bytes.Equal(got, concat(batches[8], batches[9])) {
		t.Fatal("active .log differs")
	}
	if err := l.Snapshots().Write(20, []byte("producer state")); err != nil {
		t.Fatal(err)
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := string(readFile(t, filepath.Join(partDir, "leader-epoch-checkpoint"))); got != "0\n2\n3 0\n5 10\n" {
		t.Fatalf("leader-epoch-checkpoint = %q", got)
	}
	if got := string(readFile(t, filepath.Join(dataDir, "recovery-point-offset-checkpoint"))); got != "0\n1\nmy-topic 3 20\n" {
		t.Fatalf("recovery-point-offset-checkpoint = %q", got)
	}
	if got := string(readFile(t, filepath.Join(dataDir, "log-start-offset-checkpoint"))); got != "0\n1\nmy-topic 3 0\n" {
		t.Fatalf("log-start-offset-checkpoint = %q", got)
	}
	if got := readFile(t, filepath.Join(dataDir, ".kafka_cleanshutdown")); len(got) != 0 {
		t.Fatalf("clean shutdown marker holds %q", got)
	}
	if got := string(readFile(t, filepath.Join(partDir, "00000000000000000020.snapshot"))); got != "producer state" {
		t.Fatalf("snapshot = %q", got)
	}
	// Closing trims the active segment's indexes too. Batch 9 (at
	// position n of the new segment) gets no entry; the final time entry
	// is batch 9's max timestamp at its last offset.
	if got := readFile(t, seg1+".index"); len(got) != 0 {
		t.Fatalf("closed active .index = %x", got)
	}
	if got, want := readFile(t, seg1+".timeindex"), be(8, 1090, 4, 3); !bytes.Equal(got, want) {
		t.Fatalf("closed active .timeindex = %x, want %x", got, want)
	}
	names, _ := os.ReadDir(partDir)
	var list []string
	for _, e := range names {
		list = append(list, e.Name())
	}
	wantNames := "[00000000000000000000.index 00000000000000000000.log 00000000000000000000.timeindex " +
		"00000000000000000016.index 00000000000000000016.log 00000000000000000016.timeindex " +
		"00000000000000000020.snapshot leader-epoch-checkpoint]"
	if fmt.Sprint(list) != wantNames {
		t.Fatalf("partition dir holds %v", list)
	}

	// Reopening after the clean shutdown trusts all of it.
	m, err = OpenManager(vfs.Default, dataDir, ManagerOptions{Logger: quietLogger(), Default: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if vfs.Exists(vfs.Default, filepath.Join(dataDir, ".kafka_cleanshutdown")) {
		t.Fatal("clean shutdown marker survived opening")
	}
	l, ok := m.Log("my-topic", 3)
	if !ok || l.LogEndOffset() != 20 || l.NumSegments() != 2 {
		t.Fatalf("reopened log: ok %v", ok)
	}
	if ts, off := l.MaxTimestamp(); ts != 1200 || off != 14 { // both records of batch 7 carry 1200
		t.Fatalf("MaxTimestamp = %d at %d", ts, off)
	}
}

func TestCheckpointFormats(t *testing.T) {
	got := string(encodeOffsetCheckpoint(map[TopicPartition]int64{
		{"b", 1}: 7, {"a-b-c", 12}: 1 << 40, {"a-b-c", 2}: 0,
	}))
	want := "0\n3\na-b-c 2 0\na-b-c 12 1099511627776\nb 1 7\n"
	if got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	back, err := decodeOffsetCheckpoint("x", []byte(want))
	if err != nil || len(back) != 3 || back[TopicPartition{"a-b-c", 12}] != 1<<40 {
		t.Fatalf("decode: %v %v", back, err)
	}
	for _, bad := range []string{"", "1\n0\n", "0\n2\na 1 2\n", "0\n1\na 1\n", "0\n1\na x 2\n", "0\n1\na 1 -2\n", "0\n0\nextra\n"} {
		if _, err := decodeOffsetCheckpoint("x", []byte(bad)); err == nil {
			t.Errorf("decoded malformed %q", bad)
		}
	}
	c := epochCache{entries: []EpochEntry{{0, 0}, {4, 100}}}
	if got := string(c.encode()); got != "0\n2\n0 0\n4 100\n" {
		t.Fatalf("epochs %q", got)
	}
	if _, err := decodeEpochCheckpoint("x", []byte("0\n2\n4 100\n3 200\n")); err == nil {
		t.Fatal("decoded decreasing epochs")
	}
}

func TestParsePartitionDir(t *testing.T) {
	for name, want := range map[string]TopicPartition{
		"orders-0": {"orders", 0}, "my-topic-12": {"my-topic", 12}, "a.b_c-7": {"a.b_c", 7}, "x--1": {"x-", 1},
	} {
		got, err := ParsePartitionDir(name)
		if err != nil || got != want {
			t.Errorf("%s: %v %v", name, got, err)
		}
	}
	for _, name := range []string{"orders", "-1", "orders-", "orders-x", "orders-+1", "orders-99999999999"} {
		if _, err := ParsePartitionDir(name); err == nil {
			t.Errorf("%s parsed", name)
		}
	}
}
