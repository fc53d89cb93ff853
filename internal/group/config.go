package group

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config holds the coordinator's settings. Each field names the Kafka
// broker key it comes from and Kafka's default, which DefaultConfig returns.
type Config struct {
	// OffsetsTopicNumPartitions is offsets.topic.num.partitions (50): the
	// number of __consumer_offsets partitions group ids hash over. It must
	// not change once the topic exists.
	OffsetsTopicNumPartitions int32

	// InitialRebalanceDelayMs is group.initial.rebalance.delay.ms (3000):
	// how long the first rebalance of an empty classic group waits for
	// more members, extended by each new member up to the rebalance timeout.
	InitialRebalanceDelayMs int32
	// MinSessionTimeoutMs is group.min.session.timeout.ms (6000).
	MinSessionTimeoutMs int32
	// MaxSessionTimeoutMs is group.max.session.timeout.ms (1800000).
	MaxSessionTimeoutMs int32
	// MaxSize is group.max.size (MaxInt32): the most members of a classic group.
	MaxSize int32
	// NewMemberJoinTimeoutMs is how long a new classic member's parked
	// JoinGroup may wait before the member is dropped (Kafka's internal
	// classicGroupNewMemberJoinTimeoutMs, 300000; not a broker key).
	NewMemberJoinTimeoutMs int32

	// ConsumerHeartbeatIntervalMs is group.consumer.heartbeat.interval.ms (5000).
	ConsumerHeartbeatIntervalMs int32
	// ConsumerSessionTimeoutMs is group.consumer.session.timeout.ms (45000).
	ConsumerSessionTimeoutMs int32
	// ConsumerMaxSize is group.consumer.max.size (MaxInt32).
	ConsumerMaxSize int32
	// ConsumerAssignors is group.consumer.assignors (uniform,range): the
	// server-side assignors KIP-848 members may name; the first is the
	// default. Only "uniform" and "range" exist.
	ConsumerAssignors []string
	// RebalanceProtocols is group.coordinator.rebalance.protocols
	// (classic,consumer). Without "consumer", ConsumerGroupHeartbeat and
	// ConsumerGroupDescribe answer UNSUPPORTED_VERSION.
	RebalanceProtocols []string

	// OffsetsRetentionMinutes is offsets.retention.minutes (10080).
	OffsetsRetentionMinutes int32
	// OffsetsRetentionCheckIntervalMs is offsets.retention.check.interval.ms (600000).
	OffsetsRetentionCheckIntervalMs int64
	// OffsetMetadataMaxBytes is offset.metadata.max.bytes (4096): the
	// longest metadata string a commit may carry.
	OffsetMetadataMaxBytes int32
	// OffsetCommitTimeoutMs is offsets.commit.timeout.ms (5000): how long
	// an append to __consumer_offsets may take before the request fails
	// with COORDINATOR_NOT_AVAILABLE.
	OffsetCommitTimeoutMs int32
	// MaxAppendBytes bounds the record batch one append carries when the
	// shard coalesces queued writes (Strata; default 1 MiB, below Kafka's
	// message.max.bytes). A single operation larger than this is still
	// appended whole.
	MaxAppendBytes int
}

// DefaultConfig returns Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		OffsetsTopicNumPartitions:       50,
		InitialRebalanceDelayMs:         3000,
		MinSessionTimeoutMs:             6000,
		MaxSessionTimeoutMs:             1800000,
		MaxSize:                         math.MaxInt32,
		NewMemberJoinTimeoutMs:          300000,
		ConsumerHeartbeatIntervalMs:     5000,
		ConsumerSessionTimeoutMs:        45000,
		ConsumerMaxSize:                 math.MaxInt32,
		ConsumerAssignors:               []string{AssignorUniform, AssignorRange},
		RebalanceProtocols:              []string{"classic", "consumer"},
		OffsetsRetentionMinutes:         10080,
		OffsetsRetentionCheckIntervalMs: 600000,
		OffsetMetadataMaxBytes:          4096,
		OffsetCommitTimeoutMs:           5000,
		MaxAppendBytes:                  1 << 20,
	}
}

// ErrConfig is returned by Config.Validate for an impossible setting.
var ErrConfig = errors.New("group: invalid configuration")

// Validate reports the first impossible setting.
func (c *Config) Validate() error {
	switch {
	case c.OffsetsTopicNumPartitions < 1:
		return fmt.Errorf("%w: offsets.topic.num.partitions %d < 1", ErrConfig, c.OffsetsTopicNumPartitions)
	case c.MinSessionTimeoutMs > c.MaxSessionTimeoutMs:
		return fmt.Errorf("%w: group.min.session.timeout.ms %d > group.max.session.timeout.ms %d", ErrConfig, c.MinSessionTimeoutMs, c.MaxSessionTimeoutMs)
	case c.MaxSize < 1 || c.ConsumerMaxSize < 1:
		return fmt.Errorf("%w: group max size must be positive", ErrConfig)
	case c.ConsumerHeartbeatIntervalMs < 1 || c.ConsumerSessionTimeoutMs < 1:
		return fmt.Errorf("%w: group.consumer heartbeat and session timeouts must be positive", ErrConfig)
	case c.OffsetsRetentionMinutes < 1 || c.OffsetsRetentionCheckIntervalMs < 1:
		return fmt.Errorf("%w: offsets retention settings must be positive", ErrConfig)
	case len(c.ConsumerAssignors) == 0:
		return fmt.Errorf("%w: group.consumer.assignors is empty", ErrConfig)
	}
	for _, a := range c.ConsumerAssignors {
		if a != AssignorUniform && a != AssignorRange {
			return fmt.Errorf("%w: group.consumer.assignors: unknown assignor %q", ErrConfig, a)
		}
	}
	return nil
}

func (c *Config) consumerProtocolEnabled() bool {
	for _, p := range c.RebalanceProtocols {
		if p == "consumer" {
			return true
		}
	}
	return false
}

func (c *Config) offsetsRetention() time.Duration {
	return time.Duration(c.OffsetsRetentionMinutes) * time.Minute
}

func ms(v int32) time.Duration   { return time.Duration(v) * time.Millisecond }
func ms64(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
