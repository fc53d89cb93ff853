package auth

import (
	"fmt"
	"testing"
)

func TestAuthorizer(t *testing.T) {
	alice, bob, anon := User("alice"), User("bob"), Anonymous
	acls := []Acl{
		{ResourceTopic, "orders", PatternLiteral, "User:alice", "*", OpRead, PermissionAllow},
		{ResourceTopic, "orders", PatternLiteral, "User:alice", "10.0.0.9", OpRead, PermissionDeny},
		{ResourceTopic, "logs-", PatternPrefixed, "User:*", "*", OpWrite, PermissionAllow},
		{ResourceTopic, "logs-secret", PatternLiteral, "User:bob", "*", OpAll, PermissionDeny},
		{ResourceTopic, "*", PatternLiteral, "User:bob", "*", OpDescribe, PermissionAllow},
		{ResourceGroup, "g", PatternLiteral, "User:alice", "*", OpAll, PermissionAllow},
		{ResourceTopic, "cfg", PatternLiteral, "User:alice", "*", OpAlterConfigs, PermissionAllow},
		{ResourceTopic, "nodesc", PatternLiteral, "User:alice", "*", OpRead, PermissionAllow},
		{ResourceTopic, "nodesc", PatternLiteral, "User:alice", "*", OpDescribe, PermissionDeny},
	}
	for _, strict := range []bool{false, true} {
		az := NewAuthorizer(acls, []string{"User:admin"}, !strict)
		for _, tc := range []struct {
			p     Principal
			host  string
			op    int8
			rt    int8
			name  string
			allow bool
		}{
			{alice, "127.0.0.1", OpRead, ResourceTopic, "orders", true},
			{alice, "127.0.0.1", OpDescribe, ResourceTopic, "orders", true}, // READ implies DESCRIBE
			{alice, "127.0.0.1", OpWrite, ResourceTopic, "orders", false},
			{alice, "10.0.0.9", OpRead, ResourceTopic, "orders", false}, // DENY over ALLOW
			{bob, "127.0.0.1", OpRead, ResourceTopic, "orders", false},
			{bob, "127.0.0.1", OpDescribe, ResourceTopic, "orders", true}, // wildcard resource
			{anon, "127.0.0.1", OpWrite, ResourceTopic, "logs-app", true}, // prefixed, wildcard principal
			{anon, "127.0.0.1", OpWrite, ResourceTopic, "log", false},
			{bob, "127.0.0.1", OpWrite, ResourceTopic, "logs-secret", false}, // DENY ALL
			{alice, "127.0.0.1", OpWrite, ResourceTopic, "logs-secret", true},
			{alice, "127.0.0.1", OpDelete, ResourceGroup, "g", true}, // ALL
			{alice, "127.0.0.1", OpDescribeConfigs, ResourceTopic, "cfg", true},
			{alice, "127.0.0.1", OpRead, ResourceTopic, "nodesc", true},
			{alice, "127.0.0.1", OpDescribe, ResourceTopic, "nodesc", false}, // a DENY is not overridden by an implying ALLOW
			{User("admin"), "127.0.0.1", OpAlter, ResourceCluster, ClusterName, true},
			// No ACL on the resource: allow.everyone.if.no.acl.found.
			{anon, "127.0.0.1", OpAlter, ResourceCluster, ClusterName, !strict},
			{alice, "127.0.0.1", OpRead, ResourceGroup, "other", !strict},
		} {
			if got := az.Authorize(tc.p, tc.host, tc.op, tc.rt, tc.name); got != tc.allow {
				t.Errorf("allowIfNone=%v: %v from %s op %d on %d:%s = %v, want %v", !strict, tc.p, tc.host, tc.op, tc.rt, tc.name, got, tc.allow)
			}
		}
	}
}

