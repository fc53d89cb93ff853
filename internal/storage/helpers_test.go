package storage

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// spec describes a test batch.
type spec struct {
	base      int64 // base offset (followers; leaders overwrite it)
	records   int   // default 1
	valueSize int   // default 10
	ts        int64 // first record's timestamp
	tsStep    int64 // added per record
	codec     int
	epoch     int32
	control   bool
	seed      byte // varies the payload
}

// makeBatch builds a v2 batch with kmsg, as a producer would send it: the
// records encoded by kmsg, compressed with the codec's usual library, then
// the header with a real CRC-32C.
func makeBatch(t testing.TB, s spec) []byte {
	t.Helper()
	if s.records == 0 {
		s.records = 1
	}
	if s.valueSize == 0 {
		s.valueSize = 10
	}
	var body []byte
	maxTS := s.ts
	for i := range s.records {
		value := bytes.Repeat([]byte{s.seed + byte(i)}, s.valueSize)
		r := kmsg.Record{TimestampDelta64: int64(i) * s.tsStep, OffsetDelta: int32(i),
			Key: []byte{byte(i)}, Value: value}
		maxTS = max(maxTS, s.ts+int64(i)*s.tsStep)
		enc := r.AppendTo(nil)[1:] // kmsg writes the length we set (0): learn the size, then prefix it
		body = binary.AppendVarint(body, int64(len(enc)))
		body = append(body, enc...)
	}
	body = compress(t, s.codec, body)
	attrs := int16(s.codec)
	if s.control {
		attrs |= record.AttrControl
	}
	b := kmsg.RecordBatch{
		FirstOffset: s.base, PartitionLeaderEpoch: s.epoch, Magic: 2, Attributes: attrs,
		LastOffsetDelta: int32(s.records - 1), FirstTimestamp: s.ts, MaxTimestamp: maxTS,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(s.records), Records: body,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-record.LogOverhead))
	binary.BigEndian.PutUint32(out[17:], record.Checksum(out))
	if _, err := record.Validate(out, 0); err != nil {
		t.Fatalf("test batch invalid: %v", err)
	}
	return out
}

func compress(t testing.TB, codec int, in []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case record.CodecNone:
		return in
	case record.CodecGzip:
		w = gzip.NewWriter(&buf)
	case record.CodecSnappy:
		return s2.EncodeSnappy(nil, in)
	case record.CodecLz4:
		w = lz4.NewWriter(&buf)
	case record.CodecZstd:
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	}
	if _, err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// concat joins batches into one produce request's records.
func concat(batches ...[]byte) []byte {
	var out []byte
	for _, b := range batches {
		out = append(out, b...)
	}
	return out
}

// testConfig is small enough to roll and index often.
func testConfig() Config {
	c := DefaultConfig()
	c.SegmentBytes = 4096
	c.SegmentIndexBytes = 1024
	c.IndexIntervalBytes = 256
	c.FileDeleteDelayMs = 0
	c.RetentionMs = -1
	return c
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type fixedClock struct{ t time.Time }

func (c *fixedClock) now() time.Time { return c.t }

func openTestLog(t testing.TB, fs vfs.FS, dir string, cfg Config, opts LogOptions) *Log {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.LogStartOffset == 0 {
		opts.LogStartOffset = -1
	}
	l, err := OpenLog(fs, dir, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func leader(epoch int32) AppendOptions {
	return AppendOptions{AssignOffsets: true, LeaderEpoch: epoch, LogAppendTime: -1}
}

func mustAppend(t testing.TB, l *Log, data []byte, opts AppendOptions) AppendInfo {
	t.Helper()
	info, err := l.Append(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// readAllBatches returns every batch from the log start, by ReadBatches.
func readAllBatches(t testing.TB, l *Log) [][]byte {
	t.Helper()
	var out [][]byte
	err := l.ReadBatches(l.LogStartOffset(), 0, func(_ record.Header, b []byte) bool {
		out = append(out, bytes.Clone(b))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tempLogDir(t testing.TB, name string) string {
	return filepath.Join(t.TempDir(), name)
}

// newMem returns an in-memory FS holding dir and its ancestors, durably.
func newMem(t testing.TB, dir string) *vfs.MemFS {
	fs := vfs.NewMem()
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if err := vfs.SyncDir(fs, d); err != nil {
			t.Fatal(err)
		}
		if d == "/" {
			return fs
		}
	}
}
