package main

import (
	"os"
	"strings"
	"testing"
)

func checkBenchResult(t *testing.T, r benchResult, records int, wantLatency, wantCPU bool) {
	t.Helper()
	if r.Records != records || r.RecordsPerSec <= 0 || r.MBPerSec <= 0 || r.Seconds <= 0 {
		t.Fatalf("result %+v: want %d records at a positive rate", r, records)
	}
	if wantLatency && (r.Latency == nil || r.Latency.P50 <= 0 || r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.P999 || r.LatencyOf == "") {
		t.Fatalf("latency %+v of %q", r.Latency, r.LatencyOf)
	}
	if wantCPU != (r.BrokerCPUSeconds != nil && r.CPUSecondsPerMillion != nil && r.CPUSecondsPerGB != nil) {
		t.Fatalf("broker CPU %v, want reported: %v", r.BrokerCPUSeconds, wantCPU)
	}
	if wantCPU && *r.BrokerCPUSeconds < 0 {
		t.Fatalf("negative CPU %v", *r.BrokerCPUSeconds)
	}
}

func TestBenchProduce(t *testing.T) {
	// The node runs in this process, so its CPU is this process's.
	rep := okJSON[benchReport](t, "", "bench", "produce", "--records", "3000", "--broker-pid", itoa(int32(os.Getpid())))
	if rep.Mode != "produce" || rep.RecordSize != 100 || rep.Partitions != 6 || len(rep.Results) != 1 {
		t.Fatalf("report %+v", rep)
	}
	checkBenchResult(t, rep.Results[0], 3000, true, true)
	if text := ok(t, "", "bench", "produce", "--records", "100"); !containsAll(text, "RECORDS/S", "MB/S", "P99.9", brokerAddr) {
		t.Fatalf("bench text:\n%s", text)
	}
}

func TestBenchConsume(t *testing.T) {
	rep := okJSON[benchReport](t, "", "bench", "consume", "--records", "3000")
	checkBenchResult(t, rep.Results[0], 3000, true, false)
}

func TestBenchE2E(t *testing.T) {
	rep := okJSON[benchReport](t, "", "bench", "e2e", "--records", "500", "--target-rate", "5000", "--warmup", "0")
	if rep.TargetRate != 5000 {
		t.Fatalf("report %+v", rep)
	}
	checkBenchResult(t, rep.Results[0], 500, true, false)
}

// TestBenchKfakeNeedsTheTag: the release binary has no kfake, and says
// how to build one that has.
func TestBenchKfakeNeedsTheTag(t *testing.T) {
	if benchKfakeServerCommand() != nil {
		t.Skip("built with -tags kfake")
	}
	fails(t, "-tags kfake", "bench", "produce", "--records", "10", "--kfake")
}

func TestBenchBadInput(t *testing.T) {
	fails(t, "--record-size must be at least 8", "bench", "produce", "--record-size", "4")
	fails(t, "--records must be at least 1", "bench", "consume", "--records", "0")
	fails(t, `--acks "x"`, "bench", "produce", "--acks", "x")
	if _, err := cpuSeconds(-1); err == nil {
		t.Fatal("cpuSeconds of pid -1: no error")
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
