package storage

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
)

// buildLog appends n single-batch requests of random sizes and record
// counts, and returns the stored batches.
func buildLog(t testing.TB, l *Log, n int, rng *rand.Rand) [][]byte {
	t.Helper()
	var stored [][]byte
	for i := range n {
		b := makeBatch(t, spec{records: 1 + rng.IntN(5), valueSize: 1 + rng.IntN(300), ts: 1000 + int64(i)*10,
			tsStep: 1, seed: byte(i)})
		mustAppend(t, l, b, leader(1))
		stored = append(stored, b)
	}
	return stored
}

func forEachFS(t *testing.T, fn func(t *testing.T, fs vfs.FS, dir string)) {
	t.Run("os", func(t *testing.T) { fn(t, vfs.Default, tempLogDir(t, "t-0")) })
	t.Run("mem", func(t *testing.T) { fn(t, vfs.NewMem(), "/data/t-0") })
}

func TestAppendReadAcrossManyRolls(t *testing.T) {
	forEachFS(t, func(t *testing.T, fs vfs.FS, dir string) {
		l := openTestLog(t, fs, dir, testConfig(), LogOptions{})
		defer l.Close()
		rng := rand.New(rand.NewPCG(1, 1))
		stored := buildLog(t, l, 400, rng)
		if l.NumSegments() < 20 {
			t.Fatalf("only %d segments", l.NumSegments())
		}
		got := readAllBatches(t, l)
		if len(got) != len(stored) {
			t.Fatalf("read %d batches, appended %d", len(got), len(stored))
		}
		for i := range got {
			if !bytes.Equal(got[i], stored[i]) {
				t.Fatalf("batch %d differs", i)
			}
		}
		checkEveryOffset(t, l, stored)

		// Reopen without a clean marker: a full recovery gives the same log.
		l.Close()
		l = openTestLog(t, fs, dir, testConfig(), LogOptions{})
		defer l.Close()
		checkEveryOffset(t, l, stored)
		// And with one: indexes are trusted (and sanity-checked).
		l.Close()
		l = openTestLog(t, fs, dir, testConfig(), LogOptions{CleanShutdown: true, RecoveryPoint: l.LogEndOffset()})
		defer l.Close()
		checkEveryOffset(t, l, stored)
		// Appends continue where the log ended.
		b := makeBatch(t, spec{records: 3})
		if info := mustAppend(t, l, b, leader(1)); info.FirstOffset != l.LogEndOffset()-3 {
			t.Fatalf("append after reopen at %d, end %d", info.FirstOffset, l.LogEndOffset())
		}
	})
}

// checkEveryOffset reads at every offset, at every segment boundary and
// past both ends, and checks the region holds exactly the expected whole
// batches.
func checkEveryOffset(t *testing.T, l *Log, stored [][]byte) {
	t.Helper()
	type span struct{ first, last int64 }
	var spans []span
	for _, b := range stored {
		h, _ := record.ParseHeader(b)
		spans = append(spans, span{h.BaseOffset, h.LastOffset()})
	}
	leo := l.LogEndOffset()
	if leo != spans[len(spans)-1].last+1 {
		t.Fatalf("log end %d, last batch ends at %d", leo, spans[len(spans)-1].last)
	}
	for i, sp := range spans {
		for off := sp.first; off <= sp.last; off++ {
			res, err := l.Read(off, 1, math.MaxInt64, true)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := res.Region.ReadAll(nil)
			if res.FirstBatchOffset != sp.first || !bytes.Equal(got, stored[i]) {
				t.Fatalf("Read(%d) returned batch at %d (%d bytes), want batch %d at %d", off, res.FirstBatchOffset, len(got), i, sp.first)
			}
		}
	}
	if res, err := l.Read(leo, 1<<20, math.MaxInt64, true); err != nil || res.Region.Len != 0 {
		t.Fatalf("Read(LEO) = %+v, %v", res, err)
	}
	if _, err := l.Read(leo+1, 1<<20, math.MaxInt64, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("Read(LEO+1): %v", err)
	}
	if start := l.LogStartOffset(); start > 0 {
		if _, err := l.Read(start-1, 1<<20, math.MaxInt64, true); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("Read(start-1): %v", err)
		}
	}
	for _, base := range l.SegmentBaseOffsets() {
		res, err := l.Read(base, 1<<20, math.MaxInt64, false)
		if err != nil || res.FirstBatchOffset != base {
			t.Fatalf("Read(segment base %d) starts at %d: %v", base, res.FirstBatchOffset, err)
		}
	}
}