// AllowsAny is KIP-679's "WRITE on some topic": any ALLOW that matches the
// principal and host and implies the operation, unless a DENY covers every
// topic.
func TestAllowsAny(t *testing.T) {
	alice, bob := User("alice"), User("bob")
	allowWrite := Acl{ResourceTopic, "logs-", PatternPrefixed, "User:alice", "*", OpWrite, PermissionAllow}
	for _, tc := range []struct {
		name  string
		acls  []Acl
		p     Principal
		host  string
		allow bool
	}{
		{"a prefixed ALLOW", []Acl{allowWrite}, alice, "10.0.0.1", true},
		{"another principal's", []Acl{allowWrite}, bob, "10.0.0.1", false},
		{"READ only", []Acl{{ResourceTopic, "t", PatternLiteral, "User:alice", "*", OpRead, PermissionAllow}}, alice, "10.0.0.1", false},
		{"ALL implies WRITE", []Acl{{ResourceTopic, "t", PatternLiteral, "User:alice", "*", OpAll, PermissionAllow}}, alice, "10.0.0.1", true},
		{"User:*", []Acl{{ResourceTopic, "t", PatternLiteral, "User:*", "*", OpWrite, PermissionAllow}}, bob, "10.0.0.1", true},
		{"another host", []Acl{{ResourceTopic, "t", PatternLiteral, "User:alice", "10.0.0.2", OpWrite, PermissionAllow}}, alice, "10.0.0.1", false},
		{"a DENY on the literal *", []Acl{allowWrite, {ResourceTopic, "*", PatternLiteral, "User:alice", "*", OpWrite, PermissionDeny}}, alice, "10.0.0.1", false},
		{"a DENY on the empty prefix", []Acl{allowWrite, {ResourceTopic, "", PatternPrefixed, "User:*", "*", OpAll, PermissionDeny}}, alice, "10.0.0.1", false},
		{"a DENY on one topic", []Acl{allowWrite, {ResourceTopic, "t", PatternLiteral, "User:alice", "*", OpWrite, PermissionDeny}}, alice, "10.0.0.1", true},
		{"no topic ACLs", []Acl{{ResourceGroup, "g", PatternLiteral, "User:alice", "*", OpAll, PermissionAllow}}, alice, "10.0.0.1", false},
		{"a super user", nil, User("admin"), "10.0.0.1", true},
	} {
		az := NewAuthorizer(tc.acls, []string{"User:admin"}, false)
		if got := az.AllowsAny(tc.p, tc.host, OpWrite, ResourceTopic); got != tc.allow {
			t.Errorf("%s: AllowsAny = %v, want %v", tc.name, got, tc.allow)
		}
	}
}

func TestFilter(t *testing.T) {
	a := Acl{ResourceTopic, "logs-", PatternPrefixed, "User:alice", "*", OpWrite, PermissionAllow}
	name, other, alice := "logs-app", "x", "User:alice"
	for _, tc := range []struct {
		f    Filter
		want bool
	}{
		{Filter{ResourceAny, nil, PatternAny, nil, nil, OpAny, PermissionAny}, true},
		{Filter{ResourceTopic, &name, PatternMatch, &alice, nil, OpAny, PermissionAny}, true},
		{Filter{ResourceTopic, &other, PatternMatch, nil, nil, OpAny, PermissionAny}, false},
		{Filter{ResourceTopic, nil, PatternLiteral, nil, nil, OpAny, PermissionAny}, false},
		{Filter{ResourceTopic, nil, PatternPrefixed, nil, nil, OpWrite, PermissionAllow}, true},
		{Filter{ResourceGroup, nil, PatternAny, nil, nil, OpAny, PermissionAny}, false},
	} {
		if got := tc.f.Matches(a); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.f, got, tc.want)
		}
	}
}

// BenchmarkAuthorize10k is one authorization with 10,000 ACLs.
func BenchmarkAuthorize10k(b *testing.B) {
	var acls []Acl
	for i := range 10_000 {
		pt := PatternLiteral
		if i%10 == 0 {
			pt = PatternPrefixed
		}
		acls = append(acls, Acl{ResourceTopic, fmt.Sprintf("topic-%d", i), pt, fmt.Sprintf("User:u%d", i%100), "*", OpRead, PermissionAllow})
	}
	az := NewAuthorizer(acls, nil, false)
	p := User("u42")
	b.ReportAllocs()
	for b.Loop() {
		az.Authorize(p, "127.0.0.1", OpRead, ResourceTopic, "topic-4242")
	}
}

// BenchmarkAllowsAny10k is KIP-679's check for an idempotent producer
// without IDEMPOTENT_WRITE on the cluster (InitProducerID) with 10,000
// ACLs, none of which lets the principal write.
func BenchmarkAllowsAny10k(b *testing.B) {
	var acls []Acl
	for i := range 10_000 {
		acls = append(acls, Acl{ResourceTopic, fmt.Sprintf("topic-%d", i), PatternLiteral, fmt.Sprintf("User:u%d", i%100), "*", OpRead, PermissionAllow})
	}
	az := NewAuthorizer(acls, nil, false)
	p := User("u42")
	b.ReportAllocs()
	for b.Loop() {
		if az.AllowsAny(p, "127.0.0.1", OpWrite, ResourceTopic) {
			b.Fatal("allowed")
		}
	}
}
