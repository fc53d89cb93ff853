// Package metadata defines the cluster metadata records and the image built
// by replaying them. It is pure data: no I/O, no goroutines.
//
// Cluster metadata is event-sourced, as in Kafka's KRaft: every change (a
// broker registering, a topic created, a partition's leader or ISR changing,
// a configuration set) is a Record appended to the metadata log, and every
// node's view of the cluster is the Image obtained by applying the committed
// records in order. The log is the partition __cluster_metadata-0, stored by
// internal/storage like any other partition; each Kafka record in it holds
// one Record, encoded as JSON in the record's value with the record type in
// its key:
//
//	key   = type name, e.g. "topic"
//	value = {"name":"orders","id":"…"}   (the type's struct, JSON)
//
// JSON keeps the log readable with any Kafka tool (kcat -C -t
// __cluster_metadata) and lets fields be added compatibly; the volume of
// metadata is small enough that its size does not matter.
package metadata

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrUnknownRecord is returned when decoding a record type this version does
// not know. Replay stops there rather than build a wrong image.
var ErrUnknownRecord = errors.New("metadata: unknown record type")

// Record is one metadata change. Exactly one of the pointers is set.
type Record struct {
	Broker          *BrokerRecord
	BrokerChange    *BrokerChangeRecord
	Topic           *TopicRecord
	Partition       *PartitionRecord
	PartitionChange *PartitionChangeRecord
	Config          *ConfigRecord
	RemoveTopic     *RemoveTopicRecord
	ProducerIDs     *ProducerIDsRecord
	Cluster         *ClusterRecord
	ScramCredential *ScramCredentialRecord
	Acl             *AclRecord
	ClientQuota     *ClientQuotaRecord
	FeatureLevel    *FeatureLevelRecord
}

// ClusterRecord is the first record of a metadata log.
type ClusterRecord struct {
	ClusterID string `json:"clusterId"`
}

// BrokerRecord registers a broker (Kafka's RegisterBrokerRecord), or
// removes it.
type BrokerRecord struct {
	NodeID int32  `json:"nodeId"`
	Host   string `json:"host"`
	Port   int32  `json:"port"`
	// Listeners are all the broker's endpoints, the client one (Host,
	// Port) first.
	Listeners []Endpoint `json:"listeners,omitempty"`
	Rack      string     `json:"rack,omitempty"`
	// IncarnationID is new at every start of the broker's process, so a
	// second process with the same node id is told apart.
	IncarnationID UUID `json:"incarnationId,omitzero"`
	// Epoch increases with each registration so stale heartbeats can be
	// told apart.
	Epoch  int64 `json:"epoch"`
	Fenced bool  `json:"fenced,omitempty"`
	// InControlledShutdown is set while the broker moves its leaderships
	// away before it stops.
	InControlledShutdown bool `json:"inControlledShutdown,omitempty"`
	// RegistrationOffset is the metadata offset of the registration, which
	// a broker must have applied before it is unfenced. 0 when the record
	// is the registration itself: the offset it is applied at.
	RegistrationOffset int64 `json:"registrationOffset,omitempty"`
	Removed            bool  `json:"removed,omitempty"`
	// Features are the feature levels the broker supports; none for a
	// broker from before features, which supports level 0 of each.
	Features []Feature `json:"features,omitempty"`
}

// Endpoint is one of a broker's listeners.
type Endpoint struct {
	Name string `json:"name"`
	Host string `json:"host"`
	Port int32  `json:"port"`
}

// BrokerChangeRecord fences, unfences or marks in controlled shutdown a
// registered broker (Kafka's BrokerRegistrationChangeRecord). Nil fields
// are unchanged. A record for another epoch than the registration's does
// not apply.
type BrokerChangeRecord struct {
	NodeID               int32 `json:"nodeId"`
	Epoch                int64 `json:"epoch"`
	Fenced               *bool `json:"fenced,omitempty"`
	InControlledShutdown *bool `json:"inControlledShutdown,omitempty"`
}

