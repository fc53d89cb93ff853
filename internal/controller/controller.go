// Package controller owns changes to the cluster metadata. Metadata flows
// one way through it:
//
//		request ─▶ proposer ──records──▶ metadata log ──committed batches──▶ applier
//		           (validates against                                        │ image N+1
//		            latest image + pending)                                  ▼
//		                                                         publisher ─▶ Publish (broker.applyImage)
//
//	  - The proposer (propose) turns a request into records, validated against
//	    the latest image with its own pending proposals applied, hands them to
//	    the log and waits, with the request's context, until the applier has
//	    applied them and the publisher has published the image holding them.
//	    It holds its lock only while planning and handing over, never while
//	    waiting, and never calls the broker.
//	  - The applier is one goroutine that reads committed batches in order,
//	    applies them to the image, and completes the proposals waiting for
//	    them. It does no I/O.
//	  - The publisher is one goroutine that hands each new image, in order, to
//	    the Publish callback (the broker opens, leads and deletes partitions
//	    there). Images that arrive while a publication runs are coalesced: the
//	    callback gets the last published image and the newest one, and diffs
//	    them.
//
// This is the single-node controller: the metadata log is a local partition
// log and this node is always the active controller. A Raft quorum replaces
// the log's append with a proposal and its replay with the committed stream,
// and keeps everything above it.
//
// Errors returned to callers wrap a *kerr.Error, so the broker answers with
// the code a Kafka controller would, and the wrapped message.
//
// Lock order: Controller.mu (the proposer), then Controller.waitMu. The
// applier and publisher take waitMu only. No lock is held across the
// Publish callback.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// Log is the durable, ordered home of committed metadata records.
type Log interface {
	// Append makes the records durable as one unit and returns the
	// offset of the last one.
	Append(records []metadata.Record) (lastOffset int64, err error)
	// Replay calls fn with every committed record batch in order, each
	// with the offset of its last record.
	Replay(fn func(lastOffset int64, records []metadata.Record) error) error
}

// Config is what the controller needs of the server configuration.
type Config struct {
	NodeID                   int32
	ClusterID                string // used when the log is new; "" generates one
	DefaultPartitions        int32  // num.partitions
	DefaultReplicationFactor int16  // default.replication.factor
	// ValidateTopicConfig checks a topic-level key and value.
	ValidateTopicConfig func(key, value string) error
	// ValidateBrokerConfig checks a dynamic broker key and value.
	ValidateBrokerConfig func(key, value string) error
}

// Publish is called with every new image, in order, on the publisher's
// goroutine: old is the image published before (metadata.Empty() the first
// time), img the new one. Consecutive images may be coalesced, so img may
// be several batches past old.
type Publish func(old, img *metadata.Image)

// Controller applies metadata changes. It is safe for concurrent use.
type Controller struct {
	cfg    Config
	log    Log
	logger *slog.Logger

	// mu serializes the proposer: planning a change against pending and
	// handing it to the log.
	mu sync.Mutex
	// pending is the image with every proposal handed to the log applied,
	// valid while the applier has not applied proposal lastProposal yet.
	// c.mu guards both.
	pending      *metadata.Image
	lastProposal uint64

	committed chan committedBatch // log → applier

	waitMu sync.Mutex
	// applied is the newest image the applier built; published the newest
	// the publisher handed to Publish; appliedProposal the id of the last
	// of this controller's proposals the applier applied. waitMu guards
	// them.
	applied, published *metadata.Image
	appliedProposal    uint64
	// changed is closed and replaced whenever applied or published moves,
	// so waiters can select on it with their context.
	changed chan struct{}

	newImage chan struct{} // applier → publisher, capacity 1
	publish  Publish

	stop chan struct{}
	done sync.WaitGroup
}

// committedBatch is one committed unit of records.
type committedBatch struct {
	lastOffset int64
	records    []metadata.Record
	// proposal is the id this controller gave the batch when it proposed
	// it, 0 for batches proposed elsewhere.
	proposal uint64
}

