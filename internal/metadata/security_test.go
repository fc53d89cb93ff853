package metadata

import (
	"fmt"
	"reflect"
	"testing"
)

func TestSecurityRecordsReplay(t *testing.T) {
	rate := 1024.0
	acl := Acl{ResourceType: 2, ResourceName: "orders", PatternType: 3, Principal: "User:alice", Host: "*", Operation: 3, Permission: 3}
	recs := []Record{
		{ScramCredential: &ScramCredentialRecord{User: "bob", Mechanism: 1, Salt: []byte("s"), StoredKey: []byte("k"), ServerKey: []byte("v"), Iterations: 4096}},
		{ScramCredential: &ScramCredentialRecord{User: "bob", Mechanism: 2, Salt: []byte("s2"), StoredKey: []byte("k2"), ServerKey: []byte("v2"), Iterations: 8192}},
		{ScramCredential: &ScramCredentialRecord{User: "bob", Mechanism: 2, Removed: true}},
		{Acl: &AclRecord{Acl: acl}},
		{Acl: &AclRecord{Acl: Acl{ResourceType: 4, ResourceName: "kafka-cluster", PatternType: 3, Principal: "User:*", Host: "*", Operation: 7, Permission: 2}}},
		{Acl: &AclRecord{Acl: acl, Removed: true}},
		{ClientQuota: &ClientQuotaRecord{Entity: QuotaEntity{HasUser: true, User: "bob", HasClient: true, ClientDefault: true}, Key: "producer_byte_rate", Value: &rate}},
		{ClientQuota: &ClientQuotaRecord{Entity: QuotaEntity{HasClient: true, ClientID: "c"}, Key: "consumer_byte_rate", Value: &rate}},
		{ClientQuota: &ClientQuotaRecord{Entity: QuotaEntity{HasClient: true, ClientID: "c"}, Key: "consumer_byte_rate"}},
	}
	for i := range recs { // through the log's encoding
		k, v, err := recs[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		if recs[i], err = Decode(k, v); err != nil {
			t.Fatal(err)
		}
	}
	img, err := Empty().Apply(5, recs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.ClientQuotas) != 1 || img.ClientQuotas[QuotaEntity{HasUser: true, User: "bob", HasClient: true, ClientDefault: true}]["producer_byte_rate"] != 1024 {
		t.Fatalf("quotas %v", img.ClientQuotas)
	}
	if len(img.ScramCredentials) != 1 || len(img.Acls) != 1 {
		t.Fatalf("credentials %v acls %v", img.ScramCredentials, img.Acls)
	}
	if c, ok := img.ScramCredentialOf("bob", 1); !ok || c.Iterations != 4096 || string(c.StoredKey) != "k" {
		t.Fatalf("bob's SHA-256 credential: %+v %v", c, ok)
	}
	if len(Empty().ScramCredentials) != 0 {
		t.Fatal("Apply changed the empty image")
	}
	again, err := Empty().Apply(5, img.Records()...)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.ScramCredentials, img.ScramCredentials) || !reflect.DeepEqual(again.Acls, img.Acls) || !reflect.DeepEqual(again.ClientQuotas, img.ClientQuotas) {
		t.Fatal("a snapshot's records do not rebuild the credentials and ACLs")
	}
}

// An authorizer is cached by AclsVersion, so two images holding different
// ACLs must not share one, even when one of them was loaded from a
// snapshot: here the log adds and removes alice's ACL and adds bob's, and
// a node that had alice's alone loads the snapshot holding bob's alone.
func TestAclsVersionNamesOneSet(t *testing.T) {
	alice := Acl{ResourceType: 2, ResourceName: "orders", PatternType: 3, Principal: "User:alice", Host: "*", Operation: 3, Permission: 3}
	bob := alice
	bob.Principal = "User:bob"
	lagging := replay(t, Empty(), Record{Cluster: &ClusterRecord{ClusterID: "c1"}}, Record{Acl: &AclRecord{Acl: alice}})
	current := replay(t, lagging, Record{Acl: &AclRecord{Acl: alice, Removed: true}}, Record{Acl: &AclRecord{Acl: bob}})
	snapshot, err := Empty().Apply(current.Offset, current.Records()...)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snapshot.Acls, current.Acls) || reflect.DeepEqual(snapshot.Acls, lagging.Acls) {
		t.Fatalf("ACLs: snapshot %v, current %v, lagging %v", snapshot.Acls, current.Acls, lagging.Acls)
	}
	if snapshot.AclsVersion == lagging.AclsVersion {
		t.Fatalf("the snapshot's ACLs and the lagging node's have one version, %d", snapshot.AclsVersion)
	}
	same := replay(t, current, Record{Cluster: &ClusterRecord{ClusterID: "c1"}})
	if same.AclsVersion != current.AclsVersion {
		t.Fatalf("a record that is not an ACL changed the version from %d to %d", current.AclsVersion, same.AclsVersion)
	}
	if Empty().AclsVersion == lagging.AclsVersion {
		t.Fatal("an image with an ACL has the empty image's version")
	}
}

