package controller

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// MaxTopicNameLength is Kafka's limit (249, so that partition directory
// names fit in 255 bytes).
const MaxTopicNameLength = 249

// MetadataTopic is the name of the metadata log's partition directory; no
// user topic may take it.
const MetadataTopic = "__cluster_metadata"

// TopicSpec is a topic to create.
type TopicSpec struct {
	Name              string
	NumPartitions     int32 // -1: num.partitions
	ReplicationFactor int16 // -1: default.replication.factor
	// Assignment, when set, gives each partition's replicas and overrides
	// NumPartitions and ReplicationFactor.
	Assignment [][]int32
	Configs    map[string]*string
}

// TopicResult is the outcome of creating one topic.
type TopicResult struct {
	ID                metadata.UUID
	NumPartitions     int32
	ReplicationFactor int16
	Err               error // wraps a *kerr.Error
}

// ValidateTopicName applies Kafka's rules for topic names.
func ValidateTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: topic name is empty", kerr.InvalidTopicException)
	case name == "." || name == "..":
		return fmt.Errorf("%w: topic name cannot be %q", kerr.InvalidTopicException, name)
	case len(name) > MaxTopicNameLength:
		return fmt.Errorf("%w: topic name is longer than %d characters", kerr.InvalidTopicException, MaxTopicNameLength)
	case name == MetadataTopic:
		return fmt.Errorf("%w: %s is reserved", kerr.InvalidTopicException, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%w: topic name %q contains %q; only ASCII alphanumerics, '.', '_' and '-' are allowed", kerr.InvalidTopicException, name, r)
		}
	}
	return nil
}

// collides reports Kafka's rule that topics differing only in '.' versus
// '_' collide in metric names: it returns the existing (or, in names, the
// earlier created) topic a new name collides with.
func collides(img *metadata.Image, names map[string]string, name string) string {
	norm := strings.ReplaceAll(name, ".", "_")
	if other, ok := names[norm]; ok {
		return other
	}
	for other := range img.Topics {
		if other != name && strings.ReplaceAll(other, ".", "_") == norm {
			return other
		}
	}
	return ""
}

// CreateTopics creates the topics (or, with validateOnly, only checks
// them), each independently: one topic's error does not stop the others.
// All the topics of one call are one proposal: one append to the metadata
// log, one sync.
func (c *Controller) CreateTopics(ctx context.Context, specs []TopicSpec, validateOnly bool) []TopicResult {
	results := make([]TopicResult, len(specs))
	// created indexes the specs the proposal creates: all of them until
	// plan runs, so that a proposal refused before planning (not the
	// active controller) fails every one.
	created := allIndexes(len(specs))
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		created = created[:0]
		names := map[string]string{} // normalized name → name, for this call
		var records []metadata.Record
		for i, spec := range specs {
			recs, res := c.planTopic(img, names, spec)
			results[i] = res
			if res.Err == nil {
				names[strings.ReplaceAll(spec.Name, ".", "_")] = spec.Name
				created = append(created, i)
				records = append(records, recs...)
			}
		}
		if validateOnly {
			return nil, nil
		}
		return records, nil
	})
	if err != nil {
		for _, i := range created {
			results[i] = TopicResult{Err: err}
		}
	}
	return results
}

