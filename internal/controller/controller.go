// Package controller owns changes to the cluster metadata: it validates
// administrative requests against the current image, turns them into
// metadata records, makes the records durable in the metadata log, and
// publishes the resulting image.
//
// This is the single-node controller: the metadata log is a local partition
// log and the controller is the only writer. A Raft quorum will replace the
// Log implementation and keep everything above it.
//
// Errors returned to callers wrap a *kerr.Error, so the broker answers with
// the code a Kafka controller would, and the wrapped message.
//
// Lock order: Controller.mu, then whatever the Publish callback takes. The
// callback runs with mu held so that every listener sees images in order.
package controller

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

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

// Controller applies metadata changes. It is safe for concurrent use.
type Controller struct {
	cfg     Config
	log     Log
	logger  *slog.Logger
	publish func(old, new *metadata.Image)

	mu    sync.Mutex
	image *metadata.Image
}

// Open replays the log into an image, bootstraps a new cluster (cluster
// record, this broker's registration) when the log is empty, and returns
// the controller. publish is called with every new image, in order, and
// once with the replayed image before Open returns.
func Open(cfg Config, log Log, logger *slog.Logger, publish func(old, new *metadata.Image)) (*Controller, error) {
	c := &Controller{cfg: cfg, log: log, logger: logger, publish: publish, image: metadata.Empty()}
	start := time.Now()
	n := 0
	err := log.Replay(func(lastOffset int64, records []metadata.Record) error {
		img, err := c.image.Apply(lastOffset, records...)
		if err != nil {
			return fmt.Errorf("controller: replaying metadata at offset %d: %w", lastOffset, err)
		}
		c.image = img
		n += len(records)
		return nil
	})
	if err != nil {
		return nil, err
	}
	logger.Info("metadata log replayed", "records", n, "topics", len(c.image.Topics), "offset", c.image.Offset, "duration", time.Since(start).Round(time.Microsecond))
	publish(metadata.Empty(), c.image)
	if c.image.ClusterID == "" {
		id := cfg.ClusterID
		if id == "" {
			id = metadata.NewUUID().String()
		}
		if _, err := c.commit([]metadata.Record{{Cluster: &metadata.ClusterRecord{ClusterID: id}}}); err != nil {
			return nil, err
		}
		logger.Info("new cluster", "cluster.id", id)
	} else if cfg.ClusterID != "" && cfg.ClusterID != c.image.ClusterID {
		return nil, fmt.Errorf("controller: cluster.id %s does not match the metadata log's %s", cfg.ClusterID, c.image.ClusterID)
	}
	return c, nil
}

// Image returns the latest committed image.
func (c *Controller) Image() *metadata.Image {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.image
}

// commit makes records durable, applies them and publishes the image.
// c.mu must be held (or, in Open, c not yet shared).
func (c *Controller) commit(records []metadata.Record) (*metadata.Image, error) {
	// Apply first: a record that does not apply must never reach the log,
	// where it would stop every later replay.
	if _, err := c.image.Apply(c.image.Offset+int64(len(records)), records...); err != nil {
		return nil, fmt.Errorf("controller: invariant: proposed records do not apply: %w", err)
	}
	last, err := c.log.Append(records)
	if err != nil {
		return nil, fmt.Errorf("controller: writing metadata: %w", err)
	}
	img, err := c.image.Apply(last, records...)
	if err != nil {
		panic("controller: records applied before the append but not after: " + err.Error())
	}
	old := c.image
	c.image = img
	c.publish(old, img)
	return img, nil
}

// propose runs fn on the current image under the lock and commits the
// records it returns. fn's error is returned as is.
func (c *Controller) propose(fn func(img *metadata.Image) ([]metadata.Record, error)) (*metadata.Image, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	records, err := fn(c.image)
	if err != nil {
		return nil, err
	}
	if len(records) == 0 {
		return c.image, nil
	}
	return c.commit(records)
}

// RegisterBroker records this broker's endpoint, unless the image already
// has it as given.
func (c *Controller) RegisterBroker(host string, port int32, rack string) error {
	_, err := c.propose(func(img *metadata.Image) ([]metadata.Record, error) {
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
func (c *Controller) AllocateProducerIDs() (first int64, err error) {
	img, err := c.propose(func(img *metadata.Image) ([]metadata.Record, error) {
		return []metadata.Record{{ProducerIDs: &metadata.ProducerIDsRecord{
			NodeID: c.cfg.NodeID, NextProducerID: img.NextProducerID + ProducerIDBlockSize,
		}}}, nil
	})
	if err != nil {
		return 0, err
	}
	return img.NextProducerID - ProducerIDBlockSize, nil
}
