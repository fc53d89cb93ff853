package group

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
)

// OffsetsPartition is the seam to one __consumer_offsets partition this
// broker leads. The broker implements it over the partition's replica.
//
// Append and ReadBatches are called from one goroutine per loaded partition
// at a time, never both at once, and never with a lock of this package held.
type OffsetsPartition interface {
	// Append appends one record batch built by this package (magic v2,
	// CRC-32C, producer id -1, no compression; the broker sets the base
	// offset and leader epoch) and returns once it is committed, with
	// acks=all semantics, or failed. Errors should wrap the *kerr.Error
	// a produce would get (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS,
	// KAFKA_STORAGE_ERROR, ...); they become the coordinator errors Kafka
	// returns (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...). Append
	// must return when ctx ends. batch is not used after Append returns.
	Append(ctx context.Context, batch []byte) error
	// ReadBatches calls fn with each committed batch from offset from (0
	// means the log start), in offset order, until fn returns false or the
	// log ends. fn must not keep batch after it returns.
	ReadBatches(from int64, fn func(batch []byte) bool) error
}

// TopicInfo describes a topic for the server-side assignors and offset
// validation.
type TopicInfo struct {
	Name       string
	ID         [16]byte
	Partitions int32
}

// TopicMetadata is the broker's read-only view of topics. Methods are called
// with a shard's mutex held, from many goroutines; they must be cheap and
// must not call back into the Coordinator.
type TopicMetadata interface {
	TopicByName(name string) (TopicInfo, bool)
	TopicByID(id [16]byte) (TopicInfo, bool)
	// Topics lists every topic, internal ones included; it is used to
	// resolve KIP-848 regular expression subscriptions, at most every
	// regexRefreshInterval per group.
	Topics() []TopicInfo
}

// Deps is what the coordinator needs from the broker.
type Deps struct {
	// Clock supplies time and timers; nil means the system clock.
	Clock Clock
	// Logger receives the coordinator's log; nil discards it.
	Logger *slog.Logger
	// Topics resolves topics; nil means no topic exists, so KIP-848 groups
	// get empty assignments and commits are not checked against metadata.
	Topics TopicMetadata
}

// Client identifies the connection a request came on, for group members'
// metadata (DescribeGroups, ConsumerGroupDescribe). Host should be formatted
// as Kafka does, "/" followed by the client's IP address.
type Client struct {
	ID   string
	Host string
}

// Coordinator is the group coordinator of one broker. Its methods are safe
// for concurrent use. Requests for a group go to the shard of the
// __consumer_offsets partition the group hashes to; a partition not loaded
// on this broker answers NOT_COORDINATOR, one still loading answers
// COORDINATOR_LOAD_IN_PROGRESS.
type Coordinator struct {
	cfg    Config
	clock  Clock
	log    *slog.Logger
	topics TopicMetadata

	mu     sync.RWMutex
	shards map[int32]*shard
	closed bool
}

// NewCoordinator returns a coordinator with no partition loaded. cfg must
// pass Validate.
func NewCoordinator(cfg Config, deps Deps) *Coordinator {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	c := &Coordinator{
		cfg:    cfg,
		clock:  deps.Clock,
		log:    deps.Logger,
		topics: deps.Topics,
		shards: make(map[int32]*shard),
	}
	if c.clock == nil {
		c.clock = systemClock{}
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.topics == nil {
		c.topics = noTopics{}
	}
	return c
}

// HashPartition is the __consumer_offsets partition a group id belongs to:
// Kafka's abs(groupId.hashCode()) % offsets.topic.num.partitions, with
// Java's String.hashCode and Utils.abs. FindCoordinator answers with the
// leader of this partition.
func (c *Coordinator) HashPartition(groupID string) int32 {
	return partitionFor(groupID, c.cfg.OffsetsTopicNumPartitions)
}

// Load starts serving partition, which this broker now leads: its records
// are replayed in the background, and until that ends requests for its
// groups get COORDINATOR_LOAD_IN_PROGRESS. A shard already loaded for the
// partition is unloaded first. Load and Unload must be called in the order
// leadership changes happen.
func (c *Coordinator) Load(partition int32, p OffsetsPartition) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	old := c.shards[partition]
	s := newShard(c, partition, p)
	c.shards[partition] = s
	c.mu.Unlock()
	if old != nil {
		old.unload()
	}
	go s.load()
}