// Open replays the log, starts the applier and the publisher, bootstraps a
// new cluster (its cluster record) when the log is empty, and returns once
// the replayed image has been published.
func Open(ctx context.Context, cfg Config, log Log, logger *slog.Logger, publish Publish) (*Controller, error) {
	c := &Controller{
		cfg: cfg, log: log, logger: logger, publish: publish,
		committed: make(chan committedBatch, 64),
		applied:   metadata.Empty(),
		published: metadata.Empty(),
		changed:   make(chan struct{}),
		newImage:  make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	start := time.Now()
	n := 0
	img := metadata.Empty()
	err := log.Replay(func(lastOffset int64, records []metadata.Record) error {
		next, err := img.Apply(lastOffset, records...)
		if err != nil {
			return fmt.Errorf("controller: replaying metadata at offset %d: %w", lastOffset, err)
		}
		img = next
		n += len(records)
		return nil
	})
	if err != nil {
		return nil, err
	}
	logger.Info("metadata log replayed", "records", n, "topics", len(img.Topics), "offset", img.Offset, "duration", time.Since(start).Round(time.Microsecond))
	c.applied = img
	c.done.Add(2)
	go c.runApplier()
	go c.runPublisher()
	c.signalPublisher()
	if err := c.waitPublished(ctx, img.Offset); err != nil {
		c.Close()
		return nil, err
	}

	switch {
	case img.ClusterID == "":
		id := cfg.ClusterID
		if id == "" {
			id = metadata.NewUUID().String()
		}
		_, err := c.propose(ctx, func(*metadata.Image) ([]metadata.Record, error) {
			return []metadata.Record{{Cluster: &metadata.ClusterRecord{ClusterID: id}}}, nil
		})
		if err != nil {
			c.Close()
			return nil, err
		}
		logger.Info("new cluster", "cluster.id", id)
	case cfg.ClusterID != "" && cfg.ClusterID != img.ClusterID:
		c.Close()
		return nil, fmt.Errorf("controller: cluster.id %s does not match the metadata log's %s", cfg.ClusterID, img.ClusterID)
	}
	return c, nil
}

// Close stops the applier and the publisher. A publication under way
// finishes first. Proposals still waiting fail with their context or with
// NOT_CONTROLLER.
func (c *Controller) Close() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	c.done.Wait()
}

// Image returns the latest published image: the one the broker acts on.
func (c *Controller) Image() *metadata.Image {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	return c.published
}

// errStopped is returned to proposals when the controller stops.
var errStopped = fmt.Errorf("%w: the controller is shutting down", kerr.NotController)

// propose runs plan against the latest image with the pending proposals
// applied, hands the records it returns to the log, and waits until they
// are applied and published. It returns the image right after the
// records (or the image plan saw, when it returns none). plan's error is
// returned as is.
func (c *Controller) propose(ctx context.Context, plan func(img *metadata.Image) ([]metadata.Record, error)) (*metadata.Image, error) {
	img, proposed, err := c.handOver(plan)
	if err != nil || !proposed {
		return img, err
	}
	if err := c.waitPublished(ctx, img.Offset); err != nil {
		return nil, err
	}
	return img, nil
}

// handOver plans a change under c.mu and hands its records to the log. It
// returns the image after the records and whether there were any.
func (c *Controller) handOver(plan func(img *metadata.Image) ([]metadata.Record, error)) (*metadata.Image, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	base := c.pending
	if applied, id := c.appliedState(); base == nil || id >= c.lastProposal {
		base = applied
	}
	records, err := plan(base)
	if err != nil || len(records) == 0 {
		return base, false, err
	}
	// Apply first: a record that does not apply must never reach the log,
	// where it would stop every later replay.
	next, err := base.Apply(base.Offset+int64(len(records)), records...)
	if err != nil {
		return nil, false, fmt.Errorf("controller: invariant: proposed records do not apply: %w", err)
	}
	last, err := c.log.Append(records)
	if err != nil {
		return nil, false, fmt.Errorf("%w: writing metadata: %v", kerr.UnknownServerError, err)
	}
	next.Offset = last
	c.lastProposal++
	c.pending = next
	// Handed over under c.mu, so batches reach the applier in log order.
	select {
	case c.committed <- committedBatch{lastOffset: last, records: records, proposal: c.lastProposal}:
	case <-c.stop:
		return nil, false, errStopped
	}
	return next, true, nil
}

