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
	Topic           *TopicRecord
	Partition       *PartitionRecord
	PartitionChange *PartitionChangeRecord
	Config          *ConfigRecord
	RemoveTopic     *RemoveTopicRecord
	ProducerIDs     *ProducerIDsRecord
	Cluster         *ClusterRecord
}

// ClusterRecord is the first record of a metadata log.
type ClusterRecord struct {
	ClusterID string `json:"clusterId"`
}

// BrokerRecord registers a broker, or updates its endpoints.
type BrokerRecord struct {
	NodeID int32  `json:"nodeId"`
	Host   string `json:"host"`
	Port   int32  `json:"port"`
	Rack   string `json:"rack,omitempty"`
	// Epoch increases with each registration so stale heartbeats can be
	// told apart.
	Epoch   int64 `json:"epoch"`
	Fenced  bool  `json:"fenced,omitempty"`
	Removed bool  `json:"removed,omitempty"`
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
}

// PartitionChangeRecord changes a partition's leader, ISR or replicas. Nil
// fields are unchanged. Any leader change bumps the leader epoch; every
// change bumps the partition epoch.
type PartitionChangeRecord struct {
	TopicID   UUID    `json:"topicId"`
	Partition int32   `json:"partition"`
	Leader    *int32  `json:"leader,omitempty"`
	ISR       []int32 `json:"isr,omitempty"`
	Replicas  []int32 `json:"replicas,omitempty"`
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

// ProducerIDsRecord reserves the producer ids below NextProducerID.
type ProducerIDsRecord struct {
	NodeID         int32 `json:"nodeId"`
	NextProducerID int64 `json:"nextProducerId"`
}

// Encode returns the record's key (its type name) and value (JSON).
func (r *Record) Encode() (key, value []byte, err error) {
	var name string
	var v any
	switch {
	case r.Cluster != nil:
		name, v = "cluster", r.Cluster
	case r.Broker != nil:
		name, v = "broker", r.Broker
	case r.Topic != nil:
		name, v = "topic", r.Topic
	case r.Partition != nil:
		name, v = "partition", r.Partition
	case r.PartitionChange != nil:
		name, v = "partitionChange", r.PartitionChange
	case r.Config != nil:
		name, v = "config", r.Config
	case r.RemoveTopic != nil:
		name, v = "removeTopic", r.RemoveTopic
	case r.ProducerIDs != nil:
		name, v = "producerIds", r.ProducerIDs
	default:
		return nil, nil, errors.New("metadata: empty record")
	}
	value, err = json.Marshal(v)
	return []byte(name), value, err
}

// Decode parses a record from its key and value.
func Decode(key, value []byte) (Record, error) {
	var r Record
	var v any
	switch string(key) {
	case "cluster":
		r.Cluster = new(ClusterRecord)
		v = r.Cluster
	case "broker":
		r.Broker = new(BrokerRecord)
		v = r.Broker
	case "topic":
		r.Topic = new(TopicRecord)
		v = r.Topic
	case "partition":
		r.Partition = new(PartitionRecord)
		v = r.Partition
	case "partitionChange":
		r.PartitionChange = new(PartitionChangeRecord)
		v = r.PartitionChange
	case "config":
		r.Config = new(ConfigRecord)
		v = r.Config
	case "removeTopic":
		r.RemoveTopic = new(RemoveTopicRecord)
		v = r.RemoveTopic
	case "producerIds":
		r.ProducerIDs = new(ProducerIDsRecord)
		v = r.ProducerIDs
	default:
		return Record{}, fmt.Errorf("%w: %q", ErrUnknownRecord, key)
	}
	if err := json.Unmarshal(value, v); err != nil {
		return Record{}, fmt.Errorf("metadata: decoding %s record: %w", key, err)
	}
	return r, nil
}
