package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/record"
	rt "github.com/strata-io/strata/internal/record/recordtest"
)

// logBuffer collects a logger's output, safely for concurrent writers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestPoisonedBatchesOnRead puts on disk what validation now refuses but
// an older version or a bug could have written, framing and CRC intact (a
// batch of garbage records, a zstd bomb): reads serve them as stored;
// recovery keeps them; a timestamp lookup that lands on one reports it
// with its offset and answers for the whole batch, within bounded memory;
// the cleaner reports it with its offset and leaves the log alone rather
// than retry it.
func TestPoisonedBatchesOnRead(t *testing.T) {
	var logs logBuffer
	opts := LogOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	fs := newMem(t, "/d")
	l := openTestLog(t, fs, "/d/t-0", compactConfig(), opts)
	var written []rec
	appendKV(t, l, batchOpts{ts: 100}, &written, kv{key: "a", value: "1"}, kv{key: "b", value: "1"})
	// As a follower appends them: framing and CRC checked only.
	poison := func(codec int, payload []byte, h rt.Header) (int64, []byte) {
		b := rt.Wrap(codec, payload, h)
		off := l.LogEndOffset()
		record.SetBaseOffset(b, off)
		if _, err := l.Append(b, AppendOptions{LeaderEpoch: -1, LogAppendTime: -1}); err != nil {
			t.Fatal(err)
		}
		return off, b
	}
	garbageAt, garbage := poison(record.CodecNone, bytes.Repeat([]byte{0x5a, 0xa5, 0x33}, 40), rt.N(3, 150))
	bombAt, bomb := poison(record.CodecZstd, rt.Bomb(record.CodecZstd, 32<<20, false), rt.N(16, 200))
	appendKV(t, l, batchOpts{ts: 300}, &written, kv{key: "a", value: "2"})
	fillTo(t, l, 3, 400, &written)
	end := l.LogEndOffset()

	check := func(l *Log) {
		t.Helper()
		var found int
		for _, b := range readAllBatches(t, l) {
			if bytes.Equal(b, garbage) || bytes.Equal(b, bomb) {
				found++
			}
		}
		if found != 2 {
			t.Fatalf("%d of the 2 poisoned batches read back as stored", found)
		}
		if l.LogEndOffset() != end {
			t.Fatalf("log end offset %d, want %d", l.LogEndOffset(), end)
		}
	}
	check(l)

	for _, c := range []struct {
		ts, at int64
	}{{150, garbageAt}, {200, bombAt}} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		off, ts, ok := l.OffsetForTimestamp(c.ts)
		runtime.ReadMemStats(&after)
		if !ok || off != c.at || ts != c.ts {
			t.Fatalf("timestamp %d: offset %d timestamp %d (%v), want the batch at %d", c.ts, off, ts, ok, c.at)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
			t.Fatalf("timestamp %d: %d bytes allocated", c.ts, alloc)
		}
		if !strings.Contains(logs.String(), fmt.Sprintf("base_offset=%d", c.at)) {
			t.Fatalf("timestamp %d: the batch at %d not reported:\n%s", c.ts, c.at, logs.String())
		}
	}

	_, err := l.Clean(context.Background(), CleanOptions{Now: time.UnixMilli(10_000)})
	if !errors.Is(err, errUncleanable) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", garbageAt)) {
		t.Fatalf("cleaning: %v", err)
	}
	if !strings.Contains(logs.String(), "log cannot be cleaned") {
		t.Fatalf("the failed cleaning not reported:\n%s", logs.String())
	}
	if _, due := cleaningDue(l, time.UnixMilli(10_000)); due {
		t.Fatal("an uncleanable log is due for cleaning again")
	}
	check(l)

	// Recovery (no clean shutdown: every segment scanned) keeps them.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, fs, "/d/t-0", compactConfig(), opts)
	defer l.Close()
	check(l)
}
