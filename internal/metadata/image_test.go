package metadata

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
)

func replay(t *testing.T, img *Image, recs ...Record) *Image {
	t.Helper()
	for _, r := range recs {
		key, value, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		dec, err := Decode(key, value)
		if err != nil {
			t.Fatal(err)
		}
		img, err = img.Apply(img.Offset+1, dec)
		if err != nil {
			t.Fatal(err)
		}
	}
	return img
}

func TestReplayBuildsImage(t *testing.T) {
	id := NewUUID()
	one := int32(1)
	v := "1000"
	img := replay(t, Empty(),
		Record{Cluster: &ClusterRecord{ClusterID: "c1"}},
		Record{Broker: &BrokerRecord{NodeID: 1, Host: "127.0.0.1", Port: 9092, Epoch: 1}},
		Record{Topic: &TopicRecord{Name: "orders", ID: id}},
		Record{Partition: &PartitionRecord{TopicID: id, Partition: 0, Replicas: []int32{1}, ISR: []int32{1}, Leader: 1}},
		Record{Partition: &PartitionRecord{TopicID: id, Partition: 1, Replicas: []int32{1}, ISR: []int32{1}, Leader: 1}},
		Record{Config: &ConfigRecord{ResourceType: ResourceTopic, ResourceName: "orders", Name: "retention.ms", Value: &v}},
		Record{ProducerIDs: &ProducerIDsRecord{NodeID: 1, NextProducerID: 1000}},
	)
	before := img
	img = replay(t, img, Record{PartitionChange: &PartitionChangeRecord{TopicID: id, Partition: 1, Leader: &one, ISR: []int32{1}}})
	if img.ClusterID != "c1" || img.Offset != 7 || len(img.BrokerIDs()) != 1 || img.NextProducerID != 1000 {
		t.Fatalf("image: %+v", img)
	}
	_, p, ok := img.Partition("orders", 1)
	if !ok || p.PartitionEpoch != 1 || p.LeaderEpoch != 0 {
		t.Fatalf("partition 1: %+v", p)
	}
	if img.TopicConfig("orders")["retention.ms"] != "1000" {
		t.Fatalf("config: %v", img.Configs)
	}
	two := int32(2)
	img2 := replay(t, img, Record{PartitionChange: &PartitionChangeRecord{TopicID: id, Partition: 1, Leader: &two}})
	if _, p, _ := img2.Partition("orders", 1); p.LeaderEpoch != 1 || p.Leader != 2 {
		t.Fatalf("leader change: %+v", p)
	}
	if _, p, _ := img.Partition("orders", 1); p.Leader != 1 {
		t.Fatal("an older image changed")
	}
	if _, p, _ := before.Partition("orders", 1); p.PartitionEpoch != 0 {
		t.Fatal("an older image changed")
	}
	img3 := replay(t, img2, Record{RemoveTopic: &RemoveTopicRecord{TopicID: id}})
	if len(img3.Topics) != 0 || len(img3.TopicsByID) != 0 || img3.TopicConfig("orders") != nil {
		t.Fatalf("after remove: %+v", img3)
	}
	if len(img2.Topics) != 1 {
		t.Fatal("remove changed an older image")
	}
}

func TestInconsistentRecordsAreRejected(t *testing.T) {
	id := NewUUID()
	for name, r := range map[string]Record{
		"partition of unknown topic": {Partition: &PartitionRecord{TopicID: id}},
		"remove unknown topic":       {RemoveTopic: &RemoveTopicRecord{TopicID: id}},
		"empty":                      {},
	} {
		if _, err := Empty().Apply(0, r); !errors.Is(err, ErrInconsistent) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Decode([]byte("nope"), []byte("{}")); !errors.Is(err, ErrUnknownRecord) {
		t.Errorf("unknown type: %v", err)
	}
}

func TestUUIDText(t *testing.T) {
	u := NewUUID()
	back, err := ParseUUID(u.String())
	if err != nil || back != u {
		t.Fatalf("%v %v", back, err)
	}
	if _, err := ParseUUID("short"); err == nil {
		t.Fatal("accepted a bad UUID")
	}
}

func TestRecordsRebuildTheImage(t *testing.T) {
	a, b := NewUUID(), NewUUID()
	two := int32(2)
	v, w := "1000", "compact"
	img := replay(t, Empty(),
		Record{Cluster: &ClusterRecord{ClusterID: "c1"}},
		Record{Broker: &BrokerRecord{NodeID: 2, Host: "h2", Port: 9092, Rack: "r2", Epoch: 3}},
		Record{Broker: &BrokerRecord{NodeID: 1, Host: "h1", Port: 9092, Epoch: 1, Fenced: true}},
		Record{Topic: &TopicRecord{Name: "orders", ID: a}},
		Record{Partition: &PartitionRecord{TopicID: a, Partition: 0, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, Leader: 1}},
		Record{Topic: &TopicRecord{Name: "audit", ID: b}},
		Record{Partition: &PartitionRecord{TopicID: b, Partition: 0, Replicas: []int32{2}, ISR: []int32{2}, Leader: 2}},
		Record{PartitionChange: &PartitionChangeRecord{TopicID: a, Partition: 0, Leader: &two, ISR: []int32{2}}},
		Record{Config: &ConfigRecord{ResourceType: ResourceTopic, ResourceName: "orders", Name: "retention.ms", Value: &v}},
		Record{Config: &ConfigRecord{ResourceType: ResourceBroker, ResourceName: "", Name: "log.cleanup.policy", Value: &w}},
		Record{ProducerIDs: &ProducerIDsRecord{NodeID: 1, NextProducerID: 2000}},
	)
	recs := img.Records()
	// Through JSON, as a snapshot stores them.
	data, err := json.Marshal(recs)
	if err != nil {
		t.Fatal(err)
	}
	var decoded []Record
	if err := json.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}
	rebuilt, err := Empty().Apply(img.Offset, decoded...)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rebuilt, img) {
		t.Fatalf("rebuilt image differs:\n got %+v\nwant %+v", rebuilt, img)
	}
	if again := rebuilt.Records(); !reflect.DeepEqual(again, recs) {
		t.Fatal("records of equal images differ")
	}
}