// TopicRecord creates a topic. Its partitions follow as PartitionRecords.
type TopicRecord struct {
	Name string `json:"name"`
	ID   UUID   `json:"id"`
}

// PartitionRecord creates a partition.
type PartitionRecord struct {
	TopicID        UUID    `json:"topicId"`
	Partition      int32   `json:"partition"`
	Replicas       []int32 `json:"replicas"`
	ISR            []int32 `json:"isr"`
	Leader         int32   `json:"leader"`
	LeaderEpoch    int32   `json:"leaderEpoch"`
	PartitionEpoch int32   `json:"partitionEpoch"`
	// AddingReplicas and RemovingReplicas are set while the partition is
	// being reassigned (KIP-455); see Partition.
	AddingReplicas   []int32 `json:"addingReplicas,omitempty"`
	RemovingReplicas []int32 `json:"removingReplicas,omitempty"`
	// ELR and LastKnownELR are KIP-966's eligible leader replicas and
	// last known leader (see Partition).
	ELR          []int32 `json:"eligibleLeaderReplicas,omitempty"`
	LastKnownELR []int32 `json:"lastKnownElr,omitempty"`
}

// PartitionChangeRecord changes a partition's leader, ISR, eligible leader
// replicas or replicas. Nil fields are unchanged; an empty, non-nil list
// empties the field (the ISR is empty while its last member is fenced,
// KIP-966). Any leader change bumps the leader epoch; every change bumps
// the partition epoch.
type PartitionChangeRecord struct {
	TopicID   UUID    `json:"topicId"`
	Partition int32   `json:"partition"`
	Leader    *int32  `json:"leader,omitempty"`
	ISR       []int32 `json:"isr,omitzero"`
	// ELR and LastKnownELR replace the partition's (see Partition).
	ELR          []int32 `json:"eligibleLeaderReplicas,omitzero"`
	LastKnownELR []int32 `json:"lastKnownElr,omitzero"`
	Replicas     []int32 `json:"replicas,omitempty"`
	// AddingReplicas and RemovingReplicas replace the partition's when
	// set; an empty list clears them (the reassignment completed or was
	// cancelled). They are pointers so that "unchanged" and "none" differ
	// in JSON.
	AddingReplicas   *[]int32 `json:"addingReplicas,omitempty"`
	RemovingReplicas *[]int32 `json:"removingReplicas,omitempty"`
}

// Resource types of a ConfigRecord, with Kafka's codes.
const (
	ResourceTopic  int8 = 2
	ResourceBroker int8 = 4
)

// ConfigRecord sets (or, with a nil value, removes) a dynamic configuration
// value of a topic or a broker. A broker resource with an empty name is the
// cluster-wide default.
type ConfigRecord struct {
	ResourceType int8    `json:"resourceType"`
	ResourceName string  `json:"resourceName"`
	Name         string  `json:"name"`
	Value        *string `json:"value"`
}

// RemoveTopicRecord deletes a topic and its partitions.
type RemoveTopicRecord struct {
	TopicID UUID `json:"topicId"`
}

// FeatureLevelRecord finalizes a feature at a level for the whole cluster
// (Kafka's FeatureLevelRecord); level 0 removes it. Brokers answer the
// finalized features in ApiVersions, and clients use what a feature
// enables only once it is finalized.
type FeatureLevelRecord struct {
	Name  string `json:"name"`
	Level int16  `json:"featureLevel"`
}

// ProducerIDsRecord reserves the producer ids below NextProducerID.
type ProducerIDsRecord struct {
	NodeID         int32 `json:"nodeId"`
	NextProducerID int64 `json:"nextProducerId"`
}