func TestReadLimits(t *testing.T) {
	l := openTestLog(t, vfs.NewMem(), "/d/t-0", testConfig(), LogOptions{})
	defer l.Close()
	rng := rand.New(rand.NewPCG(2, 2))
	stored := buildLog(t, l, 60, rng)
	var bases []int64
	var ends []int64 // offset after each batch
	for _, b := range stored {
		h, _ := record.ParseHeader(b)
		bases = append(bases, h.BaseOffset)
		ends = append(ends, h.NextOffset())
	}
	segOf := func(off int64) int64 {
		var s int64
		for _, b := range l.SegmentBaseOffsets() {
			if b <= off {
				s = b
			}
		}
		return s
	}
	// For each start batch and each byte budget, the region is the
	// longest run of whole batches within the budget and the start batch's
	// segment, and below maxOffset.
	for i := range stored {
		for _, maxBytes := range []int{0, 1, len(stored[i]) - 1, len(stored[i]), len(stored[i]) + 1, 700, 1500, 5000} {
			for _, maxOffset := range []int64{bases[i], ends[i], ends[min(i+3, len(ends)-1)], math.MaxInt64} {
				for _, minOne := range []bool{false, true} {
					res, err := l.Read(bases[i], maxBytes, maxOffset, minOne)
					if err != nil {
						t.Fatal(err)
					}
					var want []byte
					for j := i; j < len(stored); j++ {
						if ends[j]-1 >= maxOffset || segOf(bases[j]) != segOf(bases[i]) {
							break
						}
						if len(want)+len(stored[j]) > maxBytes {
							if j == i && minOne {
								want = stored[j]
							}
							break
						}
						want = append(want, stored[j]...)
					}
					got, _ := res.Region.ReadAll(nil)
					if !bytes.Equal(got, want) {
						t.Fatalf("Read(%d, %d, %d, %v): %d bytes, want %d", bases[i], maxBytes, maxOffset, minOne, len(got), len(want))
					}
				}
			}
		}
	}
}

func TestAppendRejectsAndWritesNothing(t *testing.T) {
	cfg := testConfig()
	cfg.MaxMessageBytes = 500
	l := openTestLog(t, vfs.NewMem(), "/d/t-0", cfg, LogOptions{})
	defer l.Close()
	good := makeBatch(t, spec{records: 2})
	mustAppend(t, l, bytes.Clone(good), leader(0))
	before := l.Size()

	badCRC := makeBatch(t, spec{records: 2})
	badCRC[len(badCRC)-1] ^= 1
	big := makeBatch(t, spec{records: 1, valueSize: 600})
	cases := []struct {
		name string
		data []byte
		opts AppendOptions
		want error
		rec  error
	}{
		{"crc in second batch", concat(good, badCRC), leader(0), ErrCorrupt, record.ErrCRC},
		{"truncated", good[:len(good)-1], leader(0), ErrCorrupt, record.ErrShort},
		{"trailing garbage", concat(good, []byte{1, 2, 3}), leader(0), ErrCorrupt, record.ErrShort},
		{"too large", concat(good, big), leader(0), ErrMessageTooLarge, nil},
		{"follower below end", makeBatch(t, spec{base: 0, records: 2}), AppendOptions{LogAppendTime: -1}, ErrOffsetsOutOfOrder, nil},
		{"follower not increasing", concat(makeBatch(t, spec{base: 5}), makeBatch(t, spec{base: 5})), AppendOptions{LogAppendTime: -1}, ErrOffsetsOutOfOrder, nil},
	}
	for _, c := range cases {
		orig := bytes.Clone(c.data)
		_, err := l.Append(c.data, c.opts)
		if !errors.Is(err, c.want) || c.rec != nil && !errors.Is(err, c.rec) {
			t.Errorf("%s: %v", c.name, err)
		}
		if !bytes.Equal(orig, c.data) {
			t.Errorf("%s: input modified", c.name)
		}
		if l.Size() != before || l.LogEndOffset() != 2 {
			t.Errorf("%s: something was written", c.name)
		}
	}
}

