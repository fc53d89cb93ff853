package group

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/coordinator"
)

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
// __consumer_offsets partition the group hashes to, run by a
// coordinator.Runtime; a partition not loaded on this broker answers
// NOT_COORDINATOR, one still loading answers COORDINATOR_LOAD_IN_PROGRESS.
type Coordinator struct {
	cfg    Config
	log    *slog.Logger
	topics TopicMetadata
	rt     *coordinator.Runtime[*state]
}

// NewCoordinator returns a coordinator with no partition loaded. cfg must
// pass Validate.
func NewCoordinator(cfg Config, deps Deps) *Coordinator {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	c := &Coordinator{cfg: cfg, log: deps.Logger, topics: deps.Topics}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.topics == nil {
		c.topics = noTopics{}
	}
	c.rt = coordinator.New(coordinator.Options[*state]{
		Name:           "group coordinator",
		Clock:          deps.Clock,
		Logger:         c.log,
		New:            func(partition, _ int32) *state { return c.newState(partition) },
		Loaded:         func(sh *shard) { sh.Machine().onLoaded() },
		Unloaded:       func(sh *shard) { sh.Machine().onUnloaded() },
		MaxAppendBytes: cfg.MaxAppendBytes,
		AppendTimeout:  ms(cfg.OffsetCommitTimeoutMs),
	})
	return c
}

// shard is one loaded __consumer_offsets partition, as the runtime runs it.
type shard = coordinator.Shard[*state]

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
func (c *Coordinator) Load(partition int32, p coordinator.Partition) {
	c.rt.Load(partition, 0, p)
}

// Unload stops serving partition, whose leadership this broker lost: its
// groups are dropped, pending requests are answered NOT_COORDINATOR, and
// later requests get NOT_COORDINATOR.
func (c *Coordinator) Unload(partition int32) { c.rt.Unload(partition) }

// Close unloads every partition; afterwards every request gets
// COORDINATOR_NOT_AVAILABLE.
func (c *Coordinator) Close() { c.rt.Close() }

// event is a shard acquired for one event: its state, locked, until
// unlockEvent.
type event struct {
	*state
	sh *shard
}

// unlockEvent ends the event: the state's records are queued, deadlines
// armed, and the shard unlocked.
func (e event) unlockEvent() { e.sh.Release() }

// shardFor locks the shard serving groupID for one event, or returns the
// error code the request gets.
func (c *Coordinator) shardFor(groupID string) (event, int16) {
	sh, err := c.rt.Acquire(c.HashPartition(groupID))
	if err != nil {
		return event{}, codeOf(err)
	}
	return event{sh.Machine(), sh}, 0
}

// lockEvent locks sh for one event, or returns the error code a request
// gets.
func lockEvent(sh *shard) (event, int16) {
	if err := sh.Acquire(); err != nil {
		return event{}, codeOf(err)
	}
	return event{sh.Machine(), sh}, 0
}

// codeOf is the code of a runtime's *kerr.Error.
func codeOf(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}

// Error codes used throughout.
var (
	codeLoadInProgress          = kerr.CoordinatorLoadInProgress.Code
	codeCoordinatorNotAvailable = kerr.CoordinatorNotAvailable.Code
)

// errCode is the code a request gets when its append failed with err
// (coordinator.AppendError); 0 for nil.
func errCode(err error) int16 {
	if ke := coordinator.AppendError(err); ke != nil {
		return ke.Code
	}
	return 0
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

// randomUUID is 16 random bytes, the state's default source of member
// ids.
func randomUUID() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:])
	return u
}

// newClassicMemberID is Kafka's ClassicGroup.generateMemberId: the client
// id, or the group instance id, a dash and a random UUID made of u.
func newClassicMemberID(prefix string, u [16]byte) string {
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u[:])
	return prefix + "-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// newConsumerMemberID is Kafka's Uuid.randomUuid().toString(): 16 random
// bytes, u, in unpadded URL-safe base64.
func newConsumerMemberID(u [16]byte) string {
	return base64.RawURLEncoding.EncodeToString(u[:])
}

type noTopics struct{}

func (noTopics) TopicByName(string) (TopicInfo, bool) { return TopicInfo{}, false }
func (noTopics) TopicByID([16]byte) (TopicInfo, bool) { return TopicInfo{}, false }
func (noTopics) Topics() []TopicInfo                  { return nil }