// BenchmarkApplyWith10kAcls is one metadata change that is not an ACL (a
// partition's ISR) applied to an image holding 10,000 ACLs: what every
// metadata record costs a cluster that has them.
//
//	go test ./internal/metadata -run XXX -bench ApplyWith10kAcls
func BenchmarkApplyWith10kAcls(b *testing.B) {
	id := NewUUID()
	recs := []Record{
		{Topic: &TopicRecord{Name: "orders", ID: id}},
		{Partition: &PartitionRecord{TopicID: id, Partition: 0, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, Leader: 1}},
	}
	for i := range 10_000 {
		recs = append(recs, Record{Acl: &AclRecord{Acl: Acl{ResourceType: 2, ResourceName: fmt.Sprintf("topic-%d", i), PatternType: 3,
			Principal: fmt.Sprintf("User:u%d", i%100), Host: "*", Operation: 3, Permission: 3}}})
	}
	img, err := Empty().Apply(0, recs...)
	if err != nil {
		b.Fatal(err)
	}
	isr := []int32{1}
	change := Record{PartitionChange: &PartitionChangeRecord{TopicID: id, Partition: 0, ISR: isr}}
	b.ReportAllocs()
	for b.Loop() {
		next, err := img.Apply(img.Offset+1, change)
		if err != nil {
			b.Fatal(err)
		}
		img = next
	}
	if len(img.Acls) != 10_000 {
		b.Fatalf("%d ACLs", len(img.Acls))
	}
}

// An Apply without SCRAM or ACL records shares the maps with the image
// before; the next one that has them must not change either image.
func TestSecurityMapsCopiedOnWrite(t *testing.T) {
	alice := Acl{ResourceType: 2, ResourceName: "orders", PatternType: 3, Principal: "User:alice", Host: "*", Operation: 3, Permission: 3}
	bob := alice
	bob.Principal = "User:bob"
	cred := func(user string) Record {
		return Record{ScramCredential: &ScramCredentialRecord{User: user, Mechanism: 1, Salt: []byte("s"), StoredKey: []byte("k"), ServerKey: []byte("v"), Iterations: 4096}}
	}
	first := replay(t, Empty(), Record{Acl: &AclRecord{Acl: alice}}, cred("alice"))
	second := replay(t, first, Record{Cluster: &ClusterRecord{ClusterID: "c1"}})
	third := replay(t, second, Record{Acl: &AclRecord{Acl: alice, Removed: true}}, Record{Acl: &AclRecord{Acl: bob}}, cred("bob"))
	for name, img := range map[string]*Image{"first": first, "second": second} {
		if _, ok := img.Acls[alice]; !ok || len(img.Acls) != 1 || len(img.ScramCredentials) != 1 {
			t.Errorf("%s image: ACLs %v, credentials %v after a later Apply", name, img.Acls, img.ScramCredentials)
		}
	}
	if _, ok := third.Acls[bob]; !ok || len(third.Acls) != 1 || len(third.ScramCredentials) != 2 {
		t.Errorf("third image: ACLs %v, credentials %v", third.Acls, third.ScramCredentials)
	}
}

// TestQuotasVersionNamesOneSet is TestAclsVersionNamesOneSet for client
// quotas: a node that loads a snapshot must not end up with the version a
// lagging node has for other quota values.
func TestQuotasVersionNamesOneSet(t *testing.T) {
	alice := QuotaEntity{HasUser: true, User: "alice"}
	bob := QuotaEntity{HasUser: true, User: "bob"}
	rate := 1024.0
	lagging := replay(t, Empty(), Record{Cluster: &ClusterRecord{ClusterID: "c1"}}, Record{ClientQuota: &ClientQuotaRecord{Entity: alice, Key: "producer_byte_rate", Value: &rate}})
	current := replay(t, lagging, Record{ClientQuota: &ClientQuotaRecord{Entity: alice, Key: "producer_byte_rate"}},
		Record{ClientQuota: &ClientQuotaRecord{Entity: bob, Key: "producer_byte_rate", Value: &rate}})
	snapshot, err := Empty().Apply(current.Offset, current.Records()...)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snapshot.ClientQuotas, current.ClientQuotas) || reflect.DeepEqual(snapshot.ClientQuotas, lagging.ClientQuotas) {
		t.Fatalf("quotas: snapshot %v, current %v, lagging %v", snapshot.ClientQuotas, current.ClientQuotas, lagging.ClientQuotas)
	}
	if snapshot.QuotasVersion == lagging.QuotasVersion {
		t.Fatalf("the snapshot's quotas and the lagging node's have one version, %d", snapshot.QuotasVersion)
	}
	if same := replay(t, current, Record{Cluster: &ClusterRecord{ClusterID: "c1"}}); same.QuotasVersion != current.QuotasVersion {
		t.Fatalf("a record that is not a quota changed the version from %d to %d", current.QuotasVersion, same.QuotasVersion)
	}
}
