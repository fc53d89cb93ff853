package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
	rt "github.com/strata-io/strata/internal/record/recordtest"
	"github.com/strata-io/strata/internal/storage"
)

// produceAt sends one partition's records to partition 0 of topic at the
// given Produce version, acks=all, and returns the partition's response.
func produceAt(t *testing.T, addr, topic string, version int16, records []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, -1, 10_000
	rtp := kmsg.NewProduceRequestTopic()
	rtp.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rtp.Partitions = append(rtp.Partitions, rp)
	req.Topics = append(req.Topics, rtp)
	return rawRequest(t, addr, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// validLog produces well-formed batches to a topic and remembers their
// values, so that a consumer can be checked to read all of them, in order.
type validLog struct {
	t      *testing.T
	addr   string
	topic  string
	values []string
}

// produce appends a valid batch of three keyed records named after what.
func (v *validLog) produce(what string) {
	v.t.Helper()
	var recs []record.Rec
	now := time.Now().UnixMilli()
	for i := range 3 {
		val := fmt.Sprintf("%s/%d", what, i)
		recs = append(recs, record.Rec{Key: []byte(val), Value: []byte(val), Timestamp: now})
		v.values = append(v.values, val)
	}
	if resp := produceAt(v.t, v.addr, v.topic, 9, record.Build(nil, recs)); resp.ErrorCode != 0 || resp.BaseOffset != int64(len(v.values)-3) {
		v.t.Fatalf("valid batch after %s: error %d at offset %d", what, resp.ErrorCode, resp.BaseOffset)
	}
}

// end returns the partition's log end offset, as a client sees it.
func (v *validLog) end() int64 {
	v.t.Helper()
	ends, err := newAdmin(v.t, v.addr).ListEndOffsets(testContext(v.t), v.topic)
	if err != nil {
		v.t.Fatal(err)
	}
	o, _ := ends.Lookup(v.topic, 0)
	return o.Offset
}

// consumeAll reads the topic from the start with franz-go and checks it
// holds exactly the valid records, in order, with no error.
func (v *validLog) consumeAll() {
	v.t.Helper()
	got := consumeN(v.t, v.addr, len(v.values), v.topic)
	for i, r := range got {
		if string(r.Value) != v.values[i] || r.Offset != int64(i) {
			v.t.Fatalf("record %d: %q at offset %d, want %q", i, r.Value, r.Offset, v.values[i])
		}
	}
}

// consumeKcat reads the topic with librdkafka (kcat), when installed, and
// checks it holds exactly the valid records.
func (v *validLog) consumeKcat() {
	v.t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		v.t.Log("kcat not installed: librdkafka not checked")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "kcat", "-b", v.addr, "-C", "-t", v.topic, "-o", "beginning", "-e", "-q", "-f", "%s\n").Output()
	if err != nil {
		v.t.Fatalf("kcat: %v: %s", err, out)
	}
	if got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"); !slices.Equal(got, v.values) {
		v.t.Fatalf("kcat read %d records, want %d: %.300q", len(got), len(v.values), got)
	}
}

// refusal is what a broker must answer to a malformed batch.
type refusal struct {
	code  *kerr.Error
	index int32 // the record ErrorRecords names, -1 for none
}

// expect is the answer to c at the given version: a record named answers
// INVALID_RECORD naming it from v8 (KIP-467), CORRUPT_MESSAGE before; a
// record without a key INVALID_RECORD at every version; a batch too large
// MESSAGE_TOO_LARGE; anything else about the batch CORRUPT_MESSAGE.
func expect(c rt.Case, version int16) refusal {
	switch {
	case c.Err == record.ErrTooLarge:
		return refusal{kerr.MessageTooLarge, -1}
	case c.Err == record.ErrNullKey && version >= 8:
		return refusal{kerr.InvalidRecord, c.Index}
	case c.Err == record.ErrNullKey:
		return refusal{kerr.InvalidRecord, -1}
	case c.Index >= 0 && version >= 8:
		return refusal{kerr.InvalidRecord, c.Index}
	}
	return refusal{kerr.CorruptMessage, -1}
}