// allIndexes returns 0..n-1.
func allIndexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// planTopic validates a topic spec and returns the records creating it.
// names holds the topics planned earlier in the same proposal, by
// normalized name.
func (c *Controller) planTopic(img *metadata.Image, names map[string]string, spec TopicSpec) ([]metadata.Record, TopicResult) {
	fail := func(err error) ([]metadata.Record, TopicResult) { return nil, TopicResult{Err: err} }
	if err := ValidateTopicName(spec.Name); err != nil {
		return fail(err)
	}
	if _, ok := img.Topics[spec.Name]; ok || names[strings.ReplaceAll(spec.Name, ".", "_")] == spec.Name {
		return fail(fmt.Errorf("%w: topic %q already exists", kerr.TopicAlreadyExists, spec.Name))
	}
	if other := collides(img, names, spec.Name); other != "" {
		return fail(fmt.Errorf("%w: topic %q collides with existing topic %q ('.' and '_' are equivalent in metric names)", kerr.InvalidTopicException, spec.Name, other))
	}
	brokers := img.BrokerIDs()
	assignment := spec.Assignment
	if len(assignment) > 0 {
		if spec.NumPartitions != -1 || spec.ReplicationFactor != -1 {
			return fail(fmt.Errorf("%w: both a replica assignment and a partition count or replication factor were given", kerr.InvalidRequest))
		}
		rf := len(assignment[0])
		for p, replicas := range assignment {
			if err := validateReplicas(img, replicas); err != nil {
				return fail(fmt.Errorf("partition %d: %w", p, err))
			}
			if len(replicas) != rf {
				return fail(fmt.Errorf("%w: partitions have different replication factors", kerr.InvalidReplicaAssignment))
			}
		}
	} else {
		n, rf := spec.NumPartitions, spec.ReplicationFactor
		if n == -1 {
			n = c.cfg.DefaultPartitions
		}
		if rf == -1 {
			rf = c.cfg.DefaultReplicationFactor
		}
		if n <= 0 {
			return fail(fmt.Errorf("%w: number of partitions must be larger than 0, or -1 for the default", kerr.InvalidPartitions))
		}
		if n > maxPartitionsPerRequest {
			return fail(fmt.Errorf("%w: %d partitions is more than the %d one request may create", kerr.InvalidPartitions, n, maxPartitionsPerRequest))
		}
		if rf <= 0 {
			return fail(fmt.Errorf("%w: replication factor must be larger than 0, or -1 for the default", kerr.InvalidReplicationFactor))
		}
		if int(rf) > len(brokers) {
			return fail(fmt.Errorf("%w: replication factor %d is larger than the %d available brokers", kerr.InvalidReplicationFactor, rf, len(brokers)))
		}
		assignment = placeReplicas(img, brokers, int(n), int(rf), rand.IntN(len(brokers)))
	}
	for key, value := range spec.Configs {
		if value == nil {
			return fail(fmt.Errorf("%w: null value for %s", kerr.InvalidConfig, key))
		}
		if err := c.cfg.ValidateTopicConfig(key, *value); err != nil {
			return fail(fmt.Errorf("%w: %v", kerr.InvalidConfig, err))
		}
	}
	id := metadata.NewUUID()
	records := []metadata.Record{{Topic: &metadata.TopicRecord{Name: spec.Name, ID: id}}}
	for p, replicas := range assignment {
		records = append(records, metadata.Record{Partition: &metadata.PartitionRecord{
			TopicID: id, Partition: int32(p), Replicas: replicas, ISR: slices.Clone(replicas), Leader: replicas[0],
		}})
	}
	keys := make([]string, 0, len(spec.Configs))
	for k := range spec.Configs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		records = append(records, metadata.Record{Config: &metadata.ConfigRecord{
			ResourceType: metadata.ResourceTopic, ResourceName: spec.Name, Name: k, Value: spec.Configs[k],
		}})
	}
	return records, TopicResult{ID: id, NumPartitions: int32(len(assignment)), ReplicationFactor: int16(len(assignment[0]))}
}

// maxPartitionsPerRequest bounds one creation, so a typo cannot make a
// million directories.
const maxPartitionsPerRequest = 100_000

func validateReplicas(img *metadata.Image, replicas []int32) error {
	if len(replicas) == 0 {
		return fmt.Errorf("%w: empty replica list", kerr.InvalidReplicaAssignment)
	}
	seen := map[int32]bool{}
	for _, r := range replicas {
		if _, ok := img.Brokers[r]; !ok {
			return fmt.Errorf("%w: broker %d is not registered", kerr.InvalidReplicaAssignment, r)
		}
		if seen[r] {
			return fmt.Errorf("%w: broker %d appears twice", kerr.InvalidReplicaAssignment, r)
		}
		seen[r] = true
	}
	return nil
}

// assignReplicas spreads partitions over brokers as Kafka's rack-unaware
// assignment does: leaders round-robin from a start index, followers
// shifted so that replicas of consecutive partitions land on different
// brokers.
func assignReplicas(brokers []int32, partitions, rf, start int) [][]int32 {
	n := len(brokers)
	out := make([][]int32, partitions)
	shift := start
	for p := 0; p < partitions; p++ {
		if p > 0 && p%n == 0 {
			shift++
		}
		first := (start + p) % n
		replicas := []int32{brokers[first]}
		for j := 0; j < rf-1; j++ {
			replicas = append(replicas, brokers[(first+1+(shift+j)%(n-1))%n])
		}
		out[p] = replicas
	}
	return out
}

// placeReplicas assigns replicas over the live brokers: rack-aware when
// any of them has a broker.rack, else as assignReplicas.
func placeReplicas(img *metadata.Image, brokers []int32, partitions, rf, start int) [][]int32 {
	racks := map[int32]string{}
	aware := false
	for _, id := range brokers {
		if b := img.Brokers[id]; b != nil && b.Rack != "" {
			racks[id] = b.Rack
			aware = true
		}
	}
	if !aware {
		return assignReplicas(brokers, partitions, rf, start)
	}
	return assignReplicasRackAware(rackAlternated(brokers, racks), racks, partitions, rf, start)
}