// Unload stops serving partition, whose leadership this broker lost: its
// groups are dropped, pending requests are answered NOT_COORDINATOR, and
// later requests get NOT_COORDINATOR.
func (c *Coordinator) Unload(partition int32) {
	c.mu.Lock()
	s := c.shards[partition]
	delete(c.shards, partition)
	c.mu.Unlock()
	if s != nil {
		s.unload()
	}
}

// Close unloads every partition; afterwards every request gets
// COORDINATOR_NOT_AVAILABLE.
func (c *Coordinator) Close() {
	c.mu.Lock()
	c.closed = true
	shards := c.shards
	c.shards = make(map[int32]*shard)
	c.mu.Unlock()
	for _, s := range shards {
		s.unload()
	}
}

// shardFor locks the shard serving groupID for one event, or returns the
// error code the request gets.
func (c *Coordinator) shardFor(groupID string) (*shard, int16) {
	c.mu.RLock()
	closed := c.closed
	s := c.shards[c.HashPartition(groupID)]
	c.mu.RUnlock()
	if closed {
		return nil, codeCoordinatorNotAvailable
	}
	if s == nil {
		return nil, codeNotCoordinator
	}
	if code := s.lockEvent(); code != 0 {
		return nil, code
	}
	return s, 0
}

// allShards returns the loaded and loading shards in partition order.
func (c *Coordinator) allShards() ([]*shard, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	shards := make([]*shard, 0, len(c.shards))
	for p := int32(0); p < c.cfg.OffsetsTopicNumPartitions; p++ {
		if s := c.shards[p]; s != nil {
			shards = append(shards, s)
		}
	}
	return shards, c.closed
}

// Error codes used throughout.
var (
	codeNotCoordinator          = kerr.NotCoordinator.Code
	codeLoadInProgress          = kerr.CoordinatorLoadInProgress.Code
	codeCoordinatorNotAvailable = kerr.CoordinatorNotAvailable.Code
)

// errCode maps an append's error to the code Kafka answers with
// (CoordinatorOperationExceptionHelper.handleOperationException and
// appendGroupMetadataErrorToResponseError).
func errCode(err error) int16 {
	if err == nil {
		return 0
	}
	if errors.Is(err, errUnloaded) || errors.Is(err, context.Canceled) {
		return codeNotCoordinator
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return codeCoordinatorNotAvailable
	}
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return kerr.UnknownServerError.Code
	}
	switch ke {
	case kerr.UnknownTopicOrPartition, kerr.NotEnoughReplicas, kerr.RequestTimedOut:
		return codeCoordinatorNotAvailable
	case kerr.NotLeaderForPartition, kerr.KafkaStorageError:
		return codeNotCoordinator
	case kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidFetchSize:
		return kerr.UnknownServerError.Code
	}
	return ke.Code
}

// wait returns the response sent on ch, or, if ctx ends first, the
// response timedOut builds. The request's state is not undone: a parked
// JoinGroup stays parked, as in Kafka when a client gives up.
func wait[T any](ctx context.Context, ch chan T, timedOut func() T) T {
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		return timedOut()
	}
}

// newClassicMemberID is Kafka's ClassicGroup.generateMemberId: the client
// id, or the group instance id, a dash and a random UUID.
func newClassicMemberID(prefix string) string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u[:])
	return prefix + "-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// newConsumerMemberID is Kafka's Uuid.randomUuid().toString(): 16 random
// bytes in unpadded URL-safe base64.
func newConsumerMemberID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	return base64.RawURLEncoding.EncodeToString(u[:])
}

type noTopics struct{}

func (noTopics) TopicByName(string) (TopicInfo, bool) { return TopicInfo{}, false }
func (noTopics) TopicByID([16]byte) (TopicInfo, bool) { return TopicInfo{}, false }
func (noTopics) Topics() []TopicInfo                  { return nil }
