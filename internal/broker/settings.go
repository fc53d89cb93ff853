package broker

import (
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/storage"
)

// settings are the broker keys that handlers and background work act on
// while the broker runs, resolved once into typed fields: from the static
// configuration, overridden by the dynamic broker configuration of the
// metadata image (the cluster-wide default, then this node's), as Kafka's
// DynamicBrokerConfig orders them. A new image that changes the dynamic
// configuration replaces them whole (Broker.settings); nothing reads a key
// by name per request.
type settings struct {
	// fetchMaxBytes is fetch.max.bytes (57671680, static): the most bytes
	// one fetch response carries.
	fetchMaxBytes int64
	// replicaFetchResponseMaxBytes is replica.fetch.response.max.bytes
	// (10485760, static): the same for a follower's fetch.
	replicaFetchResponseMaxBytes int64
	// producerIDExpirationMs is producer.id.expiration.ms (86400000,
	// dynamic): how long an idle producer id is remembered.
	producerIDExpirationMs int64
	// recoveryThreads is num.recovery.threads.per.data.dir (1, dynamic).
	recoveryThreads int
	// leaderThrottleRate and followerThrottleRate are
	// leader.replication.throttled.rate and
	// follower.replication.throttled.rate (bytes per second, unbounded
	// by default, dynamic).
	leaderThrottleRate, followerThrottleRate int64
	// rackAwareReads is replica.selector.class set to
	// org.apache.kafka.common.replica.RackAwareReplicaSelector (static):
	// a leader points consumers of another rack at a follower in theirs
	// (KIP-392).
	rackAwareReads bool
	// cleaner holds log.cleaner.backoff.ms, log.cleaner.threads and
	// log.cleaner.dedupe.buffer.size (dynamic), with
	// producer.id.expiration.ms.
	cleaner storage.CleanerSettings
}

// rackAwareSelector is Kafka's rack-aware replica.selector.class.
const rackAwareSelector = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

// brokerConfigs returns the dynamic broker configuration that applies to
// this node, lowest precedence first: the cluster-wide default (resource
// name ""), then this node's.
func (b *Broker) brokerConfigs(img *metadata.Image) [2]map[string]string {
	return [2]map[string]string{
		img.Configs[metadata.ConfigResource{Type: metadata.ResourceBroker}],
		img.Configs[metadata.ConfigResource{Type: metadata.ResourceBroker, Name: strconv.Itoa(int(b.nodeID))}],
	}
}

// brokerConfigsChanged reports whether the dynamic broker configuration
// that applies to this node differs between two images.
func (b *Broker) brokerConfigsChanged(old, img *metadata.Image) bool {
	o, n := b.brokerConfigs(old), b.brokerConfigs(img)
	return !maps.Equal(o[0], n[0]) || !maps.Equal(o[1], n[1])
}

// resolveSettings resolves the settings from the static configuration and
// the dynamic broker configuration of img (nil: static only). A dynamic
// value the key no longer accepts (written by another version) is skipped.
func (b *Broker) resolveSettings(img *metadata.Image) *settings {
	var layers [2]map[string]string
	if img != nil {
		layers = b.brokerConfigs(img)
	}
	value := func(name string) string {
		key, _ := config.LookupServer(name)
		for i := len(layers) - 1; i >= 0; i-- {
			if v, ok := layers[i][name]; ok && key.Dynamic && key.Validate(v) == nil {
				return v
			}
		}
		return b.cfg.String(name)
	}
	integer := func(name string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSpace(value(name)), 10, 64)
		return n
	}
	s := &settings{
		fetchMaxBytes:                integer("fetch.max.bytes"),
		replicaFetchResponseMaxBytes: integer("replica.fetch.response.max.bytes"),
		producerIDExpirationMs:       integer("producer.id.expiration.ms"),
		recoveryThreads:              int(integer("num.recovery.threads.per.data.dir")),
		rackAwareReads:               value("replica.selector.class") == rackAwareSelector,
		leaderThrottleRate:           integer("leader.replication.throttled.rate"),
		followerThrottleRate:         integer("follower.replication.throttled.rate"),
	}
	s.cleaner = storage.CleanerSettings{
		Backoff:                time.Duration(integer("log.cleaner.backoff.ms")) * time.Millisecond,
		Threads:                int(integer("log.cleaner.threads")),
		DedupeBufferSize:       integer("log.cleaner.dedupe.buffer.size"),
		ProducerIDExpirationMs: s.producerIDExpirationMs,
	}
	return s
}

// applySettings makes new settings current and hands the ones the storage
// manager runs with to it. b.imageMu must be held (or the broker not yet
// shared).
func (b *Broker) applySettings(s *settings) {
	old := b.settings.Swap(s)
	if old != nil && *old == *s {
		return
	}
	b.logs.SetCleanerSettings(s.cleaner)
	b.logs.SetRecoveryThreads(s.recoveryThreads)
	b.leaderQuota.SetBound(s.leaderThrottleRate)
	b.followerQuota.SetBound(s.followerThrottleRate)
	if old != nil {
		b.logger.Info("dynamic broker configuration applied", "leader.replication.throttled.rate", s.leaderThrottleRate,
			"follower.replication.throttled.rate", s.followerThrottleRate, "log.cleaner.backoff.ms", s.cleaner.Backoff.Milliseconds(),
			"log.cleaner.threads", s.cleaner.Threads, "log.cleaner.dedupe.buffer.size", s.cleaner.DedupeBufferSize,
			"producer.id.expiration.ms", s.producerIDExpirationMs, "num.recovery.threads.per.data.dir", s.recoveryThreads)
	}
}
