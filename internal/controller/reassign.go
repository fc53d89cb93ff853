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
//  2. Each change of the partition (above all the leader's AlterPartition
//     adding a caught-up replica to the ISR) checks whether the ISR, less
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
		records, errs := planReassignments(img, specs, allowRFChange)
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
func planReassignments(img *metadata.Image, specs []Reassignment, allowRFChange bool) ([]metadata.Record, []error) {
	errs := make([]error, len(specs))
	var records []metadata.Record
	for i, spec := range specs {
		rec, err := planReassignment(img, spec, allowRFChange)
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
func planReassignment(img *metadata.Image, spec Reassignment, allowRFChange bool) (*metadata.Record, error) {
	t, ok := img.Topics[spec.Topic]
	if !ok {
		return nil, fmt.Errorf("%w: unable to find a topic named %s", kerr.UnknownTopicOrPartition, spec.Topic)
	}
	_, p, ok := img.Partition(spec.Topic, spec.Partition)
	if !ok {
		return nil, fmt.Errorf("%w: unable to find partition %s:%d", kerr.UnknownTopicOrPartition, spec.Topic, spec.Partition)
	}
	if spec.Replicas == nil {
		return planCancelReassignment(img, t, spec.Partition, p)
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
	target := partitionTarget{
		replicas: append(slices.Clone(spec.Replicas), removing...),
		isr:      p.ISR,
		adding:   adding,
		removing: removing,
	}
	return recordOf(buildPartitionChange(img, t.ID, spec.Partition, p, target)), nil
}

// planCancelReassignment reverts a reassignment in progress.
func planCancelReassignment(img *metadata.Image, t *metadata.Topic, index int32, p *metadata.Partition) (*metadata.Record, error) {
	if !p.Reassigning() {
		return nil, fmt.Errorf("%w: no reassignment of %s:%d is in progress", kerr.NoReassignmentInProgress, t.Name, index)
	}
	target := partitionTarget{
		replicas: difference(p.Replicas, p.AddingReplicas),
		isr:      difference(p.ISR, p.AddingReplicas),
	}
	if len(target.replicas) == 0 {
		return nil, fmt.Errorf("%w: the reassignment of %s:%d adds every replica", kerr.InvalidReplicaAssignment, t.Name, index)
	}
	if len(target.isr) == 0 {
		if !uncleanElectionEnabled(img, t.Name) {
			return nil, fmt.Errorf("%w: unable to revert the reassignment of %s:%d because it would require an unclean leader election",
				kerr.InvalidReplicaAssignment, t.Name, index)
		}
		target.isr = target.replicas[:1]
	}
	return recordOf(buildPartitionChange(img, t.ID, index, p, target)), nil
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

// uncleanElectionEnabled reads unclean.leader.election.enable for a topic:
// its own override, else the cluster-wide dynamic default.
func uncleanElectionEnabled(img *metadata.Image, topic string) bool {
	const key = "unclean.leader.election.enable"
	if v, ok := img.TopicConfig(topic)[key]; ok {
		return v == "true"
	}
	return img.Configs[metadata.ConfigResource{Type: metadata.ResourceBroker}][key] == "true"
}

// planReassigningISR is planAlterPartition's record for an ISR change of a
// partition being reassigned: the change, completing the reassignment
// when the new ISR allows.
func planReassigningISR(img *metadata.Image, t *metadata.Topic, index int32, p *metadata.Partition, isr []int32) ([]metadata.Record, AlterResult) {
	target := partitionTarget{replicas: p.Replicas, isr: isr, adding: p.AddingReplicas, removing: p.RemovingReplicas}
	change := buildPartitionChange(img, t.ID, index, p, target)
	current := AlterResult{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: p.ISR}
	if change == nil {
		return nil, current
	}
	next, err := img.Apply(img.Offset, metadata.Record{PartitionChange: change})
	if err != nil {
		panic(fmt.Sprintf("controller: invariant: a planned partition change does not apply: %v", err))
	}
	_, np, _ := next.Partition(t.Name, index)
	return []metadata.Record{{PartitionChange: change}},
		AlterResult{Leader: np.Leader, LeaderEpoch: np.LeaderEpoch, PartitionEpoch: np.PartitionEpoch, ISR: np.ISR}
}

// partitionTarget is where a change takes a partition: Kafka's
// PartitionChangeBuilder targets, for the changes reassignment makes.
type partitionTarget struct {
	replicas, isr, adding, removing []int32
}

// buildPartitionChange returns the change taking p to target, or nil when
// there is none. A reassignment the target's ISR completes is completed in
// the same change; a leader that is not in the resulting ISR (or is
// fenced) is replaced by the first replica, in replica order, that is in
// the ISR and eligible, or by none (-1).
func buildPartitionChange(img *metadata.Image, topicID metadata.UUID, index int32, p *metadata.Partition, target partitionTarget) *metadata.PartitionChangeRecord {
	if len(target.adding) > 0 || len(target.removing) > 0 {
		isr := difference(target.isr, target.removing)
		replicas := difference(target.replicas, target.removing)
		if len(isr) > 0 && len(replicas) > 0 && len(difference(replicas, isr)) == 0 {
			target = partitionTarget{replicas: replicas, isr: isr}
		}
	}
	change := &metadata.PartitionChangeRecord{TopicID: topicID, Partition: index}
	changed := false
	if leader := electReassignedLeader(img, p.Leader, target); leader != p.Leader {
		change.Leader = &leader
		changed = true
	}
	if !slices.Equal(target.isr, p.ISR) && len(target.isr) > 0 {
		change.ISR = slices.Clone(target.isr)
		changed = true
	}
	if !slices.Equal(target.replicas, p.Replicas) {
		change.Replicas = slices.Clone(target.replicas)
		changed = true
	}
	if !slices.Equal(target.adding, p.AddingReplicas) {
		adding := slices.Clone(target.adding)
		if adding == nil {
			adding = []int32{}
		}
		change.AddingReplicas = &adding
		changed = true
	}
	if !slices.Equal(target.removing, p.RemovingReplicas) {
		removing := slices.Clone(target.removing)
		if removing == nil {
			removing = []int32{}
		}
		change.RemovingReplicas = &removing
		changed = true
	}
	if !changed {
		return nil
	}
	return change
}

// electReassignedLeader keeps the current leader while it is in the
// target ISR and not fenced, else picks the first eligible replica in the
// target ISR, or -1.
func electReassignedLeader(img *metadata.Image, current int32, target partitionTarget) int32 {
	if b := img.Brokers[current]; b != nil && !b.Fenced && slices.Contains(target.isr, current) && slices.Contains(target.replicas, current) {
		return current
	}
	for _, r := range target.replicas {
		if slices.Contains(target.isr, r) && img.Brokers[r].Eligible() {
			return r
		}
	}
	return -1
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
