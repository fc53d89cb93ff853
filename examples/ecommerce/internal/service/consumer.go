package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/examples/ecommerce/events"
)

// maxBatch bounds the records handed to a Handler at once, so a batch is
// processed well within the group's rebalance timeout.
const maxBatch = 100

// Handler processes records from one poll, in order within each partition.
// Its effects must be idempotent by order id, because after a crash the
// records since the last commit are delivered again. A nil return lets the
// records be committed; an error stops the consumer without committing them,
// and a restarted consumer gets them again.
type Handler func(ctx context.Context, records []*kgo.Record) error

// Consumer is one member of a consumer group reading one topic.
type Consumer struct {
	Client *kgo.Client
	logger *slog.Logger
}

// NewConsumer joins f.Group on topic. extra options are added to the client
// (a service that also produces passes producer options).
//
// The group's members share the topic's partitions with the cooperative
// sticky assignor: when a member joins or leaves, only the partitions that
// move are revoked, and the others keep consuming. Offsets are committed
// only for records the service has marked as processed (AutoCommitMarks),
// every f.CommitInterval, when partitions are revoked, and on shutdown.
// A group with no committed offset starts from the beginning of the topic,
// so a service deployed after orders arrived still sees them.
func NewConsumer(f *Flags, topic string, logger *slog.Logger, extra ...kgo.Opt) (*Consumer, error) {
	c := &Consumer{logger: logger.With("group", f.Group, "topic", topic)}
	opts := []kgo.Opt{
		kgo.SeedBrokers(f.Seeds()...),
		kgo.WithLogger(kgoLogger{c.logger}),
		kgo.ConsumerGroup(f.Group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(f.SessionTimeout),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(f.CommitInterval),
		// Between a poll and AllowRebalance no partition is taken away,
		// so the records we mark are records we still own.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.onAssigned),
		// Replacing the default revoke callback also replaces its commit,
		// so onRevoked commits itself.
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	c.Client = cl
	return c, nil
}

func (c *Consumer) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c.logger.Info("partitions assigned", "partitions", assigned)
}

// onRevoked commits what was processed of the partitions leaving us, so
// their next owner starts right after it.
func (c *Consumer) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	c.logger.Info("partitions revoked", "partitions", revoked)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		c.logger.Warn("committing before revoke failed; the next owner will see some records again", "err", err)
	}
}

// onLost does not commit: the partitions may already belong to someone else.
func (c *Consumer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.logger.Warn("partitions lost", "partitions", lost)
}

// Run polls and hands records to handle until ctx is cancelled or handle
// fails. Then it commits what was processed and leaves the group, so a
// clean stop redelivers nothing. After a SIGKILL none of this runs: the
// group notices the missing heartbeats after the session timeout, and a
// restarted consumer resumes from the last commit, at most one commit
// interval behind.
func (c *Consumer) Run(ctx context.Context, handle Handler) error {
	err := c.poll(ctx, handle)
	commitCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cerr := c.Client.CommitMarkedOffsets(commitCtx); cerr != nil {
		c.logger.Warn("final commit failed; the records since the last commit will be delivered again", "err", cerr)
	}
	c.Client.Close() // leaves the group
	return err
}

func (c *Consumer) poll(ctx context.Context, handle Handler) error {
	for {
		fetches := c.Client.PollRecords(ctx, maxBatch)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			c.Client.AllowRebalance()
			return nil
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			// franz-go retries what can be retried; these are for the log.
			c.logger.Warn("fetch error", "topic", topic, "partition", partition, "err", err)
		})
		records := fetches.Records()
		if len(records) > 0 {
			if err := handle(ctx, records); err != nil {
				c.Client.AllowRebalance()
				if ctx.Err() != nil {
					return nil // interrupted by shutdown; redelivered after restart
				}
				return fmt.Errorf("processing %d records: %w", len(records), err)
			}
			c.Client.MarkCommitRecords(records...)
		}
		c.Client.AllowRebalance()
	}
}

// startService opens a service's ledger and its consumer of topics[0],
// creating the topics it reads and writes if they are missing. The caller
// closes the ledger; Run closes the consumer.
func startService(ctx context.Context, f *Flags, logger *slog.Logger, topics []string, extra ...kgo.Opt) (*Ledger, *Consumer, error) {
	ledger, err := OpenLedger(f.Out)
	if err != nil {
		return nil, nil, err
	}
	c, err := NewConsumer(f, topics[0], logger, extra...)
	if err != nil {
		ledger.Close()
		return nil, nil, err
	}
	if err := EnsureTopics(ctx, c.Client, f.Partitions, topics...); err != nil {
		c.Client.Close()
		ledger.Close()
		return nil, nil, err
	}
	return ledger, c, nil
}

// onceEach runs a service that acts once on every OrderCreated: it writes
// line(order) to the ledger unless the order is there already. It starts
// by logging msg with the ledger's size as countKey.
func onceEach(ctx context.Context, f *Flags, logger *slog.Logger, msg, countKey string, line func(events.OrderCreated) string) error {
	ledger, c, err := startService(ctx, f, logger, []string{events.TopicOrdersCreated})
	if err != nil {
		return err
	}
	defer ledger.Close()
	logger.Info(msg, countKey, ledger.Len())
	return c.Run(ctx, func(ctx context.Context, records []*kgo.Record) error {
		for _, r := range records {
			order, err := events.DecodeOrderCreated(r.Value)
			if err != nil {
				logInvalid(logger, r, err)
				continue
			}
			if err := once(ledger, logger, r, order.OrderID, func() string { return line(order) }); err != nil {
				return err
			}
		}
		return ledger.Sync()
	})
}
