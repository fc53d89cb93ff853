package storage

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kv is one record of a test batch for a compacted log.
type kv struct {
	key, value string
	tombstone  bool // a null value
	nullKey    bool
}

// batchOpts are a test batch's header fields.
type batchOpts struct {
	codec      int
	ts         int64
	pid        int64 // -1 (the zero value is taken as -1): not idempotent
	epoch      int16
	seq        int32
	control    bool
	idempotent bool
}

// kvBatch builds a batch as a producer sends it, with the codec's usual
// library through record.Compress.
func kvBatch(t testing.TB, o batchOpts, kvs ...kv) []byte {
	t.Helper()
	recs := make([]record.Rec, len(kvs))
	for i, r := range kvs {
		recs[i] = record.Rec{Key: []byte(r.key), Value: []byte(r.value), Timestamp: o.ts + int64(i)}
		if r.nullKey {
			recs[i].Key = nil
		}
		if r.tombstone {
			recs[i].Value = nil
		}
	}
	plain := record.Build(nil, recs)
	h, err := record.ParseHeader(plain)
	if err != nil {
		t.Fatal(err)
	}
	if o.idempotent {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = o.pid, o.epoch, o.seq
	}
	h.Attributes = int16(o.codec)
	if o.control {
		h.Attributes |= record.AttrControl
	}
	comp, err := record.Compress(nil, o.codec, plain[record.HeaderSize:])
	if err != nil {
		t.Fatal(err)
	}
	out := record.AppendBatch(nil, &h, comp)
	if o.control {
		_, err = record.Validate(out, 0)
	} else {
		_, err = record.ValidateProduced(out, record.ValidateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decompress reads a stored batch as the cleaner does: checked and
// measured by record.ScanStored, then decompressed.
func decompress(batch []byte) ([]byte, error) {
	h, err := record.ParseHeader(batch)
	if err != nil {
		return nil, err
	}
	size, err := record.ScanStored(batch, &h, nil, nil)
	if err != nil {
		return nil, err
	}
	return record.Decompress(batch, size, nil)
}

// rec is a record read back from a log.
type rec struct {
	offset    int64
	key       string
	value     string
	tombstone bool
	ts        int64
}

// readRecords returns every record from the log start, in order, and
// checks every batch validates.
func readRecords(t testing.TB, l *Log) []rec {
	t.Helper()
	var out []rec
	for _, b := range readAllBatches(t, l) {
		h, err := record.Validate(b, 0)
		if err != nil {
			t.Fatalf("batch invalid: %v", err)
		}
		d, err := decompress(b)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		err = record.Records(d, func(off, ts int64, r *kmsg.Record) error {
			out = append(out, rec{off, string(r.Key), string(r.Value), r.Value == nil, ts})
			n++
			return nil
		})
		if err != nil || n != int(h.NumRecords) {
			t.Fatalf("batch at %d: %d records of %d: %v", h.BaseOffset, n, h.NumRecords, err)
		}
	}
	return out
}

func compactConfig() Config {
	c := testConfig()
	c.Compact = true
	c.Delete = false
	c.SegmentBytes = 2048
	c.SegmentIndexBytes = 4096
	return c
}

// cleanOK cleans the log and fails the test on an error.
func cleanOK(t testing.TB, l *Log, now time.Time) CleanResult {
	t.Helper()
	res, err := l.Clean(context.Background(), CleanOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkCompacted checks the log against what was written: every record
// read was written at that offset, in order; below cleanedTo a key's
// record is there only if it is the key's latest below cleanedTo (and not
// a removed tombstone); at and past cleanedTo everything is there.
func checkCompacted(t *testing.T, got, written []rec, cleanedTo int64, tombstonesGone bool) {
	t.Helper()
	byOffset := map[int64]rec{}
	latest := map[string]int64{}
	for _, r := range written {
		byOffset[r.offset] = r
		if r.offset < cleanedTo {
			latest[r.key] = r.offset
		}
	}
	want := []rec{}
	for _, r := range written {
		if r.offset >= cleanedTo || latest[r.key] == r.offset && !(r.tombstone && tombstonesGone) {
			want = append(want, r)
		}
	}
	for i, r := range got {
		w, ok := byOffset[r.offset]
		if !ok || w.key != r.key || w.value != r.value || w.tombstone != r.tombstone || w.ts != r.ts {
			t.Fatalf("record %d: read %+v, written %+v", i, r, w)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d\nread %v\nwant %v", len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d: read %+v, want %+v", i, got[i], want[i])
		}
	}
}

// writeUpdates appends rounds of updates to keys, a batch of batchSize
// records at a time, and returns what it wrote.
func writeUpdates(t *testing.T, l *Log, o batchOpts, keys, rounds, batchSize int, rng *rand.Rand) []rec {
	t.Helper()
	var written []rec
	var pending []kv
	flush := func() {
		if len(pending) == 0 {
			return
		}
		info := mustAppend(t, l, kvBatch(t, o, pending...), leader(1))
		for i, p := range pending {
			written = append(written, rec{info.FirstOffset + int64(i), p.key, p.value, p.tombstone, o.ts + int64(i)})
		}
		pending = pending[:0]
		if o.idempotent {
			o.seq += int32(batchSize)
		}
	}
	for r := range rounds {
		for _, k := range rng.Perm(keys) {
			pending = append(pending, kv{key: fmt.Sprintf("key-%03d", k), value: fmt.Sprintf("v%d-%d-%s", r, k, bytes.Repeat([]byte{'x'}, rng.IntN(40)))})
			if len(pending) == batchSize {
				flush()
			}
		}
	}
	flush()
	return written
}

func TestCleanKeepsTheLatestValuePerKey(t *testing.T) {
	codecs := []struct {
		name  string
		codec int
	}{{"none", record.CodecNone}, {"gzip", record.CodecGzip}, {"snappy", record.CodecSnappy},
		{"lz4", record.CodecLz4}, {"zstd", record.CodecZstd}}
	for _, c := range codecs {
		for _, batchSize := range []int{1, 7} {
			t.Run(fmt.Sprintf("%s/batch=%d", c.name, batchSize), func(t *testing.T) {
				dir := tempLogDir(t, "compacted-0")
				cfg := compactConfig()
				l := openTestLog(t, vfs.Default, dir, cfg, LogOptions{})
				defer l.Close()
				rng := rand.New(rand.NewPCG(1, uint64(batchSize)))
				written := writeUpdates(t, l, batchOpts{codec: c.codec, ts: 1000}, 30, 8, batchSize, rng)
				leo, segsBefore, sizeBefore := l.LogEndOffset(), l.NumSegments(), l.Size()
				res := cleanOK(t, l, time.UnixMilli(5000))
				active := l.SegmentBaseOffsets()[l.NumSegments()-1]
				if res.CleanedTo != active || res.FirstDirtyOffset != 0 || l.CleanerCheckpoint() != active {
					t.Fatalf("cleaned [%d, %d), checkpoint %d, active segment at %d", res.FirstDirtyOffset, res.CleanedTo, l.CleanerCheckpoint(), active)
				}
				if l.LogEndOffset() != leo || l.LogStartOffset() != 0 {
					t.Fatalf("log end %d (was %d), start %d", l.LogEndOffset(), leo, l.LogStartOffset())
				}
				if l.Size() >= sizeBefore || res.SegmentsBefore == 0 || res.BytesAfter >= res.BytesBefore || res.Keys != 30 {
					t.Fatalf("size %d -> %d, segments %d, result %+v", sizeBefore, l.Size(), segsBefore, res)
				}
				checkCompacted(t, readRecords(t, l), written, res.CleanedTo, false)

				// Segments are grouped by their size before cleaning, as
				// Kafka does: later cleanings merge the shrunken ones
				// (dropping the emptied batches kept at the ends of runs),
				// until nothing changes.
				for i := 0; ; i++ {
					merged := cleanOK(t, l, time.UnixMilli(5000))
					checkCompacted(t, readRecords(t, l), written, res.CleanedTo, false)
					if merged.SegmentsBefore == 0 {
						break
					}
					if merged.SegmentsAfter >= merged.SegmentsBefore && merged.BatchesRemoved == 0 || merged.RecordsRemoved != 0 || i == 10 {
						t.Fatalf("cleaning %d: %+v", i+2, merged)
					}
				}
				if 2*l.NumSegments() > segsBefore+2 {
					t.Fatalf("%d segments after merging, from %d", l.NumSegments(), segsBefore)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				r := openTestLog(t, vfs.Default, dir, cfg, LogOptions{RecoveryPoint: 0})
				defer r.Close()
				checkCompacted(t, readRecords(t, r), written, res.CleanedTo, false)
				if r.LogEndOffset() != leo {
					t.Fatalf("reopened log ends at %d, want %d", r.LogEndOffset(), leo)
				}
			})
		}
	}
}

// fillTo appends single-record batches of filler keys until the log has
// segments segments, so what came before is sealed.
func fillTo(t *testing.T, l *Log, segments int, ts int64, written *[]rec) {
	t.Helper()
	for i := 0; l.NumSegments() < segments; i++ {
		k := kv{key: fmt.Sprintf("filler-%d", i), value: "f"}
		info := mustAppend(t, l, kvBatch(t, batchOpts{ts: ts}, k), leader(1))
		*written = append(*written, rec{info.FirstOffset, k.key, k.value, false, ts})
	}
}

// appendKV appends one batch and records what it wrote.
func appendKV(t *testing.T, l *Log, o batchOpts, written *[]rec, kvs ...kv) AppendInfo {
	t.Helper()
	info := mustAppend(t, l, kvBatch(t, o, kvs...), leader(1))
	for i, k := range kvs {
		*written = append(*written, rec{info.FirstOffset + int64(i), k.key, k.value, k.tombstone, o.ts + int64(i)})
	}
	return info
}

func TestCleanRemovesTombstonesAfterDeleteRetention(t *testing.T) {
	cfg := compactConfig()
	cfg.DeleteRetentionMs = 1000
	l := openTestLog(t, newMem(t, "/d"), "/d/t-0", cfg, LogOptions{})
	defer l.Close()
	var written []rec
	appendKV(t, l, batchOpts{ts: 100}, &written, kv{key: "a", value: "1"}, kv{key: "b", value: "1"}, kv{key: "c", value: "1"})
	appendKV(t, l, batchOpts{ts: 200}, &written, kv{key: "a", tombstone: true})
	appendKV(t, l, batchOpts{ts: 300}, &written, kv{key: "b", value: "2"}, kv{key: "b", tombstone: true}, kv{key: "d", value: "1"})
	fillTo(t, l, 3, 400, &written)

	const t0 = 10_000
	res := cleanOK(t, l, time.UnixMilli(t0))
	checkCompacted(t, readRecords(t, l), written, res.CleanedTo, false)
	// The batches keeping tombstones carry the delete horizon; their
	// records keep their timestamps (checkCompacted compared them).
	horizons := 0
	for _, b := range readAllBatches(t, l) {
		h, _ := record.ParseHeader(b)
		if h.HasDeleteHorizon() {
			horizons++
			if h.BaseTimestamp != t0+1000 {
				t.Fatalf("delete horizon %d, want %d", h.BaseTimestamp, t0+1000)
			}
		}
	}
	if horizons != 2 || l.cleaner.deleteHorizon.Load() != t0+1000 {
		t.Fatalf("%d batches with a delete horizon, earliest %d", horizons, l.cleaner.deleteHorizon.Load())
	}
	if _, due := cleaningDue(l, time.UnixMilli(t0+999)); due {
		t.Fatal("cleaning due before the delete horizon")
	}
	if _, due := cleaningDue(l, time.UnixMilli(t0+1000)); !due {
		t.Fatal("cleaning not due at the delete horizon")
	}

	// Before the horizon they stay; at it they go.
	res = cleanOK(t, l, time.UnixMilli(t0+999))
	checkCompacted(t, readRecords(t, l), written, res.CleanedTo, false)
	res = cleanOK(t, l, time.UnixMilli(t0+1000))
	if res.TombstonesRemoved != 2 {
		t.Fatalf("removed %d tombstones, want 2", res.TombstonesRemoved)
	}
	checkCompacted(t, readRecords(t, l), written, res.CleanedTo, true)
	if l.cleaner.deleteHorizon.Load() != math.MaxInt64 {
		t.Fatalf("earliest delete horizon %d after every tombstone went", l.cleaner.deleteHorizon.Load())
	}

	// A tombstone not yet deduplicated (the active segment) is not
	// touched, and a new one gets its own horizon.
	appendKV(t, l, batchOpts{ts: 500}, &written, kv{key: "c", tombstone: true})
	res = cleanOK(t, l, time.UnixMilli(t0+5000))
	checkCompacted(t, readRecords(t, l), written, res.CleanedTo, true)
	fillTo(t, l, l.NumSegments()+1, 600, &written)
	res = cleanOK(t, l, time.UnixMilli(t0+6000))
	got := readRecords(t, l)
	if !slices.ContainsFunc(got, func(r rec) bool { return r.key == "c" && r.tombstone }) || l.cleaner.deleteHorizon.Load() != t0+7000 {
		t.Fatalf("new tombstone missing or horizon %d: %v", l.cleaner.deleteHorizon.Load(), got)
	}
	if slices.ContainsFunc(got, func(r rec) bool { return r.key == "c" && !r.tombstone }) {
		t.Fatal("value deleted by a tombstone survived")
	}
}

func TestCleanRespectsMinCompactionLag(t *testing.T) {
	cfg := compactConfig()
	cfg.MinCompactionLagMs = 3_600_000
	l := openTestLog(t, newMem(t, "/d"), "/d/t-0", cfg, LogOptions{})
	defer l.Close()
	const old = 1_000_000_000
	rng := rand.New(rand.NewPCG(2, 2))
	written := writeUpdates(t, l, batchOpts{ts: old}, 20, 5, 3, rng)
	if info := newCleanState(l, time.UnixMilli(old+1000)).CleanableInfo; info.FirstUncleanableOffset != 0 || info.DirtyBytes != 0 {
		t.Fatalf("young segments cleanable: %+v", info)
	}
	if res := cleanOK(t, l, time.UnixMilli(old+1000)); res.SegmentsBefore != 0 || res.CleanedTo != 0 {
		t.Fatalf("cleaned young segments: %+v", res)
	}
	// Two hours later, newer writes: only the segments whose every batch
	// is older than the lag are cleaned.
	const young = old + 2*3_600_000
	firstYoung := l.LogEndOffset()
	written = append(written, writeUpdates(t, l, batchOpts{ts: young}, 20, 5, 3, rng)...)
	now := time.UnixMilli(young + 1000)
	info := newCleanState(l, now).CleanableInfo
	bases := l.SegmentBaseOffsets()
	i := floorSegment(l.segmentList(), firstYoung)
	if info.FirstUncleanableOffset != bases[i] || info.FirstUncleanableOffset == 0 {
		t.Fatalf("first uncleanable %d, want %d (segments %v, first young offset %d)", info.FirstUncleanableOffset, bases[i], bases, firstYoung)
	}
	res := cleanOK(t, l, now)
	if res.CleanedTo != bases[i] {
		t.Fatalf("cleaned to %d, want %d", res.CleanedTo, bases[i])
	}
	checkCompacted(t, readRecords(t, l), written, res.CleanedTo, false)
}

// headers returns the log's batch headers.
func headers(t *testing.T, l *Log) []record.Header {
	t.Helper()
	var out []record.Header
	for _, b := range readAllBatches(t, l) {
		h, _ := record.ParseHeader(b)
		out = append(out, h)
	}
	return out
}

func TestCleanKeepsTheLastBatchOfEachProducer(t *testing.T) {
	cfg := compactConfig()
	l := openTestLog(t, newMem(t, "/d"), "/d/t-0", cfg, LogOptions{})
	defer l.Close()
	var written []rec
	const ts = 50_000
	p7 := batchOpts{ts: ts, idempotent: true, pid: 7, epoch: 2, codec: record.CodecZstd}
	var p7Last AppendInfo
	for seq := int32(0); seq < 6; seq += 2 {
		p7.seq = seq
		p7Last = appendKV(t, l, p7, &written, kv{key: "a", value: fmt.Sprint("p7-", seq)}, kv{key: "b", value: fmt.Sprint("p7-", seq)})
	}
	ctrl := appendKV(t, l, batchOpts{ts: ts, control: true}, &written, kv{key: "\x00\x00\x00\x01", value: "marker"})
	p8 := batchOpts{ts: ts, idempotent: true, pid: 8, epoch: 0}
	for seq := int32(0); seq < 4; seq += 2 {
		p8.seq = seq
		appendKV(t, l, p8, &written, kv{key: "a", value: fmt.Sprint("p8-", seq)}, kv{key: "b", value: fmt.Sprint("p8-", seq)})
	}
	fillTo(t, l, 3, ts, &written)

	res := cleanOK(t, l, time.UnixMilli(ts+1000))
	var p7Headers []record.Header
	control := false
	for _, h := range headers(t, l) {
		if h.ProducerID == 7 {
			p7Headers = append(p7Headers, h)
		}
		if h.BaseOffset == ctrl.FirstOffset {
			control = h.IsControl() && h.NumRecords == 1
		}
	}
	if len(p7Headers) != 1 {
		t.Fatalf("producer 7 has %d batches, want its last one: %+v", len(p7Headers), p7Headers)
	}
	if h := p7Headers[0]; h.NumRecords != 0 || h.BaseOffset != p7Last.FirstOffset || h.LastOffsetDelta != 1 ||
		h.BaseSequence != 4 || h.ProducerEpoch != 2 || h.Codec() != record.CodecNone {
		t.Fatalf("producer 7's last batch: %+v", h)
	}
	if !control {
		t.Fatal("control batch not kept as it was")
	}
	// The control record's key is its own; everything else compacts.
	var want []rec
	for _, r := range written {
		if r.offset != ctrl.FirstOffset {
			want = append(want, r)
		}
	}
	var got []rec
	for _, r := range readRecords(t, l) {
		if r.offset != ctrl.FirstOffset {
			got = append(got, r)
		}
	}
	checkCompacted(t, got, want, res.CleanedTo, false)

	// Once the producer expired, its empty batch goes too.
	fillTo(t, l, l.NumSegments()+1, ts, &written)
	if _, err := l.Clean(context.Background(), CleanOptions{Now: time.UnixMilli(ts + 2000), ProducerIDExpirationMs: 1000}); err != nil {
		t.Fatal(err)
	}
	for _, h := range headers(t, l) {
		if h.ProducerID == 7 {
			t.Fatalf("expired producer's empty batch kept: %+v", h)
		}
	}
}

// TestCleanLeavesOnlyKafkasEmptyBatchesToRead: of the batches a cleaning
// empties, Kafka keeps only the last one of a live producer, and reads
// return it like any batch (a read starting inside it starts with it). The
// last batch of each rewritten segment stays on disk as a boundary marker,
// without its producer, which reads never return (a read starting inside
// one starts after it) and which lets recovery check the segments' ends.
// kafka-go's reader stalls for good on a batch without records.
func TestCleanLeavesOnlyKafkasEmptyBatchesToRead(t *testing.T) {
	cfg := compactConfig()
	// A segment per batch, and runs of one segment: each emptied batch is
	// the last of its run.
	cfg.SegmentBytes = 200
	mem := newMem(t, "/d")
	l := openTestLog(t, mem, "/d/t-0", cfg, LogOptions{})
	var written []rec
	const ts = 50_000
	pad := strings.Repeat("v", 50)
	seqs := map[int64]int32{}
	lastOf := map[int64]int64{}
	put := func(pid int64, key string) AppendInfo {
		o := batchOpts{ts: ts}
		if pid >= 0 {
			o.idempotent, o.pid, o.seq = true, pid, seqs[pid]
			seqs[pid]++
		}
		info := appendKV(t, l, o, &written, kv{key: key, value: key + pad})
		lastOf[pid] = info.FirstOffset
		return info
	}
	put(-1, "k0")
	put(-1, "dup")
	p9 := put(9, "dup") // superseded, and producer 9 writes again: a marker
	put(-1, "k1")
	p10 := put(10, "dup2") // producer 10's last batch: kept empty
	put(9, "dup")          // producer 9's last batch: kept empty
	put(-1, "dup2")
	put(-1, "dup")
	fillTo(t, l, l.NumSegments()+2, ts, &written)
	res := cleanOK(t, l, time.UnixMilli(ts+1000))

	var markers []record.Header
	if err := l.ScanBatchHeaders(0, func(h record.Header, _ int64) bool {
		switch {
		case h.NumRecords > 0:
		case h.HasProducerID():
			if h.BaseOffset != lastOf[h.ProducerID] {
				t.Errorf("empty batch of producer %d kept at %d: not its last", h.ProducerID, h.BaseOffset)
			}
		default:
			markers = append(markers, h)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(markers, func(h record.Header) bool { return h.BaseOffset == p9.FirstOffset }) {
		t.Fatalf("producer 9's first batch is not a marker: markers %+v", markers)
	}
	for _, m := range markers {
		if i := slices.Index(l.SegmentBaseOffsets(), m.NextOffset()); i < 0 {
			t.Errorf("marker %d..%d does not end its segment (segments %v)", m.BaseOffset, m.LastOffset(), l.SegmentBaseOffsets())
		}
		got, err := l.Read(m.BaseOffset+int64(m.LastOffsetDelta)/2, 1<<20, math.MaxInt64, true)
		if err != nil || got.FirstBatchOffset <= m.LastOffset() {
			t.Errorf("read inside the marker %d..%d starts at %d (%v)", m.BaseOffset, m.LastOffset(), got.FirstBatchOffset, err)
		}
	}
	sawP10 := false
	for _, h := range headers(t, l) {
		if h.NumRecords == 0 && !h.HasProducerID() {
			t.Errorf("a read returned the marker %d..%d", h.BaseOffset, h.LastOffset())
		}
		sawP10 = sawP10 || h.ProducerID == 10
	}
	if !sawP10 {
		t.Error("reads left out producer 10's empty batch")
	}
	if got, err := l.Read(p10.FirstOffset, 1<<20, math.MaxInt64, true); err != nil || got.FirstBatchOffset != p10.FirstOffset {
		t.Errorf("read at producer 10's empty batch starts at %d (%v)", got.FirstBatchOffset, err)
	}
	checkCompacted(t, readRecords(t, l), written, res.CleanedTo, false)

	// Recovery from the start (no clean shutdown, no recovery point)
	// scans every segment and finds each ending where the next starts:
	// nothing is dropped.
	before := readRecords(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := openTestLog(t, mem, "/d/t-0", cfg, LogOptions{})
	defer r.Close()
	if got := readRecords(t, r); !sameRecords(got, before) {
		t.Fatalf("%d records after recovery, want %d", len(got), len(before))
	}
}

func TestAppendRefusesRecordsWithoutKeyOnCompactedLogs(t *testing.T) {
	cfg := compactConfig()
	l := openTestLog(t, newMem(t, "/d"), "/d/t-0", cfg, LogOptions{})
	defer l.Close()
	for _, codec := range []int{record.CodecNone, record.CodecGzip, record.CodecZstd} {
		b := kvBatch(t, batchOpts{codec: codec}, kv{key: "k", value: "v"}, kv{nullKey: true, value: "v"})
		if _, err := l.Append(b, leader(1)); !errors.Is(err, ErrNullKey) {
			t.Fatalf("codec %d: %v", codec, err)
		}
	}
	if l.LogEndOffset() != 0 {
		t.Fatal("refused batch written")
	}
	mustAppend(t, l, kvBatch(t, batchOpts{codec: record.CodecLz4}, kv{key: "", value: "empty key is a key"}), leader(1))
	// A follower takes the leader's batches as they are.
	b := kvBatch(t, batchOpts{}, kv{nullKey: true, value: "v"})
	record.SetBaseOffset(b, 1)
	mustAppend(t, l, b, AppendOptions{})
	// A log that is not compacted takes them too.
	d := openTestLog(t, newMem(t, "/d"), "/d/u-0", testConfig(), LogOptions{})
	defer d.Close()
	mustAppend(t, d, kvBatch(t, batchOpts{}, kv{nullKey: true, value: "v"}), leader(1))

	// The cleaner drops keyless records, as Kafka's does.
	var written []rec
	fillTo(t, l, 3, 0, &written)
	res := cleanOK(t, l, time.UnixMilli(1000))
	if res.KeylessRemoved != 1 {
		t.Fatalf("removed %d keyless records", res.KeylessRemoved)
	}
}

// TestReadsDuringCleaning reads the log from every offset, and whole,
// while it is appended to and cleaned again and again, on real files:
// every read returns whole valid batches holding records as they were
// written, at the offset asked for or later, in order; and each key's
// latest value is there at the end.
func TestReadsDuringCleaning(t *testing.T) {
	cfg := compactConfig()
	cfg.FileDeleteDelayMs = 2000 // reads of replaced segments finish
	l := openTestLog(t, vfs.Default, tempLogDir(t, "busy-0"), cfg, LogOptions{})
	defer l.Close()
	var mu sync.Mutex
	written := map[int64]rec{}
	latest := map[string]int64{}
	var recordedEnd atomic.Int64 // readers check offsets below it only
	record1 := func(rs []rec) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			written[r.offset] = r
			latest[r.key] = r.offset
		}
		recordedEnd.Store(l.LogEndOffset())
	}
	rng := rand.New(rand.NewPCG(4, 4))
	record1(writeUpdates(t, l, batchOpts{ts: 1000, codec: record.CodecLz4}, 20, 10, 3, rng))

	check := func(batch []byte, from int64) (int64, error) {
		h, err := record.Validate(batch, 0)
		if err != nil {
			return 0, err
		}
		if h.LastOffset() < from {
			return 0, fmt.Errorf("batch %d..%d read for offset %d", h.BaseOffset, h.LastOffset(), from)
		}
		d, err := decompress(batch)
		if err != nil {
			return 0, err
		}
		err = record.Records(d, func(off, ts int64, r *kmsg.Record) error {
			mu.Lock()
			w, ok := written[off]
			mu.Unlock()
			if !ok || w.key != string(r.Key) || w.value != string(r.Value) {
				return fmt.Errorf("offset %d holds %q=%q, written %+v", off, r.Key, r.Value, w)
			}
			return nil
		})
		return h.NextOffset(), err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	reader := func(seed uint64, whole bool) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, seed))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if whole {
				next := int64(0)
				var bad error
				end := recordedEnd.Load()
				err := l.ReadBatches(0, 0, func(h record.Header, b []byte) bool {
					if h.LastOffset() >= end {
						return false
					}
					if h.BaseOffset < next {
						bad = fmt.Errorf("batch at %d after offset %d", h.BaseOffset, next)
					} else {
						next, bad = check(b, next)
					}
					return bad == nil
				})
				if err = cmp.Or(err, bad); err != nil {
					errs <- fmt.Errorf("reading the whole log: %w", err)
					return
				}
				continue
			}
			end := recordedEnd.Load()
			from := rng.Int64N(end)
			res, err := l.Read(from, 4096, end, true)
			if err == nil {
				var data []byte
				if data, err = res.Region.ReadAll(nil); err == nil {
					err = record.Batches(data, func(h record.Header, b []byte) bool {
						_, err = check(b, from)
						return err == nil
					})
				}
			}
			if err != nil {
				errs <- fmt.Errorf("reading from %d: %w", from, err)
				return
			}
		}
	}
	wg.Add(3)
	go reader(1, false)
	go reader(2, false)
	go reader(3, true)
	for i := range 8 {
		record1(writeUpdates(t, l, batchOpts{ts: int64(2000 + i)}, 20, 2, 3, rng))
		if _, err := l.Clean(context.Background(), CleanOptions{Now: time.UnixMilli(10_000)}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := readRecords(t, l)
	for key, off := range latest {
		if !slices.ContainsFunc(got, func(r rec) bool { return r.offset == off && r.key == key }) {
			t.Fatalf("key %s lost its latest value at %d", key, off)
		}
	}
}

func TestManagerCleansCompactedLogs(t *testing.T) {
	fs := newMem(t, "/data")
	clock := &fixedClock{time.UnixMilli(100_000)}
	opts := ManagerOptions{Logger: quietLogger(), Now: clock.now, Default: testConfig(), CleanerBackoff: time.Millisecond}
	m, err := OpenManager(fs, "/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	compacted, err := m.GetOrCreate("compacted", 0, compactConfig())
	if err != nil {
		t.Fatal(err)
	}
	plainCfg := compactConfig()
	plainCfg.Compact, plainCfg.Delete = false, true
	plain, err := m.GetOrCreate("plain", 0, plainCfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	written := writeUpdates(t, compacted, batchOpts{ts: 1000}, 20, 10, 2, rng)
	writeUpdates(t, plain, batchOpts{ts: 1000}, 20, 10, 2, rng)
	plainSize := plain.Size()

	ctx := context.Background()
	if n := m.CleanLogs(ctx, clock.now()); n != 1 {
		t.Fatalf("cleaned %d logs, want 1", n)
	}
	if plain.Size() != plainSize {
		t.Fatal("a log that is not compacted was cleaned")
	}
	cp := compacted.CleanerCheckpoint()
	checkCompacted(t, readRecords(t, compacted), written, cp, false)
	got, err := ReadOffsetCheckpoint(fs, "/data/"+CleanerOffsetCheckpointFile)
	if err != nil || len(got) != 1 || got[TopicPartition{"compacted", 0}] != cp {
		t.Fatalf("cleaner-offset-checkpoint %v (%v), want compacted 0 %d", got, err, cp)
	}
	// Below min.cleanable.dirty.ratio, nothing to do.
	written = append(written, writeUpdates(t, compacted, batchOpts{ts: 1000}, 20, 1, 2, rng)...)
	if info, due := cleaningDue(compacted, clock.now()); due {
		t.Fatalf("cleaning due at ratio %.2f", info.Ratio)
	}
	if n := m.CleanLogs(ctx, clock.now()); n != 0 {
		t.Fatalf("cleaned %d logs below the ratio", n)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	// The checkpoint survives a restart, and the loop Start runs cleans
	// once enough was written.
	m, err = OpenManager(fs, "/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	compacted, _ = m.Log("compacted", 0)
	if err := compacted.SetConfig(compactConfig()); err != nil {
		t.Fatal(err)
	}
	if compacted.CleanerCheckpoint() != cp {
		t.Fatalf("checkpoint %d after reopen, want %d", compacted.CleanerCheckpoint(), cp)
	}
	m.Start()
	written = append(written, writeUpdates(t, compacted, batchOpts{ts: 1000}, 20, 10, 2, rng)...)
	poll.Until(t, 20*time.Second, "the cleaner's loop to clean", func() bool { return compacted.CleanerCheckpoint() != cp })
	if err := m.Close(); err != nil { // waits for the loop to end
		t.Fatal(err)
	}
	m, err = OpenManager(fs, "/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	compacted, _ = m.Log("compacted", 0)
	checkCompacted(t, readRecords(t, compacted), written, compacted.CleanerCheckpoint(), false)
}

// TestCleanStaysBelowTheHighWatermark: a record may be replaced only by one
// that no truncation can remove, so cleaning stops at the retention bound
// (the high watermark), and a bound inside a segment does not make the
// cleaner clean that segment round after round.
func TestCleanStaysBelowTheHighWatermark(t *testing.T) {
	l := openTestLog(t, newMem(t, "/d"), "/d/t-0", compactConfig(), LogOptions{})
	defer l.Close()
	rng := rand.New(rand.NewPCG(6, 6))
	written := writeUpdates(t, l, batchOpts{ts: 1000}, 20, 10, 2, rng)
	bases := l.SegmentBaseOffsets()
	if len(bases) < 5 {
		t.Fatalf("%d segments", len(bases))
	}
	hw := bases[2] + 3
	l.retentionBound.Store(hw)
	now := time.UnixMilli(5000)
	if info := newCleanState(l, now).CleanableInfo; info.FirstUncleanableOffset != hw {
		t.Fatalf("first uncleanable offset %d, want the bound %d", info.FirstUncleanableOffset, hw)
	}
	res := cleanOK(t, l, now)
	if res.CleanedTo != hw {
		t.Fatalf("cleaned to %d, want %d", res.CleanedTo, hw)
	}
	checkCompacted(t, readRecords(t, l), written, hw, false)
	if info, due := cleaningDue(l, now); due || info.DirtyBytes != 0 {
		t.Fatalf("cleaning due again with the bound unmoved: %+v", info)
	}
	l.retentionBound.Store(math.MaxInt64)
	if _, due := cleaningDue(l, now); !due {
		t.Fatal("cleaning not due once the bound moved")
	}
}

// TestCleanDropsAbortedTransactions: the records of an aborted
// transaction neither shadow older values of their keys nor survive a
// cleaning, and the cleaner stays below a transaction still open.
func TestCleanDropsAbortedTransactions(t *testing.T) {
	l := openTestLog(t, newMem(t, "/d"), "/d/t-0", compactConfig(), LogOptions{})
	defer l.Close()
	var written []rec
	appendKV(t, l, batchOpts{ts: 100}, &written, kv{key: "a", value: "committed"}, kv{key: "b", value: "committed"})
	// Producer 5's transaction writes a and is aborted.
	txn := kvBatch(t, batchOpts{ts: 200, pid: 5, idempotent: true}, kv{key: "a", value: "aborted"})
	binary.BigEndian.PutUint16(txn[21:], binary.BigEndian.Uint16(txn[21:])|record.AttrTransactional)
	binary.BigEndian.PutUint32(txn[17:], record.Checksum(txn))
	info := mustAppend(t, l, txn, leader(1))
	marker := mustAppend(t, l, record.BuildMarker(nil, 5, 0, false, 0, 200), leader(1))
	if err := l.TxnIndex().Append(AbortedTxn{ProducerID: 5, FirstOffset: info.FirstOffset, LastOffset: marker.FirstOffset, LastStableOffset: marker.FirstOffset + 1}); err != nil {
		t.Fatal(err)
	}
	fillTo(t, l, 3, 300, &written)
	cleanOK(t, l, time.UnixMilli(10_000))
	values := map[string]string{}
	for _, r := range readRecords(t, l) {
		values[r.key] = r.value
	}
	if values["a"] != "committed" || values["b"] != "committed" {
		t.Fatalf("after cleaning: a=%q b=%q, want both committed", values["a"], values["b"])
	}

	// An open transaction bounds the cleaning.
	l.TxnIndex().SetFirstUnstableOffset(info.FirstOffset)
	if c := newCleanState(l, time.UnixMilli(10_000)); c.FirstUncleanableOffset > info.FirstOffset {
		t.Fatalf("first uncleanable offset %d above the open transaction at %d", c.FirstUncleanableOffset, info.FirstOffset)
	}
}
