package metadata

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// ErrInconsistent is returned when a record does not apply to the image (a
// partition of a topic that does not exist, say). A metadata log that
// produces it is corrupt: replay stops.
var ErrInconsistent = errors.New("metadata: record does not apply")

// Image is the cluster metadata at one offset of the metadata log. An Image
// is immutable: Apply returns a new one, sharing what did not change, so
// readers hold an *Image without locks.
type Image struct {
	ClusterID string
	// Offset is the metadata log offset of the last record applied, -1 for
	// the empty image.
	Offset int64

	Brokers    map[int32]*Broker
	Topics     map[string]*Topic
	TopicsByID map[UUID]*Topic
	// Configs holds dynamic configuration overrides by resource.
	Configs map[ConfigResource]map[string]string
	// NextProducerID is the first producer id not yet reserved.
	NextProducerID int64
	// ScramCredentials are the users' SCRAM credentials; Acls the ACL
	// bindings (see security.go).
	ScramCredentials map[ScramKey]ScramCredential
	Acls             map[Acl]struct{}
	// AclsVersion is one more than the offset of the last Apply that
	// changed Acls (0: none did), so that an authorizer built from them
	// can tell it is current: along one log it names one set of ACLs,
	// also when a snapshot is loaded in between (a count of changes would
	// not: replaying a snapshot counts only the ACLs it holds, and can
	// repeat a count that named another set).
	AclsVersion int64
	// ClientQuotas are the client quota values by entity (quotas.go);
	// QuotasVersion is one more than the offset of the last Apply that
	// changed them, for the reason AclsVersion is.
	ClientQuotas  map[QuotaEntity]map[string]float64
	QuotasVersion int64
	// Features are the finalized feature levels by name
	// (transaction.version), and FeaturesOffset the offset of the record
	// that last changed them (ApiVersions' FinalizedFeaturesEpoch), -1
	// when none did.
	Features       map[string]int16
	FeaturesOffset int64
	// quotasOwned is set inside Apply once ClientQuotas is this image's
	// own copy.
	quotasOwned bool
	// securityOwned is set inside Apply once ScramCredentials and Acls
	// are this image's own copies: an Apply without SCRAM or ACL records
	// shares them with the image before (a cluster's 10,000 ACLs are not
	// copied for every partition change).
	securityOwned bool

	// copied is set only inside Apply: the topics it copied so far.
	copied map[UUID]bool
}

// ConfigResource names a topic or a broker (an empty broker name is the
// cluster default).
type ConfigResource struct {
	Type int8
	Name string
}

// Broker is a registered broker.
type Broker struct {
	NodeID               int32
	Host                 string
	Port                 int32
	Listeners            []Endpoint
	Rack                 string
	IncarnationID        UUID
	Epoch                int64
	Fenced               bool
	InControlledShutdown bool
	// RegistrationOffset is the offset of the registration's record.
	RegistrationOffset int64
	// Features are the feature levels the broker supports.
	Features []Feature
}

// Endpoint returns the broker's listener of that name, or its client
// listener when it has none of that name.
func (b *Broker) Endpoint(name string) Endpoint {
	for _, l := range b.Listeners {
		if l.Name == name {
			return l
		}
	}
	return Endpoint{Name: name, Host: b.Host, Port: b.Port}
}

// Eligible reports whether the broker may lead or join an ISR: registered,
// unfenced and not shutting down.
func (b *Broker) Eligible() bool { return b != nil && !b.Fenced && !b.InControlledShutdown }

// Topic is a topic and its partitions, indexed by partition id.
type Topic struct {
	Name       string
	ID         UUID
	Partitions []Partition
}

