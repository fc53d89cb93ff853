package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// RegisterBroker registers a broker (BrokerRegistration) and returns its
// broker epoch.
func (c *Controller) RegisterBroker(ctx context.Context, reg Registration) (int64, error) {
	var epoch int64
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		records, e, err := planRegister(img, c.cfg.Policy, c.live, reg, c.cfg.Now(), c.cfg.NodeID)
		epoch = e
		return records, err
	})
	return epoch, err
}

// Heartbeat renews a broker's session (BrokerHeartbeat) and moves it
// through its states; see planHeartbeat.
func (c *Controller) Heartbeat(ctx context.Context, hb Heartbeat) (HeartbeatReply, error) {
	var reply HeartbeatReply
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		records, r, err := planHeartbeat(img, c.cfg.Policy, c.live, hb, c.cfg.Now())
		reply = r
		return records, err
	})
	return reply, err
}

// AlterPartition commits an ISR change a partition's leader asks for
// (AlterPartition) and returns the partition as it then is.
func (c *Controller) AlterPartition(ctx context.Context, req PartitionAlter) (AlterResult, error) {
	var res AlterResult
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		records, r, err := planAlterPartition(img, c.cfg.Policy, req)
		res = r
		return records, err
	})
	if err == nil && res.Leader != req.Leader {
		// The change completed a reassignment that removed the leader:
		// committed, and the leader is told to learn its successor from
		// the metadata, as Kafka's controller answers.
		return res, fmt.Errorf("%w: the ISR change completed a reassignment; %d leads %s-%d now", kerr.NewLeaderElected, res.Leader, req.Topic, req.Partition)
	}
	return res, err
}

// runFencer fences, while this node is the active controller, the brokers
// whose session expired; it checks a few times per session timeout. It
// also runs the automatic preferred-leader elections when they are due.
func (c *Controller) runFencer() {
	defer c.done.Done()
	t := time.NewTicker(max(c.cfg.SessionTimeout/8, 50*time.Millisecond))
	defer t.Stop()
	rebalance := rebalanceClock{interval: c.cfg.LeaderImbalanceCheckInterval}
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if _, active := c.Leader(); !active {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SessionTimeout)
		_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
			return planFenceExpired(img, c.cfg.Policy, c.live, c.cfg.Now()), nil
		})
		cancel()
		if err != nil && !IsNotController(err) {
			c.logger.Warn("fencing expired brokers", "err", err)
		}
		if c.cfg.AutoLeaderRebalance && rebalance.interval > 0 && rebalance.due(c.cfg.Now()) {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SessionTimeout)
			moved := 0
			_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
				records := planRebalance(img, c.cfg.Policy, c.cfg.LeaderImbalancePerBrokerPercentage)
				moved = len(records)
				return records, nil
			})
			cancel()
			switch {
			case err != nil && !IsNotController(err):
				c.logger.Warn("electing preferred leaders", "err", err)
			case err == nil && moved > 0:
				c.logger.Info("preferred leaders elected", "partitions", moved)
			}
		}
	}
}