func TestCompressedBatchesStoredAsTheyCame(t *testing.T) {
	l := openTestLog(t, vfs.NewMem(), "/d/t-0", testConfig(), LogOptions{})
	defer l.Close()
	var want [][]byte
	for codec := record.CodecNone; codec <= record.CodecZstd; codec++ {
		b := makeBatch(t, spec{records: 20, valueSize: 50, ts: 5000 + int64(codec)*100, tsStep: 3, codec: codec})
		mustAppend(t, l, b, leader(2))
		want = append(want, b)
	}
	got := readAllBatches(t, l)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("codec %d batch altered", i)
		}
		h, _ := record.ParseHeader(got[i])
		if h.Codec() != i {
			t.Fatalf("codec %d stored as %d", i, h.Codec())
		}
	}
}

func TestLogAppendTime(t *testing.T) {
	l := openTestLog(t, vfs.NewMem(), "/d/t-0", testConfig(), LogOptions{})
	defer l.Close()
	b := makeBatch(t, spec{records: 3, ts: 10, tsStep: 1})
	info := mustAppend(t, l, b, AppendOptions{AssignOffsets: true, LeaderEpoch: 1, LogAppendTime: 777})
	h, err := record.Validate(b, 0) // CRC recomputed
	if err != nil || h.MaxTimestamp != 777 || h.Attributes&record.TimestampTypeLogAppend == 0 {
		t.Fatalf("header %+v, %v", h, err)
	}
	if info.LogAppendTime != 777 || info.MaxTimestamp != 777 || info.NumRecords != 3 {
		t.Fatalf("info %+v", info)
	}
	if off, ts, ok := l.OffsetForTimestamp(700); !ok || off != 0 || ts != 777 {
		t.Fatalf("OffsetForTimestamp = %d %d %v", off, ts, ok)
	}
}

func TestFollowerAppendKeepsOffsetsAndEpochs(t *testing.T) {
	l := openTestLog(t, vfs.NewMem(), "/d/t-0", testConfig(), LogOptions{})
	defer l.Close()
	follower := AppendOptions{LogAppendTime: -1}
	mustAppend(t, l, concat(makeBatch(t, spec{base: 0, records: 3, epoch: 1}), makeBatch(t, spec{base: 3, epoch: 1})), follower)
	// A gap, as a compacted leader's log has, and a new epoch.
	info := mustAppend(t, l, makeBatch(t, spec{base: 10, records: 2, epoch: 4}), follower)
	if info.FirstOffset != 10 || l.LogEndOffset() != 12 {
		t.Fatalf("info %+v, end %d", info, l.LogEndOffset())
	}
	if got := l.Epochs(); len(got) != 2 || got[0] != (EpochEntry{1, 0}) || got[1] != (EpochEntry{4, 10}) {
		t.Fatalf("epochs %v", got)
	}
	// Offsets in the gap read the next batch.
	res, err := l.Read(5, 1000, math.MaxInt64, true)
	if err != nil || res.FirstBatchOffset != 10 {
		t.Fatalf("Read in gap: %+v %v", res, err)
	}
	// A huge jump rolls to a segment based at the batch.
	info = mustAppend(t, l, makeBatch(t, spec{base: 1 << 40, epoch: 4}), follower)
	if info.RolledTo != 1<<40 || l.LogEndOffset() != 1<<40+1 {
		t.Fatalf("jump: %+v", info)
	}
}

