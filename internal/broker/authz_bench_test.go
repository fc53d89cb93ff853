package broker

import (
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

// BenchmarkProduceAuthorized is BenchmarkProduce's uncompressed run with
// the authorizer off and on, holding 10,000 ACLs (9,000 literal and 1,000
// prefixed, for 100 users) and the one that lets this client (ANONYMOUS)
// write: the difference in cpu-ns/record is what authorization costs a
// produce request of 100 records.
//
//	go test ./internal/broker -run XXX -bench 'ProduceAuthorized' -count 3
func BenchmarkProduceAuthorized(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchProduceAuthorized(b, false) })
	b.Run("on-10k-acls", func(b *testing.B) { benchProduceAuthorized(b, true) })
}

func benchProduceAuthorized(b *testing.B, on bool) {
	const (
		partitions = 4
		perBatch   = 100
	)
	settings := map[string]string{}
	if on {
		// No ACL names the cluster, so ANONYMOUS may create the topic and
		// the ACLs; the topic's own ACL decides the produce.
		settings["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
		settings["allow.everyone.if.no.acl.found"] = "true"
	}
	tb := startBroker(b, settings)
	adm := newAdmin(b, tb.Addr())
	createTopic(b, adm, "bench", partitions, nil)
	if on {
		for chunk := 0; chunk < 10; chunk++ {
			acls := kadm.NewACLs()
			var topics, prefixes []string
			for i := chunk * 1000; i < (chunk+1)*1000; i++ {
				if i%10 == 0 {
					prefixes = append(prefixes, fmt.Sprintf("app-%d-", i))
				} else {
					topics = append(topics, fmt.Sprintf("topic-%d", i))
				}
			}
			acls = acls.Allow(fmt.Sprintf("User:u%d", chunk)).Topics(topics...).Operations(kadm.OpRead)
			grantBench(b, adm, acls)
			grantBench(b, adm, kadm.NewACLs().Allow(fmt.Sprintf("User:u%d", chunk)).Topics(prefixes...).ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpWrite))
		}
		grantBench(b, adm, kadm.NewACLs().Allow("User:ANONYMOUS").Topics("bench").Operations(kadm.OpWrite))
		if n := len(tb.image.Load().Acls); n != 10_001 {
			b.Fatalf("%d ACLs", n)
		}
	}
	batch := benchBatch(b, record.CodecNone, perBatch)
	frames := make([][]byte, partitions)
	for p := range frames {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 9, 1, 30_000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "bench"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = int32(p), batch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		var rh kmsg.RequestFormatter
		frames[p] = rh.AppendRequest(nil, req, 1)
	}
	conns := make([]net.Conn, partitions)
	for p := range conns {
		c, err := net.Dial("tcp", tb.Addr())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[p] = c
		sendAll(b, c, frames[p], 1)
	}
	requests := (b.N + perBatch - 1) / perBatch
	b.SetBytes(100)
	b.ResetTimer()
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	for p := range partitions {
		n := requests / partitions
		if p < requests%partitions {
			n++
		}
		wg.Go(func() { sendAll(b, conns[p], frames[p], n) })
	}
	wg.Wait()
	cpu := cpuTime() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(requests*perBatch), "cpu-ns/record")
}

func grantBench(b *testing.B, adm *kadm.Client, acls *kadm.ACLBuilder) {
	res, err := adm.CreateACLs(testContext(b), acls)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}
