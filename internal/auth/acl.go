package auth

import (
	"strings"
)

// Kafka's ACL codes (org.apache.kafka.common.acl and .resource), as the
// ACL APIs and the metadata log carry them.
const (
	ResourceAny             int8 = 1
	ResourceTopic           int8 = 2
	ResourceGroup           int8 = 3
	ResourceCluster         int8 = 4
	ResourceTransactionalID int8 = 5
	ResourceDelegationToken int8 = 6
	ResourceUser            int8 = 7

	PatternAny      int8 = 1
	PatternMatch    int8 = 2
	PatternLiteral  int8 = 3
	PatternPrefixed int8 = 4

	OpAny             int8 = 1
	OpAll             int8 = 2
	OpRead            int8 = 3
	OpWrite           int8 = 4
	OpCreate          int8 = 5
	OpDelete          int8 = 6
	OpAlter           int8 = 7
	OpDescribe        int8 = 8
	OpClusterAction   int8 = 9
	OpDescribeConfigs int8 = 10
	OpAlterConfigs    int8 = 11
	OpIdempotentWrite int8 = 12
	OpCreateTokens    int8 = 13
	OpDescribeTokens  int8 = 14

	PermissionAny   int8 = 1
	PermissionDeny  int8 = 2
	PermissionAllow int8 = 3
)

// ClusterName is the one CLUSTER resource's name.
const ClusterName = "kafka-cluster"

// Wildcard is the literal resource name, principal and host that match
// everything.
const Wildcard = "*"

// Acl is one binding: a resource pattern and an access control entry.
type Acl struct {
	ResourceType int8
	ResourceName string
	PatternType  int8
	Principal    string // Type:Name, or User:*
	Host         string // an address, or *
	Operation    int8
	Permission   int8
}

// Filter selects ACLs as DescribeAcls and DeleteAcls do: ANY (and a nil
// string) matches every value; PatternMatch matches the ACLs that would
// apply to the named resource (literal equal, literal *, or a prefix).
type Filter struct {
	ResourceType int8
	ResourceName *string
	PatternType  int8
	Principal    *string
	Host         *string
	Operation    int8
	Permission   int8
}

// Matches reports whether the filter selects a.
func (f Filter) Matches(a Acl) bool {
	if f.ResourceType != ResourceAny && f.ResourceType != a.ResourceType {
		return false
	}
	switch f.PatternType {
	case PatternAny:
		if f.ResourceName != nil && *f.ResourceName != a.ResourceName {
			return false
		}
	case PatternMatch:
		if f.ResourceName != nil && !patternMatches(a, *f.ResourceName) {
			return false
		}
	default:
		if f.PatternType != a.PatternType || (f.ResourceName != nil && *f.ResourceName != a.ResourceName) {
			return false
		}
	}
	if f.Principal != nil && *f.Principal != a.Principal {
		return false
	}
	if f.Host != nil && *f.Host != a.Host {
		return false
	}
	if f.Operation != OpAny && f.Operation != a.Operation {
		return false
	}
	return f.Permission == PermissionAny || f.Permission == a.Permission
}

func patternMatches(a Acl, name string) bool {
	switch a.PatternType {
	case PatternLiteral:
		return a.ResourceName == name || a.ResourceName == Wildcard
	case PatternPrefixed:
		return strings.HasPrefix(name, a.ResourceName)
	}
	return false
}

// implies reports whether an ACL's operation grants op when allowed
// (Kafka: ALL grants everything; READ, WRITE, DELETE and ALTER grant
// DESCRIBE; ALTER_CONFIGS grants DESCRIBE_CONFIGS). A DENY applies only to
// its own operation and ALL.
func implies(aclOp, op int8, allow bool) bool {
	if aclOp == op || aclOp == OpAll {
		return true
	}
	if !allow {
		return false
	}
	switch op {
	case OpDescribe:
		return aclOp == OpRead || aclOp == OpWrite || aclOp == OpDelete || aclOp == OpAlter
	case OpDescribeConfigs:
		return aclOp == OpAlterConfigs
	}
	return false
}

// Authorizer decides with Kafka's StandardAuthorizer rules: super users
// may do anything; a DENY that matches wins over any ALLOW; an ALLOW must
// match (the operation, or one implying it); a resource that no ACL
// matches at all is allowed only with allow.everyone.if.no.acl.found. An
// Authorizer is immutable and safe for concurrent use; the broker makes a
// new one when the ACLs in the metadata change.
type Authorizer struct {
	superUsers         map[string]bool
	allowIfNoAclsFound bool
	// byType holds each resource type's ACLs: literal ones by name (the
	// wildcard under "*"), prefixed ones by prefix.
	byType map[int8]*typeAcls
	count  int
}

type typeAcls struct {
	literal  map[string][]Acl
	prefixed map[string][]Acl
	// prefixLens are the distinct prefix lengths, to probe only those.
	prefixLens []int
}

