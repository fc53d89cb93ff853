package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// Preferred-leader elections, automatic (auto.leader.rebalance.enable)
// and asked for (ElectLeaders), and unclean elections asked for.

// ElectTarget names a partition to elect a leader for.
type ElectTarget struct {
	Topic     string
	Partition int32
}

// ElectResult is the election of one partition: nil, or an error that
// wraps ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
// ELIGIBLE_LEADERS_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION.
type ElectResult struct {
	ElectTarget
	Err error
}

// ElectLeaders elects the preferred leader (the first replica, if it may
// lead), or with unclean a leader of partitions without one, out of the
// ISR if need be (ElectLeaders, API 43). Nil targets are every partition,
// and then the partitions that need no election are left out of the
// results, as Kafka does.
func (c *Controller) ElectLeaders(ctx context.Context, unclean bool, targets []ElectTarget) ([]ElectResult, error) {
	var results []ElectResult
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		var records []metadata.Record
		records, results = planElectLeaders(img, c.cfg.Policy, unclean, targets)
		return records, nil
	})
	return results, err
}

// planElectLeaders plans ElectLeaders as Kafka's ReplicationControlManager
// does: ELECTION_NOT_NEEDED for a preferred election of a partition its
// preferred replica leads, or an unclean one of a partition with a leader;
// PREFERRED_LEADER_NOT_AVAILABLE or ELIGIBLE_LEADERS_NOT_AVAILABLE when
// no one can be elected.
func planElectLeaders(img *metadata.Image, pol Policy, unclean bool, targets []ElectTarget) ([]metadata.Record, []ElectResult) {
	all := targets == nil
	if all {
		eachPartition(img, func(t *metadata.Topic, index int32, _ *metadata.Partition) {
			targets = append(targets, ElectTarget{t.Name, index})
		})
	}
	var records []metadata.Record
	var results []ElectResult
	for _, target := range targets {
		rec, err := planElection(img, pol, unclean, target)
		if rec != nil {
			records = append(records, metadata.Record{PartitionChange: rec})
		}
		if all && errors.Is(err, kerr.ElectionNotNeeded) {
			continue
		}
		results = append(results, ElectResult{target, err})
	}
	return records, results
}

// planElection plans the election of one partition.
func planElection(img *metadata.Image, pol Policy, unclean bool, target ElectTarget) (*metadata.PartitionChangeRecord, error) {
	t, p, ok := img.Partition(target.Topic, target.Partition)
	if !ok {
		return nil, fmt.Errorf("%w: %s-%d", kerr.UnknownTopicOrPartition, target.Topic, target.Partition)
	}
	switch {
	case !unclean && len(p.Replicas) > 0 && p.Leader == p.Replicas[0]:
		return nil, fmt.Errorf("%w: %s-%d is led by its preferred replica %d", kerr.ElectionNotNeeded, target.Topic, target.Partition, p.Leader)
	case unclean && p.Leader >= 0:
		return nil, fmt.Errorf("%w: %s-%d has a leader, %d", kerr.ElectionNotNeeded, target.Topic, target.Partition, p.Leader)
	}
	c := newChange(img, pol, t, target.Partition, p)
	c.election = electPreferred
	if unclean {
		c.election = electUnclean
	}
	rec := c.build()
	switch {
	case !unclean && (rec == nil || rec.Leader == nil || len(p.Replicas) == 0 || *rec.Leader != p.Replicas[0]):
		return nil, fmt.Errorf("%w: %s-%d's preferred replica %d is not alive and in sync", kerr.PreferredLeaderNotAvailable, target.Topic, target.Partition, p.Replicas[0])
	case unclean && (rec == nil || rec.Leader == nil || *rec.Leader < 0):
		return nil, fmt.Errorf("%w: %s-%d has no live replica", kerr.EligibleLeadersNotAvailable, target.Topic, target.Partition)
	}
	return rec, nil
}

// rebalanceClock says when the next automatic check of the leaders'
// balance is due: every interval, from the first tick on.
type rebalanceClock struct {
	interval time.Duration
	next     time.Time
}

// due reports whether a check is due at now, and if so schedules the next.
func (r *rebalanceClock) due(now time.Time) bool {
	if r.next.IsZero() {
		r.next = now.Add(r.interval)
		return false
	}
	if now.Before(r.next) {
		return false
	}
	r.next = now.Add(r.interval)
	return true
}

// planRebalance is Kafka's automatic preferred-leader election
// (checkAndTriggerAutoLeaderRebalance): for each broker, the partitions
// whose preferred replica it is but that another leads; when they are
// more than percent of the partitions it prefers, each whose preferred
// replica may lead gets it back.
func planRebalance(img *metadata.Image, pol Policy, percent int) []metadata.Record {
	preferred := map[int32][]ElectTarget{}
	imbalanced := map[int32][]ElectTarget{}
	eachPartition(img, func(t *metadata.Topic, index int32, p *metadata.Partition) {
		if len(p.Replicas) == 0 {
			return
		}
		r := p.Replicas[0]
		preferred[r] = append(preferred[r], ElectTarget{t.Name, index})
		if p.Leader != r {
			imbalanced[r] = append(imbalanced[r], ElectTarget{t.Name, index})
		}
	})
	var records []metadata.Record
	for _, r := range slices.Sorted(maps.Keys(imbalanced)) {
		if !img.Brokers[r].Eligible() || len(imbalanced[r])*100 <= percent*len(preferred[r]) {
			continue
		}
		for _, target := range imbalanced[r] {
			if rec, err := planElection(img, pol, false, target); err == nil {
				records = append(records, metadata.Record{PartitionChange: rec})
			}
		}
	}
	return records
}