// recordTypes is the one table of record types: the name each has in the
// log and how to reach its struct in a Record.
var recordTypes = []struct {
	name string
	// get returns the record's struct and whether it is this type.
	get func(r *Record) (any, bool)
	// alloc sets a new, empty struct of this type in r and returns it.
	alloc func(r *Record) any
}{
	{"cluster", func(r *Record) (any, bool) { return r.Cluster, r.Cluster != nil },
		func(r *Record) any { r.Cluster = new(ClusterRecord); return r.Cluster }},
	{"broker", func(r *Record) (any, bool) { return r.Broker, r.Broker != nil },
		func(r *Record) any { r.Broker = new(BrokerRecord); return r.Broker }},
	{"brokerChange", func(r *Record) (any, bool) { return r.BrokerChange, r.BrokerChange != nil },
		func(r *Record) any { r.BrokerChange = new(BrokerChangeRecord); return r.BrokerChange }},
	{"topic", func(r *Record) (any, bool) { return r.Topic, r.Topic != nil },
		func(r *Record) any { r.Topic = new(TopicRecord); return r.Topic }},
	{"partition", func(r *Record) (any, bool) { return r.Partition, r.Partition != nil },
		func(r *Record) any { r.Partition = new(PartitionRecord); return r.Partition }},
	{"partitionChange", func(r *Record) (any, bool) { return r.PartitionChange, r.PartitionChange != nil },
		func(r *Record) any { r.PartitionChange = new(PartitionChangeRecord); return r.PartitionChange }},
	{"config", func(r *Record) (any, bool) { return r.Config, r.Config != nil },
		func(r *Record) any { r.Config = new(ConfigRecord); return r.Config }},
	{"removeTopic", func(r *Record) (any, bool) { return r.RemoveTopic, r.RemoveTopic != nil },
		func(r *Record) any { r.RemoveTopic = new(RemoveTopicRecord); return r.RemoveTopic }},
	{"producerIds", func(r *Record) (any, bool) { return r.ProducerIDs, r.ProducerIDs != nil },
		func(r *Record) any { r.ProducerIDs = new(ProducerIDsRecord); return r.ProducerIDs }},
	{"scramCredential", func(r *Record) (any, bool) { return r.ScramCredential, r.ScramCredential != nil },
		func(r *Record) any { r.ScramCredential = new(ScramCredentialRecord); return r.ScramCredential }},
	{"acl", func(r *Record) (any, bool) { return r.Acl, r.Acl != nil },
		func(r *Record) any { r.Acl = new(AclRecord); return r.Acl }},
	{"clientQuota", func(r *Record) (any, bool) { return r.ClientQuota, r.ClientQuota != nil },
		func(r *Record) any { r.ClientQuota = new(ClientQuotaRecord); return r.ClientQuota }},
	{"featureLevel", func(r *Record) (any, bool) { return r.FeatureLevel, r.FeatureLevel != nil },
		func(r *Record) any { r.FeatureLevel = new(FeatureLevelRecord); return r.FeatureLevel }},
}

// Encode returns the record's key (its type name) and value (JSON).
func (r *Record) Encode() (key, value []byte, err error) {
	for _, t := range recordTypes {
		if v, ok := t.get(r); ok {
			value, err = json.Marshal(v)
			return []byte(t.name), value, err
		}
	}
	return nil, nil, errors.New("metadata: empty record")
}

// Decode parses a record from its key and value.
func Decode(key, value []byte) (Record, error) {
	for _, t := range recordTypes {
		if t.name == string(key) {
			var r Record
			if err := json.Unmarshal(value, t.alloc(&r)); err != nil {
				return Record{}, fmt.Errorf("metadata: decoding %s record: %w", key, err)
			}
			return r, nil
		}
	}
	return Record{}, fmt.Errorf("%w: %q", ErrUnknownRecord, key)
}

// jsonRecord is a Record in JSON: its type name and its struct.
type jsonRecord struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// MarshalJSON encodes the record as {"type": name, "value": struct}.
func (r Record) MarshalJSON() ([]byte, error) {
	key, value, err := r.Encode()
	if err != nil {
		return nil, err
	}
	return json.Marshal(jsonRecord{Type: string(key), Value: value})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (r *Record) UnmarshalJSON(data []byte) error {
	var j jsonRecord
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	dec, err := Decode([]byte(j.Type), j.Value)
	if err != nil {
		return err
	}
	*r = dec
	return nil
}
