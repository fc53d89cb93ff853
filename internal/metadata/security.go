package metadata

import (
	"cmp"
	"maps"
	"slices"
	"strings"
)

// ScramCredentialRecord sets (or, with Removed, deletes) a user's SCRAM
// credential for one mechanism (Kafka's UserScramCredentialRecord and
// RemoveUserScramCredentialRecord). Mechanism has KIP-554's codes:
// 1 SCRAM-SHA-256, 2 SCRAM-SHA-512. The password is never stored, only
// the salt and the keys derived from the salted password (RFC 5802).
type ScramCredentialRecord struct {
	User       string `json:"user"`
	Mechanism  int8   `json:"mechanism"`
	Salt       []byte `json:"salt,omitempty"`
	StoredKey  []byte `json:"storedKey,omitempty"`
	ServerKey  []byte `json:"serverKey,omitempty"`
	Iterations int32  `json:"iterations,omitempty"`
	Removed    bool   `json:"removed,omitempty"`
}

// ScramKey names one user's credential for one mechanism.
type ScramKey struct {
	User      string
	Mechanism int8
}

// ScramCredential is a stored SCRAM credential.
type ScramCredential struct {
	Salt, StoredKey, ServerKey []byte
	Iterations                 int32
}

// AclRecord adds (or, with Removed, deletes) one ACL binding (Kafka's
// AccessControlEntryRecord and RemoveAccessControlEntryRecord), with
// Kafka's codes for resource type, pattern type, operation and
// permission. A binding is identified by all of its fields.
type AclRecord struct {
	Acl
	Removed bool `json:"removed,omitempty"`
}

// Acl is one ACL binding: a resource pattern and an access control entry.
type Acl struct {
	ResourceType int8   `json:"resourceType"`
	ResourceName string `json:"resourceName"`
	PatternType  int8   `json:"patternType"`
	Principal    string `json:"principal"`
	Host         string `json:"host"`
	Operation    int8   `json:"operation"`
	Permission   int8   `json:"permission"`
}

func compareAcls(a, b Acl) int {
	return cmp.Or(cmp.Compare(a.ResourceType, b.ResourceType), strings.Compare(a.ResourceName, b.ResourceName),
		cmp.Compare(a.PatternType, b.PatternType), strings.Compare(a.Principal, b.Principal),
		strings.Compare(a.Host, b.Host), cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Permission, b.Permission))
}

// applySecurity applies a SCRAM or ACL record of the Apply up to offset;
// it reports false for other records.
func (img *Image) applySecurity(r *Record, offset int64) bool {
	if (r.ScramCredential != nil || r.Acl != nil) && !img.securityOwned {
		img.ScramCredentials, img.Acls = maps.Clone(img.ScramCredentials), maps.Clone(img.Acls)
		img.securityOwned = true
	}
	switch {
	case r.ScramCredential != nil:
		c := r.ScramCredential
		if img.ScramCredentials == nil {
			img.ScramCredentials = map[ScramKey]ScramCredential{}
		}
		key := ScramKey{User: c.User, Mechanism: c.Mechanism}
		if c.Removed {
			delete(img.ScramCredentials, key)
		} else {
			img.ScramCredentials[key] = ScramCredential{Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey, Iterations: c.Iterations}
		}
	case r.Acl != nil:
		if img.Acls == nil {
			img.Acls = map[Acl]struct{}{}
		}
		if r.Acl.Removed {
			delete(img.Acls, r.Acl.Acl)
		} else {
			img.Acls[r.Acl.Acl] = struct{}{}
		}
		img.AclsVersion = offset + 1
	case r.ClientQuota != nil:
		img.applyQuota(r.ClientQuota, offset)
	default:
		return false
	}
	return true
}

// securityRecords are the SCRAM credentials and ACLs as records, in a
// fixed order, for Records.
func (img *Image) securityRecords() []Record {
	var out []Record
	keys := slices.SortedFunc(maps.Keys(img.ScramCredentials), func(a, b ScramKey) int {
		return cmp.Or(strings.Compare(a.User, b.User), cmp.Compare(a.Mechanism, b.Mechanism))
	})
	for _, k := range keys {
		c := img.ScramCredentials[k]
		out = append(out, Record{ScramCredential: &ScramCredentialRecord{User: k.User, Mechanism: k.Mechanism,
			Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey, Iterations: c.Iterations}})
	}
	for _, a := range img.AclList() {
		out = append(out, Record{Acl: &AclRecord{Acl: a}})
	}
	return out
}

// AclList returns the ACLs sorted.
func (img *Image) AclList() []Acl {
	return slices.SortedFunc(maps.Keys(img.Acls), compareAcls)
}

// ScramCredentialOf returns a user's credential for a mechanism.
func (img *Image) ScramCredentialOf(user string, mechanism int8) (ScramCredential, bool) {
	c, ok := img.ScramCredentials[ScramKey{User: user, Mechanism: mechanism}]
	return c, ok
}