// appliedState returns the newest applied image and the id of the last
// own proposal in it.
func (c *Controller) appliedState() (*metadata.Image, uint64) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	return c.applied, c.appliedProposal
}

// waitPublished blocks until an image at or past offset is published.
func (c *Controller) waitPublished(ctx context.Context, offset int64) error {
	for {
		c.waitMu.Lock()
		ok, changed := c.published.Offset >= offset, c.changed
		c.waitMu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for the metadata change to be applied: %v", kerr.RequestTimedOut, context.Cause(ctx))
		case <-c.stop:
			return errStopped
		}
	}
}

// notifyLocked wakes everything waiting on c.changed. c.waitMu must be
// held.
func (c *Controller) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// runApplier applies committed batches in order until Close.
func (c *Controller) runApplier() {
	defer c.done.Done()
	for {
		select {
		case <-c.stop:
			return
		case b := <-c.committed:
			c.apply(b)
		}
	}
}

// apply applies one committed batch. A batch that does not apply means
// the log and the image disagree, which nothing can repair at run time.
func (c *Controller) apply(b committedBatch) {
	c.waitMu.Lock()
	img, err := c.applied.Apply(b.lastOffset, b.records...)
	if err != nil {
		c.waitMu.Unlock()
		panic(fmt.Sprintf("controller: invariant: committed metadata at offset %d does not apply: %v", b.lastOffset, err))
	}
	c.applied = img
	if b.proposal != 0 {
		c.appliedProposal = b.proposal
	}
	c.notifyLocked()
	c.waitMu.Unlock()
	c.signalPublisher()
}

// signalPublisher tells the publisher a newer image is applied.
func (c *Controller) signalPublisher() {
	select {
	case c.newImage <- struct{}{}:
	default:
	}
}

// runPublisher hands images to Publish, in order, until Close.
func (c *Controller) runPublisher() {
	defer c.done.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-c.newImage:
		}
		c.waitMu.Lock()
		old, img := c.published, c.applied
		c.waitMu.Unlock()
		if img == old {
			continue
		}
		c.publish(old, img)
		c.waitMu.Lock()
		c.published = img
		c.notifyLocked()
		c.waitMu.Unlock()
	}
}

// RegisterBroker records this broker's endpoint, unless the image already
// has it as given.
func (c *Controller) RegisterBroker(ctx context.Context, host string, port int32, rack string) error {
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		b, ok := img.Brokers[c.cfg.NodeID]
		if ok && b.Host == host && b.Port == port && b.Rack == rack && !b.Fenced {
			return nil, nil
		}
		var epoch int64 = 1
		if ok {
			epoch = b.Epoch + 1
		}
		return []metadata.Record{{Broker: &metadata.BrokerRecord{NodeID: c.cfg.NodeID, Host: host, Port: port, Rack: rack, Epoch: epoch}}}, nil
	})
	return err
}

// ProducerIDBlockSize is how many producer ids one reservation takes, as in
// Kafka's ProducerIdsBlock.
const ProducerIDBlockSize = 1000

// AllocateProducerIDs reserves a block of producer ids and returns its
// first id. The reservation is durable before it returns, so ids are never
// handed out twice, even across restarts.
func (c *Controller) AllocateProducerIDs(ctx context.Context) (first int64, err error) {
	img, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		return []metadata.Record{{ProducerIDs: &metadata.ProducerIDsRecord{
			NodeID: c.cfg.NodeID, NextProducerID: img.NextProducerID + ProducerIDBlockSize,
		}}}, nil
	})
	if err != nil {
		return 0, err
	}
	return img.NextProducerID - ProducerIDBlockSize, nil
}

// IsNotController reports whether err means this node cannot take
// metadata changes now (not the active controller, or stopping).
func IsNotController(err error) bool { return errors.Is(err, kerr.NotController) }