// rackAlternated orders brokers so that consecutive ones are on different
// racks where possible: racks in name order, each rack's brokers in id
// order, taking one broker of each rack in turn (Kafka's
// getRackAlternatedBrokerList). A broker without a rack counts as the rack
// "".
func rackAlternated(brokers []int32, racks map[int32]string) []int32 {
	byRack := map[string][]int32{}
	for _, id := range brokers {
		byRack[racks[id]] = append(byRack[racks[id]], id)
	}
	names := slices.Sorted(maps.Keys(byRack))
	var out []int32
	for i := 0; len(out) < len(brokers); i++ {
		for _, r := range names {
			if ids := byRack[r]; i < len(ids) {
				out = append(out, ids[i])
			}
		}
	}
	return out
}

// assignReplicasRackAware is Kafka's rack-aware assignment: leaders
// round-robin over the rack-alternated brokers from a start index; each
// further replica is the next broker, by the same shifting as
// assignReplicas, whose rack has no replica of the partition yet (once
// every rack has one, any broker without one).
func assignReplicasRackAware(arranged []int32, racks map[int32]string, partitions, rf, start int) [][]int32 {
	n := len(arranged)
	numRacks := len(slices.Compact(slices.Sorted(maps.Values(racks))))
	if len(racks) < n {
		numRacks++ // the brokers without a rack
	}
	out := make([][]int32, partitions)
	shift := 0
	for p := 0; p < partitions; p++ {
		if p > 0 && p%n == 0 {
			shift++
		}
		first := (start + p) % n
		leader := arranged[first]
		replicas := []int32{leader}
		usedRacks := map[string]bool{racks[leader]: true}
		used := map[int32]bool{leader: true}
		for k := 0; len(replicas) < rf; k++ {
			b := arranged[(first+1+(shift*numRacks+k)%(n-1))%n]
			if (!usedRacks[racks[b]] || len(usedRacks) == numRacks) && (!used[b] || len(used) == n) {
				if used[b] {
					continue
				}
				replicas = append(replicas, b)
				usedRacks[racks[b]] = true
				used[b] = true
			}
		}
		out[p] = replicas
	}
	return out
}

// TopicRef names a topic by name, or by id when the name is "".
type TopicRef struct {
	Name string
	ID   metadata.UUID
}

// DeleteResult is the outcome of deleting one topic: its name and id, and
// the error (wrapping a *kerr.Error).
type DeleteResult struct {
	TopicRef
	Err error
}

// DeleteTopics removes topics, each independently, in one proposal.
func (c *Controller) DeleteTopics(ctx context.Context, refs []TopicRef) []DeleteResult {
	results := make([]DeleteResult, len(refs))
	for i, ref := range refs {
		results[i].TopicRef = ref
	}
	deleted := allIndexes(len(refs)) // as created in CreateTopics
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		deleted = deleted[:0]
		var records []metadata.Record
		seen := map[metadata.UUID]bool{}
		for i, ref := range refs {
			results[i] = DeleteResult{TopicRef: ref}
			var t *metadata.Topic
			var ok bool
			if ref.Name != "" {
				if t, ok = img.Topics[ref.Name]; !ok {
					results[i].Err = fmt.Errorf("%w: topic %q does not exist", kerr.UnknownTopicOrPartition, ref.Name)
					continue
				}
			} else if t, ok = img.TopicsByID[ref.ID]; !ok {
				results[i].Err = fmt.Errorf("%w: no topic with id %s", kerr.UnknownTopicID, ref.ID)
				continue
			}
			results[i].TopicRef = TopicRef{Name: t.Name, ID: t.ID}
			if seen[t.ID] {
				continue // named twice: deleted once
			}
			seen[t.ID] = true
			deleted = append(deleted, i)
			records = append(records, metadata.Record{RemoveTopic: &metadata.RemoveTopicRecord{TopicID: t.ID}})
		}
		return records, nil
	})
	if err != nil {
		for _, i := range deleted {
			results[i].Err = err
		}
	}
	return results
}

// PartitionsSpec grows a topic to Count partitions, with Assignment for the
// new ones or (nil) an automatic one.
type PartitionsSpec struct {
	Topic      string
	Count      int32
	Assignment [][]int32
}

// CreatePartitions grows topics, each independently, in one proposal. It
// returns an error (wrapping a *kerr.Error) per spec.
func (c *Controller) CreatePartitions(ctx context.Context, specs []PartitionsSpec, validateOnly bool) []error {
	results := make([]error, len(specs))
	grown := allIndexes(len(specs)) // as created in CreateTopics
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		grown = grown[:0]
		var records []metadata.Record
		seen := map[string]bool{}
		for i, spec := range specs {
			if seen[spec.Topic] {
				results[i] = fmt.Errorf("%w: topic %q is named more than once", kerr.InvalidRequest, spec.Topic)
				continue
			}
			seen[spec.Topic] = true
			recs, err := planPartitions(img, spec)
			results[i] = err
			if err == nil {
				grown = append(grown, i)
				records = append(records, recs...)
			}
		}
		if validateOnly {
			return nil, nil
		}
		return records, nil
	})
	if err != nil {
		for _, i := range grown {
			results[i] = err
		}
	}
	return results
}