// Partition is a partition's replica assignment and leadership.
type Partition struct {
	Replicas []int32
	// ISR is empty only when its last member was fenced (KIP-966): the
	// replicas that were in sync are then in ELR.
	ISR            []int32
	Leader         int32 // -1 when there is none
	LeaderEpoch    int32
	PartitionEpoch int32
	// AddingReplicas and RemovingReplicas are a reassignment in progress
	// (KIP-455), both empty when there is none: Replicas then holds the
	// target replicas followed by the removing ones, the adding replicas
	// fetch until they join the ISR, and the controller then drops the
	// removing ones.
	AddingReplicas   []int32
	RemovingReplicas []int32
	// ELR are KIP-966's eligible leader replicas: replicas that left the
	// ISR while it was smaller than min.insync.replicas and shut down
	// cleanly since, so that they hold every committed record (the high
	// watermark does not advance under min.insync.replicas). When the ISR
	// is empty the leader is elected from them.
	ELR []int32
	// LastKnownELR is the last leader of a partition left without a
	// leader, ISR or ELR (Kafka's "balanced" recovery elects it when it
	// returns).
	LastKnownELR []int32
}

// Reassigning reports whether a reassignment is in progress.
func (p *Partition) Reassigning() bool {
	return len(p.AddingReplicas) > 0 || len(p.RemovingReplicas) > 0
}

// Empty returns the image before any record.
func Empty() *Image {
	return &Image{
		Offset:         -1,
		FeaturesOffset: -1,
		Brokers:        map[int32]*Broker{},
		Topics:         map[string]*Topic{},
		TopicsByID:     map[UUID]*Topic{},
		Configs:        map[ConfigResource]map[string]string{},
	}
}

// Apply returns the image after the records, the last at log offset
// lastOffset. img is unchanged.
func (img *Image) Apply(lastOffset int64, records ...Record) (*Image, error) {
	next := *img
	// Copy the top-level maps once; records below copy what they change.
	next.Brokers = maps.Clone(img.Brokers)
	next.Topics = maps.Clone(img.Topics)
	next.TopicsByID = maps.Clone(img.TopicsByID)
	next.Configs = maps.Clone(img.Configs)
	next.Features = maps.Clone(img.Features)
	// Topics this Apply already copied are its own to change: a batch
	// creating a topic of 1,000 partitions copies it once, not per
	// partition.
	next.copied = map[UUID]bool{}
	for i := range records {
		if err := next.apply(&records[i], lastOffset); err != nil {
			return nil, err
		}
	}
	next.copied = nil
	next.quotasOwned, next.securityOwned = false, false
	next.Offset = lastOffset
	return &next, nil
}

