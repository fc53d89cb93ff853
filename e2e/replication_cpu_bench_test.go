package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// processCPU is a process's user and system CPU time from /proc/PID/stat.
func processCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The command (field 2) may hold spaces: fields count from after it.
	i := bytes.LastIndexByte(data, ')')
	fields := bytes.Fields(data[i+1:])
	if len(fields) < 13 {
		tb.Fatalf("malformed /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(string(fields[11]), 10, 64) // field 14
	stime, err2 := strconv.ParseInt(string(fields[12]), 10, 64) // field 15
	if err1 != nil || err2 != nil {
		tb.Fatalf("malformed /proc/%d/stat", pid)
	}
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// BenchmarkReplicationCPU compares, side by side in one run, the broker
// CPU a follower spends per record it replicates with the CPU the leader
// spends per record produced to it: three broker processes and a
// controller-only one, a topic of four partitions on brokers {2,3,4} all
// led by 2, an idempotent acks=all franz-go producer writing b.N records
// of 100 random bytes in batches of up to 16 KiB (the Java producer's
// batch.size, linger.ms=5), uncompressed and snappy-compressed. CPU is each
// process's utime+stime (/proc/PID/stat) before and after; the leader's
// includes serving its followers' fetches.
//
//	go test ./e2e -run '^$' -bench BenchmarkReplicationCPU -benchtime 3000000x
func BenchmarkReplicationCPU(b *testing.B) {
	for _, codec := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"snappy", kgo.SnappyCompression()}} {
		b.Run(codec.name, func(b *testing.B) { benchReplicationCPU(b, codec.codec) })
	}
}

func benchReplicationCPU(b *testing.B, codec kgo.CompressionCodec) {
	c := startClusterRoles(b, []string{"controller", "broker", "broker", "broker"}, replicatedSets...)
	c.waitBrokers(2, 3, 4)
	const topic = "cpu"
	c.createAssigned(2, topic, []int32{2, 3, 4}, []int32{2, 4, 3}, []int32{2, 3, 4}, []int32{2, 4, 3})
	c.waitInSync(2, topic, 4)
	cl := client(c.t, c.nodes[2].addr, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerBatchMaxBytes(16<<10), kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchCompression(codec))
	// Random values, drawn from a pool so that making them costs the
	// producer little: compression gains what it would on real data.
	rng := rand.New(rand.NewPCG(1, 2))
	values := make([][]byte, 1024)
	for i := range values {
		values[i] = make([]byte, 100)
		for j := range values[i] {
			values[i][j] = byte('a' + rng.IntN(26))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Warm up: connections, the first segments.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: values[0]}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	var before [5]time.Duration
	for id := int32(2); id <= 4; id++ {
		before[id] = processCPU(b, c.nodes[id].cmd.Process.Pid)
	}
	b.ResetTimer()
	errs := make(chan error, 1)
	for i := range b.N {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: values[i%len(values)]}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	var used [5]time.Duration
	for id := int32(2); id <= 4; id++ {
		used[id] = processCPU(b, c.nodes[id].cmd.Process.Pid) - before[id]
	}
	perRecord := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	leader := perRecord(used[2])
	follower := (perRecord(used[3]) + perRecord(used[4])) / 2
	b.ReportMetric(leader, "leader-cpu-ns/record")
	b.ReportMetric(follower, "follower-cpu-ns/record")
	if leader > 0 {
		b.ReportMetric(follower/leader, "follower/leader")
	}
	b.Logf("%d records: leader %v CPU, followers %v and %v", b.N, used[2], used[3], used[4])
}
