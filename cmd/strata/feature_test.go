package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestFeatureDescribeUpgradeDowngrade walks transaction.version down and
// back up on the test node, as an operator would with kafka-features.sh,
// reading each change back through ApiVersions.
func TestFeatureDescribeUpgradeDowngrade(t *testing.T) {
	describe := func() featureEntry {
		t.Helper()
		entries := okJSON[[]featureEntry](t, "", "feature", "describe")
		for _, e := range entries {
			if e.Feature == "transaction.version" {
				return e
			}
		}
		t.Fatalf("feature describe: no transaction.version in %+v", entries)
		return featureEntry{}
	}
	// The broker applies the controller's record asynchronously.
	finalizedAt := func(level int16) featureEntry {
		t.Helper()
		var e featureEntry
		poll.UntilStatus(t, 10*time.Second, fmt.Sprintf("transaction.version finalized at %d", level), func() (bool, string) {
			e = describe()
			return e.Finalized == level, fmt.Sprintf("%+v", e)
		})
		return e
	}
	// A new cluster is bootstrapped at the highest level.
	start := describe()
	if start.SupportedMin != 0 || start.SupportedMax != 2 || start.Finalized != 2 || start.Epoch < 0 {
		t.Fatalf("feature describe on a new cluster: %+v", start)
	}
	t.Cleanup(func() { cli(t, "", "feature", "upgrade", "--feature", "transaction.version=2") })
	if out := ok(t, "", "feature", "describe"); !strings.Contains(out, "FINALIZED") || !strings.Contains(out, "transaction.version") {
		t.Fatalf("feature describe table:\n%s", out)
	}

	// Lowering a level is a downgrade, refused by upgrade.
	fails(t, "needs a downgrade", "feature", "upgrade", "--feature", "transaction.version=1")
	fails(t, "INVALID_UPDATE_VERSION", "feature", "upgrade", "--feature", "transaction.version=3")
	fails(t, "unknown feature", "feature", "upgrade", "--feature", "no.such.feature=1")
	fails(t, "want NAME=LEVEL", "feature", "upgrade", "--feature", "transaction.version")
	fails(t, "level must be a whole number", "feature", "downgrade", "--feature", "transaction.version=-1")
	fails(t, "no --feature", "feature", "downgrade")

	// --dry-run validates without writing.
	if out := ok(t, "", "feature", "downgrade", "--feature", "transaction.version=1", "--dry-run"); !strings.Contains(out, "could be downgraded to 1") {
		t.Fatalf("downgrade --dry-run: %q", out)
	}
	if e := describe(); e != start {
		t.Fatalf("after a dry run: %+v, want %+v", e, start)
	}

	res := okJSON[[]featureResult](t, "", "feature", "downgrade", "--feature", "transaction.version=1")
	if len(res) != 1 || res[0] != (featureResult{Feature: "transaction.version", Level: 1}) {
		t.Fatalf("downgrade: %+v", res)
	}
	one := finalizedAt(1)
	if one.Epoch <= start.Epoch {
		t.Fatalf("epoch %d after a change, %d before", one.Epoch, start.Epoch)
	}
	// Level 0 turns the feature off; upgrade brings it back.
	ok(t, "", "feature", "downgrade", "--feature", "transaction.version=0", "--unsafe")
	finalizedAt(0)
	if out := ok(t, "", "feature", "upgrade", "--feature", "transaction.version=2"); out != "transaction.version upgraded to 2\n" {
		t.Fatalf("upgrade: %q", out)
	}
	finalizedAt(2)
}
