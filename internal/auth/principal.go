package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Principal is who a connection acts as, in Kafka's KafkaPrincipal form
// Type:Name. Every Strata principal has type User.
type Principal struct {
	Type, Name string
}

// Anonymous is the principal of an unauthenticated connection (PLAINTEXT,
// or SSL without a client certificate), as in Kafka.
var Anonymous = Principal{Type: "User", Name: "ANONYMOUS"}

// User returns the principal User:name.
func User(name string) Principal { return Principal{Type: "User", Name: name} }

// String returns Type:Name, the form ACLs and super.users name.
func (p Principal) String() string { return p.Type + ":" + p.Name }

// ParsePrincipal parses Type:Name.
func ParsePrincipal(s string) (Principal, error) {
	typ, name, ok := strings.Cut(s, ":")
	if !ok || typ == "" {
		return Principal{}, fmt.Errorf("auth: principal %q: want Type:Name, e.g. User:alice", s)
	}
	return Principal{Type: typ, Name: name}, nil
}

// SubjectDN returns a certificate's subject distinguished name as Java's
// X500Principal.getName() writes it (RFC 2253: the most specific
// attribute first, e.g. CN=alice,OU=eng,O=Example), which Kafka's DEFAULT
// principal mapping uses.
func SubjectDN(cert *x509.Certificate) string {
	var seq pkix.RDNSequence
	if rest, err := asn1.Unmarshal(cert.RawSubject, &seq); err != nil || len(rest) > 0 {
		return cert.Subject.String()
	}
	return seq.String()
}

// PrincipalMapper turns a certificate subject into a principal name by
// ssl.principal.mapping.rules: rules tried in order, the first that
// matches wins, DEFAULT matching anything and keeping the name whole (as
// Kafka's SslPrincipalMapper).
type PrincipalMapper struct {
	rules []mappingRule
}

type mappingRule struct {
	isDefault   bool
	pattern     *regexp.Regexp
	replacement string
	toLower     bool
	toUpper     bool
}

// ErrNoMappingRule is returned when no rule of ssl.principal.mapping.rules
// matches a certificate's subject; the connection is refused.
var ErrNoMappingRule = errors.New("auth: no ssl.principal.mapping.rules rule matches the certificate subject")

// ParseMappingRules parses ssl.principal.mapping.rules: a comma-separated
// list of DEFAULT and RULE:pattern/replacement/[LU] (commas inside a
// rule's pattern belong to it).
func ParseMappingRules(s string) (*PrincipalMapper, error) {
	m := &PrincipalMapper{}
	rest := strings.TrimSpace(s)
	if rest == "" {
		rest = "DEFAULT"
	}
	for rest != "" {
		rest = strings.TrimLeft(rest, " \t\n,")
		switch {
		case rest == "":
		case strings.HasPrefix(rest, "DEFAULT"):
			m.rules = append(m.rules, mappingRule{isDefault: true})
			rest = rest[len("DEFAULT"):]
		case strings.HasPrefix(rest, "RULE:"):
			r, after, err := parseRule(rest[len("RULE:"):])
			if err != nil {
				return nil, err
			}
			m.rules = append(m.rules, r)
			rest = after
		default:
			return nil, fmt.Errorf("auth: ssl.principal.mapping.rules: unexpected %q: want DEFAULT or RULE:pattern/replacement/[LU]", rest)
		}
	}
	return m, nil
}

// parseRule parses pattern/replacement/[LU] and returns what follows.
func parseRule(s string) (mappingRule, string, error) {
	var r mappingRule
	pattern, s, ok := strings.Cut(s, "/")
	if !ok {
		return r, "", fmt.Errorf("auth: ssl.principal.mapping.rules: RULE:%s: want pattern/replacement/", pattern)
	}
	replacement, s, ok := strings.Cut(s, "/")
	if !ok {
		return r, "", fmt.Errorf("auth: ssl.principal.mapping.rules: RULE:%s/%s: want pattern/replacement/", pattern, replacement)
	}
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return r, "", fmt.Errorf("auth: ssl.principal.mapping.rules: pattern %q: %v", pattern, err)
	}
	r.pattern, r.replacement = re, replacement
	switch {
	case strings.HasPrefix(s, "L"):
		r.toLower, s = true, s[1:]
	case strings.HasPrefix(s, "U"):
		r.toUpper, s = true, s[1:]
	}
	if s = strings.TrimLeft(s, " \t"); s != "" && s[0] != ',' {
		return r, "", fmt.Errorf("auth: ssl.principal.mapping.rules: unexpected %q after a rule", s)
	}
	return r, s, nil
}

// Map returns the principal name for a distinguished name.
func (m *PrincipalMapper) Map(dn string) (string, error) {
	for _, r := range m.rules {
		if r.isDefault {
			return dn, nil
		}
		match := r.pattern.FindStringSubmatchIndex(dn)
		if match == nil {
			continue
		}
		name := string(r.pattern.ExpandString(nil, r.replacement, dn, match))
		switch {
		case r.toLower:
			name = strings.ToLower(name)
		case r.toUpper:
			name = strings.ToUpper(name)
		}
		return name, nil
	}
	return "", fmt.Errorf("%w: %s", ErrNoMappingRule, dn)
}
