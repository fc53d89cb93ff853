package controller

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// Partition reassignment (KIP-455) as KRaft's ReplicationControlManager,
// PartitionReassignmentReplicas and PartitionReassignmentRevert run it:
//
//  1. AlterPartitionReassignments sets the target: the partition's replicas
//     become the target followed by the replicas being removed, with
//     AddingReplicas (target minus current) and RemovingReplicas (current
//     minus target). The adding replicas open the partition and fetch.
//  2. Every change of the partition, planned by the one change builder
//     (partitionChange, elect.go; above all the leader's AlterPartition
//     adding a caught-up replica to the ISR), checks whether the ISR, less
//     the removing replicas, now holds every remaining replica. When it
//     does, the same record drops the removing replicas from the replicas
//     and the ISR and clears the reassignment; a leader that was removed
//     hands over to the first remaining replica in the ISR, and its
//     AlterPartition is answered NEW_LEADER_ELECTED.
//  3. Brokers no longer among the replicas stop and delete their replica
//     (broker.applyImage).
//
// Cancelling (null replicas) reverts to the replicas before the
// reassignment: the adding ones leave the replicas and the ISR. If that
// leaves the ISR empty, the first original replica is made the ISR, which
// is an unclean election and needs unclean.leader.election.enable.
//
// Departure from Kafka: a change that shrinks the replicas without
// changing the leader does not bump the leader epoch (the image bumps it
// only with the leader); the removed replicas delete their copy as soon as
// they see the image, and the leader drops them from its followers.

// Reassignment is one partition of an AlterPartitionReassignments request:
// its target replicas, or nil to cancel the reassignment in progress.
type Reassignment struct {
	Topic     string
	Partition int32
	Replicas  []int32
}

// OngoingReassignment is a partition being reassigned, as
// ListPartitionReassignments reports it.
type OngoingReassignment struct {
	Topic     string
	Partition int32
	Replicas  []int32
	Adding    []int32
	Removing  []int32
}

// AlterPartitionReassignments starts, changes or cancels reassignments,
// each partition independently, all in one proposal. It returns an error
// (wrapping a *kerr.Error) per spec. With allowRFChange false (v1's
// AllowReplicationFactorChange), a target of another size than the
// partition's replication factor fails with INVALID_REPLICATION_FACTOR.
func (c *Controller) AlterPartitionReassignments(ctx context.Context, specs []Reassignment, allowRFChange bool) []error {
	results := make([]error, len(specs))
	planned := allIndexes(len(specs)) // as created in CreateTopics
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		records, errs := planReassignments(img, c.cfg.Policy, specs, allowRFChange)
		copy(results, errs)
		planned = planned[:0]
		for i, err := range errs {
			if err == nil {
				planned = append(planned, i)
			}
		}
		return records, nil
	})
	if err != nil {
		for _, i := range planned {
			results[i] = err
		}
	}
	return results
}

// ListPartitionReassignments returns the reassignments in progress in the
// latest image: of every partition when topics is nil, else of the
// partitions named (by topic), skipping unknown topics and partitions as
// Kafka does.
func (c *Controller) ListPartitionReassignments(topics map[string][]int32) []OngoingReassignment {
	return listReassignments(c.Image(), topics)
}

// planReassignments plans each spec against the image with the records of
// the specs before it applied, so a partition named twice ends where the
// last names it. It returns the records and an error per spec.
func planReassignments(img *metadata.Image, pol Policy, specs []Reassignment, allowRFChange bool) ([]metadata.Record, []error) {
	errs := make([]error, len(specs))
	var records []metadata.Record
	for i, spec := range specs {
		rec, err := planReassignment(img, pol, spec, allowRFChange)
		errs[i] = err
		if err != nil || rec == nil {
			continue
		}
		next, err := img.Apply(img.Offset, *rec)
		if err != nil {
			errs[i] = fmt.Errorf("%w: %v", kerr.UnknownServerError, err)
			continue
		}
		img = next
		records = append(records, *rec)
	}
	return records, errs
}

