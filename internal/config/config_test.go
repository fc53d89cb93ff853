package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	s, err := NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"node.id":                   "1",
		"log.dirs":                  "./strata-data",
		"listeners":                 "PLAINTEXT://127.0.0.1:9092",
		"num.partitions":            "1",
		"log.segment.bytes":         "1073741824",
		"log.index.interval.bytes":  "4096",
		"message.max.bytes":         "1048588",
		"socket.request.max.bytes":  "104857600",
		"auto.create.topics.enable": "true",
	} {
		if got := s.String(key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	if got := s.RetentionMs(); got != 168*3_600_000 {
		t.Errorf("RetentionMs = %d", got)
	}
	td := s.TopicDefaults()
	if td["retention.ms"] != "604800000" || td["segment.bytes"] != "1073741824" || td["segment.ms"] != "604800000" {
		t.Errorf("topic defaults: %v", td)
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "server.properties")
	props := "# a comment\nnode.id=7\nlog.dirs = /var/a\nnum.partitions: 3\nlog.retention.hours=1\nsome.unknown.key=1\nnum.io.threads=8\nlisteners=PLAINTEXT://127.0.0.1:1,\\\n  SSL://127.0.0.1:2\n"
	if err := os.WriteFile(file, []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(LoadOptions{
		File:    file,
		Environ: []string{"KAFKA_NUM_PARTITIONS=4", "STRATA_LOG_RETENTION_MINUTES=2", "KAFKA_HEAP_OPTS=-Xmx1G", "PATH=/bin"},
		Sets:    []string{"num.partitions=5"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Int("node.id") != 7 || s.Int("num.partitions") != 5 || s.LogDirs()[0] != "/var/a" {
		t.Errorf("node.id=%d num.partitions=%d log.dirs=%v", s.Int("node.id"), s.Int("num.partitions"), s.LogDirs())
	}
	if v, src := s.Value("num.partitions"); v != "5" || src != SourceFlag {
		t.Errorf("num.partitions = %q from %d", v, src)
	}
	if s.RetentionMs() != 120_000 {
		t.Errorf("minutes should win over hours: %d", s.RetentionMs())
	}
	if l := s.List("listeners"); len(l) != 2 {
		t.Errorf("continuation: %v", l)
	}
	warn := strings.Join(s.Warnings, "\n")
	if !strings.Contains(warn, "unknown configuration key some.unknown.key") || !strings.Contains(warn, "num.io.threads is ignored") {
		t.Errorf("warnings: %q", warn)
	}
}

func TestInvalidValuesNameTheKey(t *testing.T) {
	for _, set := range []string{
		"num.partitions=zero",
		"num.partitions=0",
		"auto.create.topics.enable=yes",
		"log.message.timestamp.type=Whenever",
		"listeners=127.0.0.1:9092",
		"node.id=99999999999",
		"log.segment.bytes=",
		"novalue",
	} {
		_, err := Load(LoadOptions{Sets: []string{set}})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", set, err)
			continue
		}
		key, _, _ := strings.Cut(set, "=")
		if !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %q does not name the key", set, err)
		}
	}
}

func TestEnvMapping(t *testing.T) {
	got := EnvOverrides([]string{
		"KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://x:1",
		"KAFKA_LISTENER__NAME=a",
		"KAFKA_SOME___DASHED=b",
		"STRATA_BROKERS=x",
		"KAFKA_OPTS=y",
	})
	want := map[string]string{"advertised.listeners": "PLAINTEXT://x:1", "listener_name": "a", "some-dashed": "b"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for _, kv := range got {
		if want[kv[0]] != kv[1] {
			t.Errorf("%s=%s", kv[0], kv[1])
		}
	}
}

func TestTopicConfig(t *testing.T) {
	s, _ := NewServer(map[string]string{"log.retention.ms": "1000"})
	tc := ResolveTopic(s.TopicDefaults(), map[string]string{"segment.bytes": "2048", "retention.bytes": "junk"})
	if tc.Int("retention.ms") != 1000 || tc.Int("segment.bytes") != 2048 || tc.Int("retention.bytes") != -1 {
		t.Errorf("resolved: %v", tc.values)
	}
	if err := ValidateTopicConfig("no.such", "1"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown key: %v", err)
	}
	for _, policy := range []string{"delete", "compact", "compact,delete", "delete, compact", ""} {
		if err := ValidateTopicConfig("cleanup.policy", policy); err != nil {
			t.Error(err)
		}
	}
	if err := ValidateTopicConfig("cleanup.policy", "compact,compacted"); !errors.Is(err, ErrInvalid) {
		t.Errorf("cleanup.policy compacted: %v", err)
	}
	for _, ratio := range []string{"0", "0.5", "1"} {
		if err := ValidateTopicConfig("min.cleanable.dirty.ratio", ratio); err != nil {
			t.Error(err)
		}
	}
	if err := ValidateTopicConfig("min.cleanable.dirty.ratio", "1.5"); !errors.Is(err, ErrInvalid) {
		t.Errorf("min.cleanable.dirty.ratio 1.5: %v", err)
	}
	// The cleaner's broker keys supply the topic defaults.
	s, _ = NewServer(map[string]string{"log.cleaner.min.cleanable.ratio": "0.25", "log.cleaner.delete.retention.ms": "5",
		"log.cleaner.min.compaction.lag.ms": "7"})
	tc = ResolveTopic(s.TopicDefaults(), nil)
	if tc.Float("min.cleanable.dirty.ratio") != 0.25 || tc.Int("delete.retention.ms") != 5 || tc.Int("min.compaction.lag.ms") != 7 {
		t.Errorf("cleaner defaults: %v", tc.values)
	}
}