// A reassignment's adding and removing replicas are set, survive a
// snapshot, and are cleared by empty lists, not by records that leave them
// out.
func TestReassignmentReplicas(t *testing.T) {
	id := NewUUID()
	img := replay(t, Empty(),
		Record{Topic: &TopicRecord{Name: "orders", ID: id}},
		Record{Partition: &PartitionRecord{TopicID: id, Partition: 0, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}, Leader: 1}},
		Record{PartitionChange: &PartitionChangeRecord{TopicID: id, Partition: 0, Replicas: []int32{2, 3, 4, 1},
			AddingReplicas: &[]int32{4}, RemovingReplicas: &[]int32{1}}},
		Record{PartitionChange: &PartitionChangeRecord{TopicID: id, Partition: 0, ISR: []int32{1, 2, 3, 4}}},
	)
	_, p, _ := img.Partition("orders", 0)
	if !p.Reassigning() || !reflect.DeepEqual(p.AddingReplicas, []int32{4}) || !reflect.DeepEqual(p.RemovingReplicas, []int32{1}) {
		t.Fatalf("during the reassignment: %+v", p)
	}
	data, err := json.Marshal(img.Records())
	if err != nil {
		t.Fatal(err)
	}
	var decoded []Record
	if err := json.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}
	rebuilt, err := Empty().Apply(img.Offset, decoded...)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rebuilt, img) {
		t.Fatalf("rebuilt image differs:\n got %+v\nwant %+v", rebuilt, img)
	}
	done := replay(t, img, Record{PartitionChange: &PartitionChangeRecord{TopicID: id, Partition: 0, Replicas: []int32{2, 3, 4},
		ISR: []int32{2, 3, 4}, AddingReplicas: &[]int32{}, RemovingReplicas: &[]int32{}}})
	if _, p, _ := done.Partition("orders", 0); p.Reassigning() || p.AddingReplicas != nil || p.RemovingReplicas != nil {
		t.Fatalf("after completion: %+v", p)
	}
}

// TestEligibleLeaderReplicas: a change record tells an ISR or ELR it
// empties from one it leaves alone, through its encoding, and a snapshot
// keeps the ELR and the last known leader.
func TestEligibleLeaderReplicas(t *testing.T) {
	id := NewUUID()
	none := int32(-1)
	img := replay(t, Empty(),
		Record{Topic: &TopicRecord{Name: "orders", ID: id}},
		Record{Partition: &PartitionRecord{TopicID: id, Partition: 0, Replicas: []int32{1, 2, 3}, ISR: []int32{1}, Leader: 1, ELR: []int32{2}}},
	)
	for _, r := range []Record{
		{PartitionChange: &PartitionChangeRecord{TopicID: id, Partition: 0, Leader: &none, ISR: []int32{}, ELR: []int32{2, 1}, LastKnownELR: []int32{1}}},
		{PartitionChange: &PartitionChangeRecord{TopicID: id, Partition: 0}},
	} {
		k, v, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := Decode(k, v)
		if err != nil {
			t.Fatal(err)
		}
		img = replay(t, img, decoded)
	}
	_, p, _ := img.Partition("orders", 0)
	if p.ISR == nil || len(p.ISR) != 0 || !slices.Equal(p.ELR, []int32{2, 1}) || !slices.Equal(p.LastKnownELR, []int32{1}) || p.Leader != -1 {
		t.Fatalf("partition after the changes: %+v", p)
	}
	rebuilt := replay(t, Empty(), img.Records()...)
	if _, q, _ := rebuilt.Partition("orders", 0); !slices.Equal(q.ELR, p.ELR) || !slices.Equal(q.LastKnownELR, p.LastKnownELR) || len(q.ISR) != 0 {
		t.Fatalf("from the snapshot: %+v, want %+v", q, p)
	}
}
