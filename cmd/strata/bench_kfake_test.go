//go:build kfake

package main

import (
	"os"
	"testing"
)

// TestBenchKfakeBaseline runs the same benchmark against kfake in a
// separate process (this test binary, as `strata bench kfake-server`) and
// reports both, each with its broker's CPU.
func TestBenchKfakeBaseline(t *testing.T) {
	rep := okJSON[benchReport](t, "", "bench", "produce", "--records", "2000", "--kfake", "--broker-pid", itoa(int32(os.Getpid())))
	if len(rep.Results) != 2 || rep.Results[1].Target != "kfake" {
		t.Fatalf("report %+v: want the target and kfake", rep)
	}
	checkBenchResult(t, rep.Results[0], 2000, true, true)
	checkBenchResult(t, rep.Results[1], 2000, true, true)
}