func (img *Image) apply(r *Record, offset int64) error {
	switch {
	case r.Cluster != nil:
		img.ClusterID = r.Cluster.ClusterID
	case r.FeatureLevel != nil:
		if img.Features == nil {
			img.Features = map[string]int16{}
		}
		if r.FeatureLevel.Level == 0 {
			delete(img.Features, r.FeatureLevel.Name)
		} else {
			img.Features[r.FeatureLevel.Name] = r.FeatureLevel.Level
		}
		img.FeaturesOffset = offset
	case r.Broker != nil:
		b := r.Broker
		if b.Removed {
			delete(img.Brokers, b.NodeID)
			return nil
		}
		reg := b.RegistrationOffset
		if reg == 0 {
			reg = offset
		}
		img.Brokers[b.NodeID] = &Broker{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Listeners: b.Listeners, Rack: b.Rack,
			IncarnationID: b.IncarnationID, Epoch: b.Epoch, Fenced: b.Fenced,
			InControlledShutdown: b.InControlledShutdown, RegistrationOffset: reg, Features: b.Features}
	case r.BrokerChange != nil:
		c := r.BrokerChange
		old, ok := img.Brokers[c.NodeID]
		if !ok || old.Epoch != c.Epoch {
			return fmt.Errorf("%w: change of broker %d epoch %d, which is not registered at that epoch", ErrInconsistent, c.NodeID, c.Epoch)
		}
		b := *old
		if c.Fenced != nil {
			b.Fenced = *c.Fenced
		}
		if c.InControlledShutdown != nil {
			b.InControlledShutdown = *c.InControlledShutdown
		}
		img.Brokers[c.NodeID] = &b
	case r.Topic != nil:
		if _, ok := img.Topics[r.Topic.Name]; ok {
			return fmt.Errorf("%w: topic %q exists", ErrInconsistent, r.Topic.Name)
		}
		t := &Topic{Name: r.Topic.Name, ID: r.Topic.ID}
		img.Topics[t.Name] = t
		img.TopicsByID[t.ID] = t
		img.copied[t.ID] = true
	case r.Partition != nil:
		p := r.Partition
		t, err := img.copyTopic(p.TopicID)
		if err != nil {
			return err
		}
		if int(p.Partition) != len(t.Partitions) {
			return fmt.Errorf("%w: partition %d of %q after %d partitions", ErrInconsistent, p.Partition, t.Name, len(t.Partitions))
		}
		t.Partitions = append(t.Partitions, Partition{
			Replicas: p.Replicas, ISR: p.ISR, Leader: p.Leader,
			LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
			AddingReplicas: p.AddingReplicas, RemovingReplicas: p.RemovingReplicas,
			ELR: p.ELR, LastKnownELR: p.LastKnownELR,
		})
	case r.PartitionChange != nil:
		c := r.PartitionChange
		t, err := img.copyTopic(c.TopicID)
		if err != nil {
			return err
		}
		if c.Partition < 0 || int(c.Partition) >= len(t.Partitions) {
			return fmt.Errorf("%w: no partition %d of %q", ErrInconsistent, c.Partition, t.Name)
		}
		p := &t.Partitions[c.Partition]
		if c.Leader != nil && *c.Leader != p.Leader {
			p.Leader = *c.Leader
			p.LeaderEpoch++
		}
		if c.ISR != nil {
			p.ISR = c.ISR
		}
		if c.ELR != nil {
			p.ELR = c.ELR
		}
		if c.LastKnownELR != nil {
			p.LastKnownELR = c.LastKnownELR
		}
		if c.Replicas != nil {
			p.Replicas = c.Replicas
		}
		if c.AddingReplicas != nil {
			p.AddingReplicas = nonEmpty(*c.AddingReplicas)
		}
		if c.RemovingReplicas != nil {
			p.RemovingReplicas = nonEmpty(*c.RemovingReplicas)
		}
		p.PartitionEpoch++
	case r.Config != nil:
		c := r.Config
		res := ConfigResource{Type: c.ResourceType, Name: c.ResourceName}
		m := maps.Clone(img.Configs[res])
		if m == nil {
			m = map[string]string{}
		}
		if c.Value == nil {
			delete(m, c.Name)
		} else {
			m[c.Name] = *c.Value
		}
		if len(m) == 0 {
			delete(img.Configs, res)
		} else {
			img.Configs[res] = m
		}
	case r.RemoveTopic != nil:
		t, ok := img.TopicsByID[r.RemoveTopic.TopicID]
		if !ok {
			return fmt.Errorf("%w: no topic %s", ErrInconsistent, r.RemoveTopic.TopicID)
		}
		delete(img.Topics, t.Name)
		delete(img.TopicsByID, t.ID)
		delete(img.Configs, ConfigResource{Type: ResourceTopic, Name: t.Name})
	case r.ProducerIDs != nil:
		if r.ProducerIDs.NextProducerID < img.NextProducerID {
			return fmt.Errorf("%w: producer ids moving back to %d from %d", ErrInconsistent, r.ProducerIDs.NextProducerID, img.NextProducerID)
		}
		img.NextProducerID = r.ProducerIDs.NextProducerID
	default:
		if !img.applySecurity(r, offset) {
			return fmt.Errorf("%w: empty record", ErrInconsistent)
		}
	}
	return nil
}

// nonEmpty returns s, or nil when it is empty, so that "no reassignment"
// has one representation.
func nonEmpty(s []int32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return s
}

// copyTopic replaces the topic with a copy (with its own partitions slice)
// in both indexes and returns it, so the change does not show in older
// images.
func (img *Image) copyTopic(id UUID) (*Topic, error) {
	old, ok := img.TopicsByID[id]
	if !ok {
		return nil, fmt.Errorf("%w: no topic %s", ErrInconsistent, id)
	}
	if img.copied[id] {
		return old, nil
	}
	img.copied[id] = true
	t := &Topic{Name: old.Name, ID: old.ID, Partitions: slices.Clone(old.Partitions)}
	img.Topics[t.Name] = t
	img.TopicsByID[t.ID] = t
	return t, nil
}