// planPartitions validates a PartitionsSpec and returns its records.
func planPartitions(img *metadata.Image, spec PartitionsSpec) ([]metadata.Record, error) {
	topic, count, assignment := spec.Topic, spec.Count, spec.Assignment
	t, ok := img.Topics[topic]
	if !ok {
		return nil, fmt.Errorf("%w: topic %q does not exist", kerr.UnknownTopicOrPartition, topic)
	}
	have := int32(len(t.Partitions))
	if count < have {
		return nil, fmt.Errorf("%w: topic %q has %d partitions, which is more than the requested %d", kerr.InvalidPartitions, topic, have, count)
	}
	if count == have {
		return nil, fmt.Errorf("%w: topic %q already has %d partitions", kerr.InvalidPartitions, topic, have)
	}
	if count-have > maxPartitionsPerRequest {
		return nil, fmt.Errorf("%w: too many new partitions", kerr.InvalidPartitions)
	}
	rf := len(t.Partitions[0].Replicas)
	if assignment != nil {
		if int32(len(assignment)) != count-have {
			return nil, fmt.Errorf("%w: %d assignments for %d new partitions", kerr.InvalidReplicaAssignment, len(assignment), count-have)
		}
		for _, replicas := range assignment {
			if err := validateReplicas(img, replicas); err != nil {
				return nil, err
			}
			if len(replicas) != rf {
				return nil, fmt.Errorf("%w: the topic's replication factor is %d", kerr.InvalidReplicaAssignment, rf)
			}
		}
	} else {
		brokers := img.BrokerIDs()
		if rf > len(brokers) {
			return nil, fmt.Errorf("%w: replication factor %d is larger than the %d available brokers", kerr.InvalidReplicationFactor, rf, len(brokers))
		}
		assignment = placeReplicas(img, brokers, int(count-have), rf, int(have)%len(brokers))
	}
	var records []metadata.Record
	for i, replicas := range assignment {
		records = append(records, metadata.Record{Partition: &metadata.PartitionRecord{
			TopicID: t.ID, Partition: have + int32(i), Replicas: replicas, ISR: slices.Clone(replicas), Leader: replicas[0],
		}})
	}
	return records, nil
}

// ConfigChange sets (Value non-nil) or removes (nil) one dynamic key.
type ConfigChange struct {
	Name  string
	Value *string
}

// AlterConfigs applies changes to a topic's or broker's dynamic
// configuration as one unit. With replace, keys not mentioned are removed
// (the legacy AlterConfigs API's semantics).
func (c *Controller) AlterConfigs(ctx context.Context, resourceType int8, resourceName string, changes []ConfigChange, replace, validateOnly bool) error {
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		validate := c.cfg.ValidateTopicConfig
		switch resourceType {
		case metadata.ResourceTopic:
			if _, ok := img.Topics[resourceName]; !ok {
				return nil, fmt.Errorf("%w: topic %q does not exist", kerr.UnknownTopicOrPartition, resourceName)
			}
		case metadata.ResourceBroker:
			if resourceName != "" && resourceName != fmt.Sprint(c.cfg.NodeID) {
				if _, ok := img.Brokers[parseNodeID(resourceName)]; !ok {
					return nil, fmt.Errorf("%w: unknown broker %q", kerr.InvalidRequest, resourceName)
				}
			}
			validate = c.cfg.ValidateBrokerConfig
		default:
			return nil, fmt.Errorf("%w: resource type %d", kerr.InvalidRequest, resourceType)
		}
		var records []metadata.Record
		mentioned := map[string]bool{}
		for _, ch := range changes {
			mentioned[ch.Name] = true
			if ch.Value != nil {
				if err := validate(ch.Name, *ch.Value); err != nil {
					return nil, fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
				}
			}
			records = append(records, metadata.Record{Config: &metadata.ConfigRecord{
				ResourceType: resourceType, ResourceName: resourceName, Name: ch.Name, Value: ch.Value,
			}})
		}
		if replace {
			current := img.Configs[metadata.ConfigResource{Type: resourceType, Name: resourceName}]
			keys := make([]string, 0, len(current))
			for k := range current {
				if !mentioned[k] {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				records = append(records, metadata.Record{Config: &metadata.ConfigRecord{
					ResourceType: resourceType, ResourceName: resourceName, Name: k,
				}})
			}
		}
		if validateOnly {
			return nil, nil
		}
		return records, nil
	})
	return err
}

func parseNodeID(s string) int32 {
	var id int32
	if _, err := fmt.Sscan(s, &id); err != nil {
		return -1
	}
	return id
}
