package metadata

import (
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