func TestEndOffsetForEpoch(t *testing.T) {
	c := epochCache{}
	for _, e := range []EpochEntry{{1, 0}, {2, 10}, {5, 30}} {
		c.assign(e.Epoch, e.StartOffset)
	}
	const leo = 42
	cases := []struct {
		epoch     int32
		wantEpoch int32
		wantEnd   int64
	}{
		{-1, -1, -1}, {0, 0, 0}, {1, 1, 10}, {2, 2, 30}, {3, 2, 30}, {4, 2, 30}, {5, 5, leo}, {6, -1, -1},
	}
	for _, tc := range cases {
		e, o := c.endOffsetFor(tc.epoch, leo)
		if e != tc.wantEpoch || o != tc.wantEnd {
			t.Errorf("endOffsetFor(%d) = %d, %d; want %d, %d", tc.epoch, e, o, tc.wantEpoch, tc.wantEnd)
		}
	}
	// Assigning an older epoch or an earlier start removes what it
	// contradicts.
	c.assign(3, 20)
	if len(c.entries) != 3 || c.entries[2] != (EpochEntry{3, 20}) {
		t.Fatalf("after assign(3,20): %v", c.entries)
	}
	if c.assign(3, 25) {
		t.Fatal("same epoch later start changed the cache")
	}
	c.truncateFromStart(15)
	if c.entries[0] != (EpochEntry{2, 15}) || len(c.entries) != 2 {
		t.Fatalf("after truncateFromStart(15): %v", c.entries)
	}
	c.truncateFromEnd(20)
	if len(c.entries) != 1 {
		t.Fatalf("after truncateFromEnd(20): %v", c.entries)
	}
}

func TestScanBatchHeaders(t *testing.T) {
	l := openTestLog(t, vfs.NewMem(), "/d/t-0", testConfig(), LogOptions{})
	defer l.Close()
	stored := buildLog(t, l, 100, rand.New(rand.NewPCG(3, 3)))
	for _, from := range []int64{0, 7, 100, l.LogEndOffset() - 1} {
		var got []int64
		if err := l.ScanBatchHeaders(from, func(h record.Header, _ int64) bool {
			got = append(got, h.BaseOffset)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		var want []int64
		for _, b := range stored {
			h, _ := record.ParseHeader(b)
			if h.LastOffset() >= from {
				want = append(want, h.BaseOffset)
			}
		}
		if len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Fatalf("from %d: %d headers (%v..), want %d", from, len(got), got[:1], len(want))
		}
	}
}

// One request of many batches can fill the index; the append still
// succeeds (the index takes no more entries) and the next one rolls.
func TestAppendFillingTheIndex(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	cfg.SegmentIndexBytes = 48 // 6 offset entries, 4 time entries
	cfg.IndexIntervalBytes = 0 // an entry before every batch but the first
	forEachFS(t, func(t *testing.T, fs vfs.FS, dir string) {
		l := openTestLog(t, fs, dir, cfg, LogOptions{})
		defer l.Close()
		var req [][]byte
		for i := range 20 {
			req = append(req, makeBatch(t, spec{ts: int64(i)}))
		}
		all := concat(req...)
		mustAppend(t, l, all, leader(0))
		var stored [][]byte // the batches as stored: offsets assigned in place
		record.Batches(all, func(_ record.Header, b []byte) bool { stored = append(stored, b); return true })
		last := makeBatch(t, spec{})
		if info := mustAppend(t, l, last, leader(0)); info.RolledTo != 20 {
			t.Fatalf("no roll after a full index: %+v", info)
		}
		stored = append(stored, last)
		checkEveryOffset(t, l, stored)
		l.Close()
		l = openTestLog(t, fs, dir, cfg, LogOptions{})
		checkEveryOffset(t, l, stored)
	})
}