func checkRefused(t *testing.T, resp kmsg.ProduceResponseTopicPartition, want refusal, version int16) {
	t.Helper()
	if resp.ErrorCode != want.code.Code {
		t.Fatalf("v%d: error %d (%v), want %s", version, resp.ErrorCode, ptrString(resp.ErrorMessage), want.code.Message)
	}
	switch {
	case want.index < 0 && len(resp.ErrorRecords) != 0:
		t.Fatalf("v%d: ErrorRecords %+v, want none", version, resp.ErrorRecords)
	case want.index >= 0 && (len(resp.ErrorRecords) != 1 || resp.ErrorRecords[0].RelativeOffset != want.index):
		t.Fatalf("v%d: ErrorRecords %+v, want record %d", version, resp.ErrorRecords, want.index)
	case version >= 8 && resp.ErrorMessage == nil:
		t.Fatalf("v%d: no error message", version)
	}
}

func ptrString(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestProduceRefusesMalformedRecords sends every malformed batch of
// recordtest.Malformed, uncompressed and zstd-compressed, at Produce v9
// and v7, between valid batches: each is refused as Kafka refuses it,
// nothing of it is written (the log end offset does not move), and
// franz-go (after every case) and librdkafka (at the end) read every valid
// record, before and after, and nothing else.
func TestProduceRefusesMalformedRecords(t *testing.T) {
	b := startBroker(t, map[string]string{"message.max.bytes": "1048588"})
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "plain", 1, nil)
	createTopic(t, adm, "compacted", 1, map[string]*string{"cleanup.policy": ptr("compact")})
	logs := map[bool]*validLog{
		false: {t: t, addr: b.Addr(), topic: "plain"},
		true:  {t: t, addr: b.Addr(), topic: "compacted"},
	}
	for _, l := range logs {
		l.produce("first")
	}
	for _, codec := range []struct {
		name  string
		codec int
	}{{"none", record.CodecNone}, {"zstd", record.CodecZstd}} {
		for _, c := range rt.Malformed() {
			name := codec.name + "/" + c.Name
			l := logs[c.Compacted]
			if c.MaxMessageBytes > 0 {
				c.Section = rt.Records(1200, bytes.Repeat([]byte("x"), 1000)) // over the broker's limit
				c.Header = rt.N(1200, c.Header.Timestamp)
			}
			batch := rt.Batch(codec.codec, c.Section, c.Header)
			if c.MaxMessageBytes > 0 && codec.codec != record.CodecNone {
				continue // compressed below the limit
			}
			before := l.end()
			for _, version := range []int16{9, 7} {
				resp := produceAt(t, b.Addr(), l.topic, version, bytes.Clone(batch))
				t.Run(name, func(t *testing.T) { checkRefused(t, resp, expect(c, version), version) })
			}
			if end := l.end(); end != before {
				t.Fatalf("%s: log end offset %d after the refusal, %d before", name, end, before)
			}
			l.produce(name)
			l.consumeAll()
		}
	}
	for _, l := range logs {
		l.consumeKcat()
	}
}

// bombLimit is the strata.decompressed.batch.max.bytes the bomb tests
// set, so that each bomb costs a bounded amount of work.
const bombLimit = 8 << 20

