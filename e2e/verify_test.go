package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/verify"
)

// TestVerifyClusterOfThree runs `strata verify` as a user would, as its own
// process, against three strata processes forming one cluster: the topic
// gets replication factor 3 (and min.insync.replicas=2), and a run with
// nothing broken is valid, every record acknowledged and read back.
func TestVerifyClusterOfThree(t *testing.T) {
	c := startCluster(t, 3)
	var seeds []string
	for _, id := range ids(3) {
		seeds = append(seeds, c.nodes[id].addr)
	}
	cmd := exec.Command(binary, "verify", "--brokers", strings.Join(seeds, ","), "--records", "3000", "--rate", "0",
		"--drain-timeout", "30s", "--timeout", "30s", "--quiet", "--format", "json", "--keep-topic")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var res verify.Result
	if jerr := json.Unmarshal(stdout.Bytes(), &res); jerr != nil {
		t.Fatalf("strata verify: %v, %v\nstdout: %s\nstderr: %s", err, jerr, stdout.String(), stderr.String())
	}
	if err != nil || !res.Valid || len(res.Warnings) > 0 {
		t.Fatalf("strata verify: %v; %s\nstdout: %s\nstderr: %s", err, res.Summary(), stdout.String(), stderr.String())
	}
	if res.ReplicationFactor != 3 || res.Stats.Acknowledged != 3000 || res.Stats.Distinct != 3000 {
		t.Fatalf("replication factor %d, %d acknowledged, %d read; want 3, 3000, 3000", res.ReplicationFactor, res.Stats.Acknowledged, res.Stats.Distinct)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	configs, err := c.admin(2).DescribeTopicConfigs(ctx, res.Topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := configs.On(res.Topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range rc.Configs {
		if kv.Key == "min.insync.replicas" {
			if kv.MaybeValue() != "2" || kv.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Fatalf("min.insync.replicas %q from %v, want 2 set on the topic", kv.MaybeValue(), kv.Source)
			}
			return
		}
	}
	t.Fatalf("topic %s has no min.insync.replicas", res.Topic)
}

// TestVerifyTransactionalClusterOfThree runs `strata verify
// --transactional` against three strata processes, nothing broken: the
// run is valid, with transactions committed and aborted, every committed
// record copied.
func TestVerifyTransactionalClusterOfThree(t *testing.T) {
	c := startCluster(t, 3)
	var seeds []string
	for _, id := range ids(3) {
		seeds = append(seeds, c.nodes[id].addr)
	}
	start := time.Now()
	cmd := exec.Command(binary, "verify", "--transactional", "--brokers", strings.Join(seeds, ","), "--records", "60", "--rate", "0", "--abort-rate", "0.5", "--txn-records", "4",
		"--partitions", "3", "--drain-timeout", "30s", "--timeout", "30s", "--format", "json", "--history", filepath.Join(t.TempDir(), "run.json"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var res verify.Result
	if jerr := json.Unmarshal(stdout.Bytes(), &res); jerr != nil {
		t.Fatalf("strata verify: %v, %v\nstdout: %s\nstderr: %s", err, jerr, stdout.String(), stderr.String())
	}
	st := res.Stats
	t.Logf("%s: %d records, transactions %+v, copy transactions %+v, %d copied, longest end %.0f ms",
		time.Since(start).Round(time.Millisecond), st.Acknowledged, st.Txns, st.Copies, st.Copied, st.LongestEndMillis)
	if err != nil || !res.Valid || len(res.Warnings) > 0 {
		t.Fatalf("strata verify: %v; %s\nstdout: %s\nstderr: %s", err, res.Summary(), stdout.String(), stderr.String())
	}
	if res.ReplicationFactor != 3 || st.Acknowledged != 60 || st.Txns.Committed == 0 || st.Txns.Aborted == 0 || st.Copied == 0 {
		t.Fatalf("replication factor %d, %d acknowledged, transactions %+v, %d copied\nstderr: %s", res.ReplicationFactor, st.Acknowledged, st.Txns, st.Copied, stderr.String())
	}
}
