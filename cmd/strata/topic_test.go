package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-io/strata/internal/testutil/poll"
)

func describeOne(t *testing.T, topic string, extra ...string) topicDescription {
	t.Helper()
	descs := okJSON[[]topicDescription](t, "", append([]string{"topic", "describe", topic}, extra...)...)
	if len(descs) != 1 || descs[0].Topic != topic {
		t.Fatalf("describe %s: got %+v", topic, descs)
	}
	return descs[0]
}

func configValue(d topicDescription, name string) (configInfo, bool) {
	for _, c := range d.Configs {
		if c.Name == name {
			return c, true
		}
	}
	return configInfo{}, false
}

func TestTopicCreateListDescribeDelete(t *testing.T) {
	name := fmt.Sprintf("lifecycle-%d", topicSeq.Add(1))
	res := okJSON[[]topicResult](t, "", "topic", "create", name, "-p", "3", "-r", "1", "-c", "retention.ms=3600000", "-c", "cleanup.policy=delete")
	if len(res) != 1 || res[0].Topic != name || res[0].Error != "" {
		t.Fatalf("create: %+v", res)
	}

	list := okJSON[[]topicListEntry](t, "", "topic", "list")
	i := slices.IndexFunc(list, func(e topicListEntry) bool { return e.Topic == name })
	if i < 0 || list[i].Partitions != 3 || list[i].Replicas != 1 {
		t.Fatalf("list: %s missing or wrong in %+v", name, list)
	}
	if text := ok(t, "", "topic", "list"); !strings.Contains(text, "NAME") || !strings.Contains(text, name) {
		t.Fatalf("list text:\n%s", text)
	}

	ok(t, "a\nb\nc\nd\n", "topic", "produce", name, "--partition", "1")
	d := describeOne(t, name)
	if len(d.Partitions) != 3 {
		t.Fatalf("describe: %d partitions, want 3", len(d.Partitions))
	}
	for _, p := range d.Partitions {
		want := int64(0)
		if p.Partition == 1 {
			want = 4
		}
		if p.Leader < 0 || len(p.Replicas) != 1 || len(p.ISR) != 1 || p.OfflineReplicas == nil || len(p.OfflineReplicas) != 0 ||
			p.ELR == nil || len(p.ELR) != 0 || p.LastKnownELR == nil || len(p.LastKnownELR) != 0 ||
			p.LogStart != 0 || p.HighWatermark != want || p.Error != "" {
			t.Fatalf("describe partition %+v: want a leader, one replica in sync, none offline, log start 0, high watermark %d", p, want)
		}
	}
	if c, found := configValue(d, "retention.ms"); !found || c.Value != "3600000" || c.Source != "topic" {
		t.Fatalf("describe configs %+v: want retention.ms=3600000 from the topic", d.Configs)
	}
	if _, found := configValue(d, "segment.bytes"); found {
		t.Fatalf("describe shows default configs: %+v", d.Configs)
	}
	if all := describeOne(t, name, "--all-configs"); len(all.Configs) <= len(d.Configs) {
		t.Fatalf("--all-configs shows %d configs, no more than the %d non-default ones", len(all.Configs), len(d.Configs))
	}
	text := ok(t, "", "topic", "describe", name)
	for _, want := range []string{"PARTITION", "LEADER", "REPLICAS", "ISR", "ELR", "LAST-KNOWN-ELR", "OFFLINE", "LOG-START", "HIGH-WATERMARK", "retention.ms"} {
		if !strings.Contains(text, want) {
			t.Fatalf("describe text lacks %q:\n%s", want, text)
		}
	}

	fails(t, "TOPIC_ALREADY_EXISTS", "topic", "create", name)
	if out := ok(t, "", "topic", "delete", name); strings.TrimSpace(out) != "deleted "+name {
		t.Fatalf("delete: %q", out)
	}
	poll.Until(t, 20*time.Second, "the topic to disappear", func() bool {
		return !strings.Contains(ok(t, "", "topic", "list"), name)
	})
	fails(t, `unknown topic "`+name+`"`, "topic", "describe", name)
}

func TestTopicCreateValidation(t *testing.T) {
	fails(t, `-c "retention.ms": want key=value`, "topic", "create", "bad-config", "-c", "retention.ms")
	fails(t, "requires at least 1 arg", "topic", "create")
	fails(t, `invalid argument "x"`, "topic", "create", "t", "-p", "x")
	// A dry run creates nothing.
	if out := ok(t, "", "topic", "create", "dry-run-topic", "-p", "2", "--dry-run"); !strings.Contains(out, "would create dry-run-topic") {
		t.Fatalf("dry run: %q", out)
	}
	fails(t, `unknown topic "dry-run-topic"`, "topic", "describe", "dry-run-topic")
	fails(t, `unknown --format "yaml"`, "topic", "list", "--format", "yaml")
}

func TestTopicAlterConfig(t *testing.T) {
	name := newTopic(t, 1)
	ok(t, "", "topic", "alter-config", name, "--set", "retention.ms=7200000", "--set", "max.message.bytes=2000000")
	d := describeOne(t, name)
	if c, found := configValue(d, "retention.ms"); !found || c.Value != "7200000" {
		t.Fatalf("after --set: %+v", d.Configs)
	}
	if c, found := configValue(d, "max.message.bytes"); !found || c.Value != "2000000" {
		t.Fatalf("after --set: %+v", d.Configs)
	}
	ok(t, "", "topic", "alter-config", name, "--delete", "retention.ms")
	d = describeOne(t, name)
	if _, found := configValue(d, "retention.ms"); found {
		t.Fatalf("after --delete retention.ms: %+v", d.Configs)
	}
	if _, found := configValue(d, "max.message.bytes"); !found {
		t.Fatalf("--delete removed another key: %+v", d.Configs)
	}

	fails(t, "nothing to change", "topic", "alter-config", name)
	fails(t, `--set "retention.ms": want key=value`, "topic", "alter-config", name, "--set", "retention.ms")
	fails(t, `unknown topic "no-such-topic"`, "topic", "alter-config", "no-such-topic", "--set", "retention.ms=1")
}

func TestTopicAddPartitions(t *testing.T) {
	name := newTopic(t, 2)
	if out := ok(t, "", "topic", "add-partitions", name, "-n", "3"); !strings.Contains(out, "added 3 partitions to "+name) {
		t.Fatalf("add-partitions: %q", out)
	}
	poll.Until(t, 20*time.Second, "5 partitions", func() bool { return len(describeOne(t, name).Partitions) == 5 })
	fails(t, "--num must be at least 1", "topic", "add-partitions", name, "-n", "0")
	fails(t, `required flag(s) "num" not set`, "topic", "add-partitions", name)
	fails(t, `unknown topic "no-such-topic"`, "topic", "add-partitions", "no-such-topic", "-n", "1")
}

func TestTopicDeleteUnknown(t *testing.T) {
	name := newTopic(t, 1)
	// One good, one unknown: the good one goes, the exit code says one failed.
	r := fails(t, `unknown topic "no-such-topic"`, "topic", "delete", name, "no-such-topic")
	if !strings.Contains(r.stdout, "deleted "+name) {
		t.Fatalf("stdout %q: want the deleted topic reported", r.stdout)
	}
}