// TestProduceRefusesBombs sends each codec's decompression bomb (with and
// without the format's size hint, claiming one record and 16) to a broker
// whose strata.decompressed.batch.max.bytes is bombLimit, and each codec's
// stream that goes on past what its size hint and the header claim: the
// bombs are refused as MESSAGE_TOO_LARGE, with a message naming the limit
// and its key, the streams as CORRUPT_MESSAGE, each after a bounded amount
// of decompression; nothing is written, and consumers read every valid
// record around them.
func TestProduceRefusesBombs(t *testing.T) {
	b := startBroker(t, map[string]string{record.MaxUncompressedKey: fmt.Sprint(bombLimit)})
	createTopic(t, newAdmin(t, b.Addr()), "bombed", 1, nil)
	l := &validLog{t: t, addr: b.Addr(), topic: "bombed"}
	l.produce("first")
	type attack struct {
		name  string
		batch []byte
		code  *kerr.Error
	}
	var attacks []attack
	for _, n := range []int32{1, 16} {
		for _, bomb := range []struct {
			name  string
			codec int
			size  int64
			hint  bool
		}{
			{"gzip", record.CodecGzip, 512 << 20, false},
			{"zstd", record.CodecZstd, 1 << 30, false},
			{"zstd with content size", record.CodecZstd, 1 << 30, true},
			{"lz4", record.CodecLz4, 200 << 20, false},
			{"lz4 with content size", record.CodecLz4, 200 << 20, true},
			{"snappy", record.CodecSnappy, 1 << 30, true},
			{"snappy xerial", -record.CodecSnappy, 16 << 20, true},
		} {
			name := fmt.Sprintf("%s bomb of %d MiB, %d records claimed", bomb.name, bomb.size>>20, n)
			attacks = append(attacks, attack{name, rt.Wrap(bomb.codec, rt.Bomb(bomb.codec, bomb.size, bomb.hint), rt.N(n, time.Now().UnixMilli())), kerr.MessageTooLarge})
		}
	}
	section := rt.Records(3, []byte("value"))
	for _, codec := range []int{record.CodecGzip, record.CodecSnappy, record.CodecLz4, record.CodecZstd} {
		attacks = append(attacks, attack{fmt.Sprintf("codec %d stream past its size hint", codec),
			rt.Wrap(codec, rt.Endless(codec, section, 4<<20), rt.N(3, 1_700_000_000_000)), kerr.CorruptMessage})
	}
	for _, a := range attacks {
		if len(a.batch) > 1048588 {
			t.Fatalf("%s: %d bytes, more than max.message.bytes", a.name, len(a.batch))
		}
		before := l.end()
		resp := produceAt(t, b.Addr(), "bombed", 9, a.batch)
		t.Run(a.name, func(t *testing.T) {
			checkRefused(t, resp, refusal{a.code, -1}, 9)
			if a.code == kerr.MessageTooLarge && !strings.Contains(ptrString(resp.ErrorMessage), record.MaxUncompressedKey) {
				t.Fatalf("%q does not name %s", ptrString(resp.ErrorMessage), record.MaxUncompressedKey)
			}
		})
		if end := l.end(); end != before {
			t.Fatalf("%s: log end offset %d after the refusal, %d before", a.name, end, before)
		}
		l.produce(a.name)
	}
	l.consumeAll()
	l.consumeKcat()
}

// TestCorruptRetryIsNotADuplicate retries an idempotent producer's batch
// with its header (producer id, epoch, sequences) intact but its records
// garbled (the CRC recomputed) and, separately, with a bad CRC: validation
// comes before the idempotence check, so both are refused, not answered as
// the original; the genuine retry still is.
func TestCorruptRetryIsNotADuplicate(t *testing.T) {
	b := startBroker(t, nil)
	createTopic(t, newAdmin(t, b.Addr()), "idem", 1, nil)
	init := rawRequest(t, b.Addr(), kmsg.NewPtrInitProducerIDRequest()).(*kmsg.InitProducerIDResponse)
	if init.ErrorCode != 0 {
		t.Fatalf("InitProducerId: error %d", init.ErrorCode)
	}
	batch := idempotentBatch(3, init.ProducerID, 0, time.Now().UnixMilli())
	if resp := produceRaw(t, b.Addr(), "idem", bytes.Clone(batch)); resp.ErrorCode != 0 || resp.BaseOffset != 0 {
		t.Fatalf("first append: %+v", resp)
	}
	garbled := bytes.Clone(batch)
	for i := record.HeaderSize + 2; i < len(garbled); i += 4 {
		garbled[i] ^= 0x41
	}
	binary.BigEndian.PutUint32(garbled[17:], record.Checksum(garbled))
	badCRC := bytes.Clone(batch)
	badCRC[len(badCRC)-1] ^= 1
	for name, retry := range map[string][]byte{"garbled records": garbled, "bad CRC": badCRC} {
		resp := produceRaw(t, b.Addr(), "idem", retry)
		if resp.ErrorCode != kerr.CorruptMessage.Code && resp.ErrorCode != kerr.InvalidRecord.Code {
			t.Fatalf("%s retry answered error %d at offset %d: taken for the original", name, resp.ErrorCode, resp.BaseOffset)
		}
	}
	if resp := produceRaw(t, b.Addr(), "idem", bytes.Clone(batch)); resp.ErrorCode != 0 || resp.BaseOffset != 0 {
		t.Fatalf("genuine retry: %+v", resp)
	}
	got := consumeN(t, b.Addr(), 3, "idem")
	if len(got) != 3 || string(got[2].Value) != "v" {
		t.Fatalf("consumed %d records", len(got))
	}
}

