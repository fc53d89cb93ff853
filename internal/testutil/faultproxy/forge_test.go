package faultproxy

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata"
)

// TestForgesAcknowledgements: through a forging proxy, a real franz-go
// producer (acks=1, not idempotent) gets every record acknowledged, but
// the broker holds exactly the records of the requests the proxy
// forwarded, and the forged acknowledgements name offsets that other
// records hold.
func TestForgesAcknowledgements(t *testing.T) {
	p, err := Listen(Options{Seed: 7, ForgeRate: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The node advertises the proxy (which Node.Addr then reports), so it
	// listens on a port chosen here.
	listen := freeAddr(t)
	node, err := strata.Start(strata.Options{Dir: t.TempDir(), Listen: listen, Settings: map[string]string{"advertised.listeners": "PLAINTEXT://" + p.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	p.SetTarget(listen)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Addr()), kgo.DefaultProduceTopic("forged"),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "forged"); err != nil {
		t.Fatal(err)
	}
	const n = 400
	var mu sync.Mutex
	acked := map[string]int64{}
	for i := range n {
		// One record per request, each waited for, so each forged request
		// holds one record and follows a real acknowledgement.
		r := &kgo.Record{Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		mu.Lock()
		acked[string(r.Value)] = r.Offset
		mu.Unlock()
	}
	forged := p.ForgedRecords()
	if forged == 0 || forged != p.Forged() || forged > n/2 {
		t.Fatalf("forged %d records in %d requests of %d", forged, p.Forged(), n)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(p.Addr()),
		kgo.ConsumeTopics("forged"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	stored := map[int64]map[int32]string{} // offset -> partition -> value
	read := 0
	for read < n-int(forged) {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("after %d records: %v", read, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			if stored[r.Offset] == nil {
				stored[r.Offset] = map[int32]string{}
			}
			stored[r.Offset][r.Partition] = string(r.Value)
			if off, ok := acked[string(r.Value)]; !ok || off != r.Offset {
				t.Errorf("read %s at %d, acknowledged at %d (%v)", r.Value, r.Offset, off, ok)
			}
		})
	}
	ends, err := kadm.NewClient(consumer).ListEndOffsets(ctx, "forged")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(n)-forged {
		t.Fatalf("the broker holds %d records, want the %d forwarded", total, int64(n)-forged)
	}
	// Every forged acknowledgement names an offset another record holds.
	clashes := 0
	for i := range n {
		v := fmt.Sprint(i)
		if off := acked[v]; stored[off][int32(i%2)] != v {
			clashes++
		}
	}
	if int64(clashes) != forged {
		t.Fatalf("%d acknowledgements name another record's offset, want the %d forged", clashes, forged)
	}
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
