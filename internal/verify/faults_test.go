package verify_test

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata"
	"github.com/strata-io/strata/internal/testutil/faultproxy"
	"github.com/strata-io/strata/internal/verify"
)

// verify must find real anomalies. Each test breaks a real setup on
// purpose, a real Strata node behind a fault proxy, runs the workload
// against it, and compares what the checker reports with what the test
// knows independently of it: the log read back directly, or the proxy's
// own count of what it broke. A checker that misses the anomalies, or
// invents others, fails them.

// startBehindProxy starts a Strata node that clients reach only through
// proxy: the node advertises the proxy's address.
func startBehindProxy(t *testing.T, proxy *faultproxy.Proxy) *strata.Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	n, err := strata.Start(strata.Options{Dir: t.TempDir(), Listen: listen, Settings: map[string]string{
		"group.initial.rebalance.delay.ms": "0",
		"advertised.listeners":             "PLAINTEXT://" + proxy.Addr(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	proxy.SetTarget(listen)
	return n
}

func listenProxy(t *testing.T, opts faultproxy.Options) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Listen(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// faultyRun is smallRun with small batches (so that the records take
// hundreds of produce requests, enough for faults), quick retries, and
// metadata that may be refreshed often (franz-go refreshes it when a
// connection fails, which the proxy makes happen).
func faultyRun(addr string) verify.Config {
	cfg := smallRun(addr)
	cfg.Records = 2000
	cfg.ClientOpts = []kgo.Opt{
		kgo.ProducerBatchMaxBytes(1 << 10),
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }),
		kgo.MetadataMinAge(100 * time.Millisecond),
	}
	return cfg
}

func report(res *verify.Result) string {
	var b bytes.Buffer
	res.WriteText(&b)
	return b.String()
}

// readLog reads every record of topic directly, by partition and offset.
func readLog(t *testing.T, addr, topic string) map[int32]map[int64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	ends.Each(func(o kadm.ListedOffset) { want += int(o.Offset) })
	out := map[int32]map[int64]string{}
	for n := 0; n < want; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading %s back after %d of %d records: %v", topic, n, want, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if out[r.Partition] == nil {
				out[r.Partition] = map[int64]string{}
			}
			out[r.Partition][r.Offset] = string(r.Value)
			n++
		})
	}
	return out
}

func requireReachedEnd(t *testing.T, h *verify.History, res *verify.Result) {
	t.Helper()
	for _, f := range h.Final {
		if !f.Reached {
			t.Fatalf("final read of partition %d did not reach its end:\n%s", f.Partition, report(res))
		}
	}
}

// TestVerifyFindsDuplicates: without the idempotent producer, a proxy that
// loses produce responses after the broker appended makes franz-go retry
// batches the broker already has, which it appends again. The checker
// must report exactly the values the log holds more than once.
func TestVerifyFindsDuplicates(t *testing.T) {
	proxy := listenProxy(t, faultproxy.Options{Seed: 13, DropRate: 0.1})
	startBehindProxy(t, proxy)
	cfg := faultyRun(proxy.Addr())
	cfg.Idempotent = false
	h, res := runVerify(t, cfg)
	requireReachedEnd(t, h, res)

	proxy.SetDropRate(0)
	copies := map[string]int{}
	for _, offs := range readLog(t, proxy.Addr(), h.Topic) {
		for _, v := range offs {
			copies[v]++
		}
	}
	duplicated := 0
	for _, n := range copies {
		if n > 1 {
			duplicated++
		}
	}
	if proxy.Dropped() == 0 || duplicated == 0 {
		t.Fatalf("the proxy dropped %d responses and the log holds %d values twice: the fault did not happen", proxy.Dropped(), duplicated)
	}
	if res.Count(verify.Duplicate) != duplicated || res.Valid {
		t.Fatalf("checker found %d duplicates, the log holds %d values more than once:\n%s", res.Count(verify.Duplicate), duplicated, report(res))
	}
	for _, k := range []verify.Kind{verify.LostWrite, verify.InconsistentOffset, verify.UnexpectedValue} {
		if res.Count(k) != 0 {
			t.Fatalf("a retried append is no %s:\n%s", k, report(res))
		}
	}
	if res.Stats.Acknowledged != int(cfg.Records) {
		t.Fatalf("%d of %d acknowledged:\n%s", res.Stats.Acknowledged, cfg.Records, report(res))
	}
}

// TestVerifyFindsLostWrites: a proxy that acknowledges some produce
// requests itself, at offsets other records hold, and never forwards them
// (acks=1, so nothing else notices). Every record in those requests is an
// acknowledged write that is nowhere: the checker must report each of
// them as lost, and the offsets where other records were read as
// inconsistent.
func TestVerifyFindsLostWrites(t *testing.T) {
	proxy := listenProxy(t, faultproxy.Options{Seed: 29, ForgeRate: 0.05})
	startBehindProxy(t, proxy)
	cfg := faultyRun(proxy.Addr())
	cfg.Idempotent = false
	cfg.Acks = kgo.LeaderAck()
	h, res := runVerify(t, cfg)
	requireReachedEnd(t, h, res)

	forged := int(proxy.ForgedRecords())
	if forged == 0 {
		t.Fatalf("the proxy forged no acknowledgement: the fault did not happen")
	}
	if res.Count(verify.LostWrite) != forged || res.Valid {
		t.Fatalf("checker found %d lost writes, the proxy forged %d acknowledgements:\n%s", res.Count(verify.LostWrite), forged, report(res))
	}
	// Independently of the checker: the forged records are the
	// acknowledged values the log, read back directly, does not hold.
	// Jepsen's clause alone (a reader got past the offset) must find those
	// acknowledged at or below the partition's last offset; without the
	// final read's word that it reached the end, the others are unread.
	stored := readLog(t, proxy.Addr(), h.Topic)
	inLog := map[string]bool{}
	last := map[int32]int64{}
	for p, offs := range stored {
		last[p] = -1
		for off, v := range offs {
			inLog[v] = true
			last[p] = max(last[p], off)
		}
	}
	missing, below := 0, 0
	for _, s := range h.Sends {
		if s.Acked && !inLog[s.Value] {
			missing++
			if s.Offset <= last[s.Partition] {
				below++
			}
		}
	}
	if missing != forged || below == 0 {
		t.Fatalf("the log lacks %d acknowledged records (%d below its end); the proxy forged %d", missing, below, forged)
	}
	h.Final = nil
	jepsen := verify.Check(h)
	if jepsen.Count(verify.LostWrite) != below || jepsen.Stats.Unread != forged-below {
		t.Fatalf("without the final read's end: %d lost writes and %d unread, want %d and %d:\n%s",
			jepsen.Count(verify.LostWrite), jepsen.Stats.Unread, below, forged-below, report(jepsen))
	}
	if res.Count(verify.InconsistentOffset) == 0 {
		t.Fatalf("forged acknowledgements name offsets other records hold, but no inconsistent offset was found:\n%s", report(res))
	}
	for _, k := range []verify.Kind{verify.Duplicate, verify.UnexpectedValue} {
		if res.Count(k) != 0 {
			t.Fatalf("a forged acknowledgement is no %s:\n%s", k, report(res))
		}
	}
	if res.Stats.Acknowledged != int(cfg.Records) {
		t.Fatalf("%d of %d acknowledged:\n%s", res.Stats.Acknowledged, cfg.Records, report(res))
	}
}