// sendProduce sends one produce request of records to partition 0 of topic
// on its own connection and returns the partition's error code. It is
// safe to call from any goroutine.
func sendProduce(addr, topic string, records []byte) (int16, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 30_000
	rtp := kmsg.NewProduceRequestTopic()
	rtp.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rtp.Partitions = append(rtp.Partitions, rp)
	req.Topics = append(req.Topics, rtp)
	var rh kmsg.RequestFormatter
	if _, err := conn.Write(rh.AppendRequest(nil, req, 1)); err != nil {
		return 0, err
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return 0, err
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, buf); err != nil {
		return 0, err
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = 9
	if err := resp.ReadFrom(buf[5:]); err != nil { // correlation id, empty tags
		return 0, err
	}
	return resp.Topics[0].Partitions[0].ErrorCode, nil
}

// TestConcurrentBombsStayWithinTheBudget sends 8 bombs at once, 4 LZ4
// (whose decoder holds two 4 MiB blocks) and 4 zstd with an 8 MiB window
// (which the decoder holds), each decompressed up to the 16 MiB of
// strata.decompressed.batch.max.bytes, to a broker whose decompression
// budget is 20 MiB, and measures the process's peak heap in use
// (runtime.MemStats, sampled) above what it was before: at most the budget
// and a fixed allowance for the 8 requests themselves and the runtime. The
// same with a budget of 1 GiB is logged, to show what the budget saves.
func TestConcurrentBombsStayWithinTheBudget(t *testing.T) {
	const (
		bombs  = 8
		budget = 20 << 20
		// 8 requests of 0.4 MB read and decoded, goroutines, GC lag, and
		// what the rest of the test process allocates meanwhile (the heap
		// is the process's): runs on a loaded machine reached 39 MiB
		// above the start. A bomb decompressed whole is 100 MiB or 1 GiB,
		// eight of them far above either figure.
		allowance = 32 << 20
	)
	now := time.Now().UnixMilli()
	lz4Bomb := rt.Wrap(record.CodecLz4, rt.Bomb(record.CodecLz4, 100<<20, false), rt.N(16, now))
	zstdBomb := rt.Wrap(record.CodecZstd, rt.ZstdBomb(1<<30, 8<<20, false), rt.N(16, now))
	peak := func(budget int) uint64 {
		b := startBroker(t, map[string]string{"strata.decompression.budget.bytes": fmt.Sprint(budget), record.MaxUncompressedKey: fmt.Sprint(16 << 20)})
		createTopic(t, newAdmin(t, b.Addr()), "bombed", 1, nil)
		defer debug.SetGCPercent(debug.SetGCPercent(10)) // little garbage, so the heap is what is held
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		stop, sampled := make(chan struct{}), make(chan uint64)
		go func() {
			var top uint64
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				top = max(top, ms.HeapInuse)
				select {
				case <-stop:
					sampled <- top
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		codes := make(chan error, bombs)
		var wg sync.WaitGroup
		for i := range bombs {
			bomb := lz4Bomb
			if i%2 == 1 {
				bomb = zstdBomb
			}
			wg.Go(func() {
				code, err := sendProduce(b.Addr(), "bombed", bomb)
				if err == nil && code != kerr.MessageTooLarge.Code {
					err = fmt.Errorf("bomb answered error %d", code)
				}
				codes <- err
			})
		}
		wg.Wait()
		close(stop)
		top := <-sampled
		close(codes)
		for err := range codes {
			if err != nil {
				t.Fatal(err)
			}
		}
		if top < base {
			return 0
		}
		return top - base
	}
	bounded := peak(budget)
	unbounded := peak(1 << 30)
	t.Logf("peak heap above the start during %d concurrent bombs: %.1f MiB with a %d MiB budget, %.1f MiB with 1 GiB",
		bombs, float64(bounded)/(1<<20), budget>>20, float64(unbounded)/(1<<20))
	if bounded > budget+allowance {
		t.Fatalf("peak heap %.1f MiB above the start, more than the %d MiB budget and %d MiB allowance",
			float64(bounded)/(1<<20), budget>>20, allowance>>20)
	}
}

// fetchAll fetches partition 0 of topic from offset 0, once, as a
// consumer would (Fetch v12), and returns its error code, high watermark
// and the batches of its records.
func fetchAll(t *testing.T, addr, topic string) (int16, int64, [][]byte) {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes, req.MaxWaitMillis = 12, 16<<20, 100
	rtp := kmsg.NewFetchRequestTopic()
	rtp.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 16 << 20
	rtp.Partitions = append(rtp.Partitions, rp)
	req.Topics = append(req.Topics, rtp)
	p := rawRequest(t, addr, req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	var batches [][]byte
	if err := record.Batches(p.RecordBatches, func(_ record.Header, b []byte) bool {
		batches = append(batches, bytes.Clone(b))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return p.ErrorCode, p.HighWatermark, batches
}

// TestPoisonedLogOnDisk writes into a partition's segment, while the
// broker is down, what validation now refuses but an older version could
// have stored (a batch of garbage records and a zstd bomb, framing and CRC
// intact): after the restart's recovery keeps them, a fetch serves them
// whole, as stored, between the valid batches; a ListOffsets by timestamp
// that lands on the bomb answers its offset within bounded memory; and
// produces go on after them. (strata.decompressed.batch.max.bytes is
// 64 MiB, to bound the lookup's work.)
func TestPoisonedLogOnDisk(t *testing.T) {
	b := startBroker(t, map[string]string{record.MaxUncompressedKey: fmt.Sprint(64 << 20)})
	createTopic(t, newAdmin(t, b.Addr()), "old", 1, nil)
	l := &validLog{t: t, addr: b.Addr(), topic: "old"}
	l.produce("before")
	addr := b.Addr()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	const bombTime = 1_800_000_000_000
	garbage := rt.Wrap(record.CodecNone, bytes.Repeat([]byte{0x5a, 0xa5, 0x33}, 40), rt.N(3, time.Now().UnixMilli()))
	record.SetBaseOffset(garbage, 3)
	bomb := rt.Wrap(record.CodecZstd, rt.Bomb(record.CodecZstd, 1<<30, false), rt.N(100_000, bombTime))
	record.SetBaseOffset(bomb, 6)
	segment := filepath.Join(b.dir, "old-0", "00000000000000000000.log")
	f, err := os.OpenFile(segment, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(append(bytes.Clone(garbage), bomb...)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Remove(filepath.Join(b.dir, storage.CleanShutdownFile)) // recover: scan the segment
	b.start(t, addr)

	code, hw, batches := fetchAll(t, addr, "old")
	if code != 0 || hw != 100_006 || len(batches) != 3 || !bytes.Equal(batches[1], garbage) || !bytes.Equal(batches[2], bomb) {
		t.Fatalf("fetch: error %d, high watermark %d, %d batches (the poisoned ones as stored: %v %v)",
			code, hw, len(batches), len(batches) > 1 && bytes.Equal(batches[1], garbage), len(batches) > 2 && bytes.Equal(batches[2], bomb))
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	offsets, err := newAdmin(t, addr).ListOffsetsAfterMilli(testContext(t), bombTime, "old")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offsets.Lookup("old", 0); o.Err != nil || o.Offset != 6 {
		t.Fatalf("ListOffsets at the bomb's time: offset %d, %v", o.Offset, o.Err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("ListOffsets on a stored bomb allocated %d bytes", alloc)
	}

	resp := produceAt(t, addr, "old", 9, record.Build(nil, []record.Rec{{Value: []byte("after"), Timestamp: time.Now().UnixMilli()}}))
	if resp.ErrorCode != 0 || resp.BaseOffset != 100_006 {
		t.Fatalf("produce after the poisoned batches: %+v", resp)
	}
}