// NewAuthorizer indexes acls. superUsers are principals (Type:Name).
func NewAuthorizer(acls []Acl, superUsers []string, allowIfNoAclsFound bool) *Authorizer {
	az := &Authorizer{superUsers: map[string]bool{}, allowIfNoAclsFound: allowIfNoAclsFound, byType: map[int8]*typeAcls{}, count: len(acls)}
	for _, u := range superUsers {
		az.superUsers[strings.TrimSpace(u)] = true
	}
	for _, a := range acls {
		t := az.byType[a.ResourceType]
		if t == nil {
			t = &typeAcls{literal: map[string][]Acl{}, prefixed: map[string][]Acl{}}
			az.byType[a.ResourceType] = t
		}
		switch a.PatternType {
		case PatternLiteral:
			t.literal[a.ResourceName] = append(t.literal[a.ResourceName], a)
		case PatternPrefixed:
			if _, ok := t.prefixed[a.ResourceName]; !ok {
				seen := false
				for _, l := range t.prefixLens {
					seen = seen || l == len(a.ResourceName)
				}
				if !seen {
					t.prefixLens = append(t.prefixLens, len(a.ResourceName))
				}
			}
			t.prefixed[a.ResourceName] = append(t.prefixed[a.ResourceName], a)
		}
	}
	return az
}

// Len is how many ACLs the authorizer holds.
func (az *Authorizer) Len() int { return az.count }

// IsSuperUser reports whether p is in super.users.
func (az *Authorizer) IsSuperUser(p Principal) bool { return az.superUsers[p.String()] }

// Subject is a principal prepared for many checks: its Type:Name and
// Type:* strings made once.
type Subject struct {
	principal, wildcard string
	super               bool
}

// Super reports whether the subject is a super user.
func (s Subject) Super() bool { return s.super }

// Subject prepares p for Check.
func (az *Authorizer) Subject(p Principal) Subject {
	s := p.String()
	return Subject{principal: s, wildcard: p.Type + ":" + Wildcard, super: az.superUsers[s]}
}

// Check is Authorize for a prepared subject.
func (az *Authorizer) Check(s Subject, host string, op int8, resourceType int8, name string) bool {
	if s.super {
		return true
	}
	return az.check(s.principal, s.wildcard, host, op, resourceType, name)
}

// AllowsAny reports whether p may perform op on some resource of the type:
// an ALLOW for it (or an implying operation) exists that no wildcard DENY
// overrides. It is Kafka's authorizeByResourceType, used for KIP-679's
// rule that WRITE on any topic lets a producer be idempotent.
func (az *Authorizer) AllowsAny(p Principal, host string, op int8, resourceType int8) bool {
	if az.superUsers[p.String()] {
		return true
	}
	t := az.byType[resourceType]
	if t == nil {
		return az.allowIfNoAclsFound
	}
	principal, wildcard := p.String(), p.Type+":"+Wildcard // once: this walks every ACL of the type
	matches := func(a *Acl) bool {
		return (a.Principal == principal || a.Principal == wildcard) && (a.Host == Wildcard || a.Host == host)
	}
	// A DENY on every resource of the type (the literal wildcard, or the
	// empty prefix) leaves nothing allowed.
	for _, acls := range [][]Acl{t.literal[Wildcard], t.prefixed[""]} {
		for i := range acls {
			if a := &acls[i]; a.Permission == PermissionDeny && matches(a) && implies(a.Operation, op, false) {
				return false
			}
		}
	}
	for _, group := range []map[string][]Acl{t.literal, t.prefixed} {
		for _, acls := range group {
			for i := range acls {
				if a := &acls[i]; a.Permission == PermissionAllow && matches(a) && implies(a.Operation, op, true) {
					return true
				}
			}
		}
	}
	return false
}

// Authorize reports whether principal p, connecting from host, may
// perform op on the resource.
func (az *Authorizer) Authorize(p Principal, host string, op int8, resourceType int8, name string) bool {
	return az.Check(az.Subject(p), host, op, resourceType, name)
}

func (az *Authorizer) check(principal, wildcardPrincipal, host string, op int8, resourceType int8, name string) bool {
	t := az.byType[resourceType]
	if t == nil {
		return az.allowIfNoAclsFound
	}
	found, allowed := false, false
	check := func(acls []Acl) bool { // returns true on a matching DENY
		for i := range acls {
			a := &acls[i]
			found = true
			if a.Principal != principal && a.Principal != wildcardPrincipal {
				continue
			}
			if a.Host != Wildcard && a.Host != host {
				continue
			}
			switch a.Permission {
			case PermissionDeny:
				if implies(a.Operation, op, false) {
					return true
				}
			case PermissionAllow:
				if implies(a.Operation, op, true) {
					allowed = true
				}
			}
		}
		return false
	}
	if check(t.literal[name]) || check(t.literal[Wildcard]) {
		return false
	}
	for _, l := range t.prefixLens {
		if l <= len(name) && check(t.prefixed[name[:l]]) {
			return false
		}
	}
	if !found {
		return az.allowIfNoAclsFound
	}
	return allowed
}