// TopicNames returns the topic names in order.
func (img *Image) TopicNames() []string {
	names := slices.Collect(maps.Keys(img.Topics))
	sort.Strings(names)
	return names
}

// BrokerIDs returns the registered, unfenced brokers' ids in order.
func (img *Image) BrokerIDs() []int32 {
	var ids []int32
	for id, b := range img.Brokers {
		if !b.Fenced {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// BrokerIDsAll returns every registered broker's id, fenced or not, in
// order.
func (img *Image) BrokerIDsAll() []int32 { return slices.Sorted(maps.Keys(img.Brokers)) }

// Partition returns a partition, if it exists.
func (img *Image) Partition(topic string, partition int32) (*Topic, *Partition, bool) {
	t, ok := img.Topics[topic]
	if !ok || partition < 0 || int(partition) >= len(t.Partitions) {
		return t, nil, false
	}
	return t, &t.Partitions[partition], true
}

// TopicConfig returns a topic's dynamic overrides (nil when none). The map
// must not be modified.
func (img *Image) TopicConfig(topic string) map[string]string {
	return img.Configs[ConfigResource{Type: ResourceTopic, Name: topic}]
}

// Records returns records that rebuild the image when applied to the empty
// one: a snapshot of the image as records, as KRaft's snapshots are. They
// come in a fixed order (cluster, brokers, topics with their partitions,
// configuration, producer ids), so equal images give equal records.
func (img *Image) Records() []Record {
	var out []Record
	if img.ClusterID != "" {
		out = append(out, Record{Cluster: &ClusterRecord{ClusterID: img.ClusterID}})
	}
	for _, name := range slices.Sorted(maps.Keys(img.Features)) {
		out = append(out, Record{FeatureLevel: &FeatureLevelRecord{Name: name, Level: img.Features[name]}})
	}
	ids := slices.Sorted(maps.Keys(img.Brokers))
	for _, id := range ids {
		b := img.Brokers[id]
		out = append(out, Record{Broker: &BrokerRecord{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Listeners: b.Listeners, Rack: b.Rack,
			IncarnationID: b.IncarnationID, Epoch: b.Epoch, Fenced: b.Fenced,
			InControlledShutdown: b.InControlledShutdown, RegistrationOffset: b.RegistrationOffset, Features: b.Features}})
	}
	for _, name := range img.TopicNames() {
		t := img.Topics[name]
		out = append(out, Record{Topic: &TopicRecord{Name: t.Name, ID: t.ID}})
		for i, p := range t.Partitions {
			out = append(out, Record{Partition: &PartitionRecord{
				TopicID: t.ID, Partition: int32(i), Replicas: p.Replicas, ISR: p.ISR, Leader: p.Leader,
				LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ELR: p.ELR, LastKnownELR: p.LastKnownELR,
				AddingReplicas: p.AddingReplicas, RemovingReplicas: p.RemovingReplicas,
			}})
		}
	}
	resources := slices.SortedFunc(maps.Keys(img.Configs), func(a, b ConfigResource) int {
		if a.Type != b.Type {
			return int(a.Type) - int(b.Type)
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, res := range resources {
		for _, k := range slices.Sorted(maps.Keys(img.Configs[res])) {
			v := img.Configs[res][k]
			out = append(out, Record{Config: &ConfigRecord{ResourceType: res.Type, ResourceName: res.Name, Name: k, Value: &v}})
		}
	}
	if img.NextProducerID > 0 {
		out = append(out, Record{ProducerIDs: &ProducerIDsRecord{NodeID: -1, NextProducerID: img.NextProducerID}})
	}
	out = append(out, img.securityRecords()...)
	out = append(out, img.quotaRecords()...)
	return out
}

// WithOffset returns the image as it stands, at another offset: what an
// entry without records (a Raft leader's first) does to it.
func (img *Image) WithOffset(offset int64) *Image {
	next := *img
	next.Offset = offset
	return &next
}