// planReassignment returns the record (nil when nothing changes) that
// starts, changes or (nil replicas) cancels a partition's reassignment.
func planReassignment(img *metadata.Image, pol Policy, spec Reassignment, allowRFChange bool) (*metadata.Record, error) {
	t, ok := img.Topics[spec.Topic]
	if !ok {
		return nil, fmt.Errorf("%w: unable to find a topic named %s", kerr.UnknownTopicOrPartition, spec.Topic)
	}
	_, p, ok := img.Partition(spec.Topic, spec.Partition)
	if !ok {
		return nil, fmt.Errorf("%w: unable to find partition %s:%d", kerr.UnknownTopicOrPartition, spec.Topic, spec.Partition)
	}
	if spec.Replicas == nil {
		return planCancelReassignment(img, pol, t, spec.Partition, p)
	}
	if err := validateTargetReplicas(img, spec.Replicas); err != nil {
		return nil, err
	}
	if rf := len(p.Replicas) - len(p.RemovingReplicas); !allowRFChange && len(spec.Replicas) != rf {
		return nil, fmt.Errorf("%w: the replication factor of %s:%d would change from %d to %d", kerr.InvalidReplicationFactor,
			spec.Topic, spec.Partition, rf, len(spec.Replicas))
	}
	// The current replicas include those a reassignment in progress is
	// adding: a new target that leaves them out removes them again.
	// Adding and removing are sorted, as Kafka's are.
	removing, adding := difference(p.Replicas, spec.Replicas), difference(spec.Replicas, p.Replicas)
	slices.Sort(removing)
	slices.Sort(adding)
	c := newChange(img, pol, t, spec.Partition, p)
	c.replicas, c.adding, c.removing = append(slices.Clone(spec.Replicas), removing...), adding, removing
	return recordOf(c.build()), nil
}

// planCancelReassignment reverts a reassignment in progress.
func planCancelReassignment(img *metadata.Image, pol Policy, t *metadata.Topic, index int32, p *metadata.Partition) (*metadata.Record, error) {
	if !p.Reassigning() {
		return nil, fmt.Errorf("%w: no reassignment of %s:%d is in progress", kerr.NoReassignmentInProgress, t.Name, index)
	}
	c := newChange(img, pol, t, index, p)
	c.replicas, c.isr, c.adding, c.removing = difference(p.Replicas, p.AddingReplicas), difference(p.ISR, p.AddingReplicas), nil, nil
	if len(c.replicas) == 0 {
		return nil, fmt.Errorf("%w: the reassignment of %s:%d adds every replica", kerr.InvalidReplicaAssignment, t.Name, index)
	}
	if len(c.isr) == 0 {
		if !pol.unclean(img, t.Name) {
			return nil, fmt.Errorf("%w: unable to revert the reassignment of %s:%d because it would require an unclean leader election",
				kerr.InvalidReplicaAssignment, t.Name, index)
		}
		c.isr = c.replicas[:1]
	}
	return recordOf(c.build()), nil
}

// validateTargetReplicas is Kafka's validateManualPartitionAssignment.
func validateTargetReplicas(img *metadata.Image, replicas []int32) error {
	if len(replicas) == 0 {
		return fmt.Errorf("%w: the manual partition assignment includes an empty replica list", kerr.InvalidReplicaAssignment)
	}
	seen := map[int32]bool{}
	for _, r := range replicas {
		if _, ok := img.Brokers[r]; !ok {
			return fmt.Errorf("%w: the manual partition assignment includes broker %d, but no such broker is registered", kerr.InvalidReplicaAssignment, r)
		}
		if seen[r] {
			return fmt.Errorf("%w: the manual partition assignment includes the broker %d more than once", kerr.InvalidReplicaAssignment, r)
		}
		seen[r] = true
	}
	return nil
}

// listReassignments is ListPartitionReassignments over an image.
func listReassignments(img *metadata.Image, topics map[string][]int32) []OngoingReassignment {
	var out []OngoingReassignment
	add := func(t *metadata.Topic, index int32) {
		if index < 0 || int(index) >= len(t.Partitions) {
			return
		}
		p := &t.Partitions[index]
		if p.Reassigning() {
			out = append(out, OngoingReassignment{Topic: t.Name, Partition: index, Replicas: p.Replicas,
				Adding: p.AddingReplicas, Removing: p.RemovingReplicas})
		}
	}
	if topics == nil {
		eachPartition(img, func(t *metadata.Topic, index int32, _ *metadata.Partition) { add(t, index) })
		return out
	}
	names := make([]string, 0, len(topics))
	for name := range topics {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t, ok := img.Topics[name]
		if !ok {
			continue
		}
		for _, index := range topics[name] {
			add(t, index)
		}
	}
	return out
}

// difference returns the members of a not in b, in a's order.
func difference(a, b []int32) []int32 {
	var out []int32
	for _, r := range a {
		if !slices.Contains(b, r) {
			out = append(out, r)
		}
	}
	return out
}

func recordOf(change *metadata.PartitionChangeRecord) *metadata.Record {
	if change == nil {
		return nil
	}
	return &metadata.Record{PartitionChange: change}
}
