package auth

import (
	"crypto/x509/pkix"
	"errors"
	"testing"

	"github.com/strata-io/strata/internal/testutil/tlstest"
)

func TestSubjectDN(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	p := ca.Client(t, pkix.Name{CommonName: "alice", OrganizationalUnit: []string{"eng"}, Organization: []string{"Example"}, Country: []string{"US"}})
	cert := p.TLS.Leaf
	if got, want := SubjectDN(cert), "CN=alice,OU=eng,O=Example,C=US"; got != want {
		t.Fatalf("SubjectDN = %q, want %q", got, want)
	}
}

func TestPrincipalMapping(t *testing.T) {
	const dn = "CN=Alice,OU=ServiceUsers,O=Example,C=US"
	for _, tc := range []struct {
		rules, want string
		err         error
	}{
		{"", dn, nil},
		{"DEFAULT", dn, nil},
		{"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "Alice", nil},
		{"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L", "alice", nil},
		{"RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U", "ALICE@SERVICEUSERS", nil},
		{"RULE:^CN=(.*?),OU=Admins.*$/$1/, DEFAULT", dn, nil},
		{"RULE:^CN=(.*?),OU=Admins.*$/$1/,RULE:^CN=([^,]*),.*$/user-$1/L", "user-alice", nil},
		{"RULE:^CN=(.*?),OU=Admins.*$/$1/", "", ErrNoMappingRule},
	} {
		m, err := ParseMappingRules(tc.rules)
		if err != nil {
			t.Fatalf("%q: %v", tc.rules, err)
		}
		got, err := m.Map(dn)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("%q: Map = %q, %v; want %q, %v", tc.rules, got, err, tc.want, tc.err)
		}
	}
	for _, bad := range []string{"RULE:x", "RULE:(/y/", "NOPE", "RULE:a/b/Q"} {
		if _, err := ParseMappingRules(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
