package auth

import (
	"encoding/base64"
	"errors"
	"testing"
)

// TestScramRFC7677 runs the SCRAM-SHA-256 example exchange of RFC 7677
// section 3 against the server.
func TestScramRFC7677(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	salted, err := ScramSHA256.SaltPassword("pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	cred := ScramSHA256.CredentialFromSaltedPassword(salt, salted, 4096)
	lookup := func(user string, m ScramMechanism) (ScramCredential, bool) {
		return cred, user == "user" && m == ScramSHA256
	}
	newServer := func() *ScramServer {
		s := NewScramServer(ScramSHA256, lookup)
		s.nonce = func() string { return "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0" }
		return s
	}
	s := newServer()
	reply, done, err := s.Step([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
	if err != nil || done {
		t.Fatal(err)
	}
	if want := "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"; string(reply) != want {
		t.Fatalf("server-first %q, want %q", reply, want)
	}
	final := "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
	reply, done, err = s.Step([]byte(final))
	if err != nil || !done {
		t.Fatalf("client-final: %v", err)
	}
	if want := "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="; string(reply) != want {
		t.Fatalf("server-final %q, want %q", reply, want)
	}
	if s.Principal() != User("user") {
		t.Fatalf("principal %v", s.Principal())
	}

	for name, tc := range map[string]struct{ first, final string }{
		"wrong proof":    {"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="},
		"wrong nonce":    {"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", "c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="},
		"wrong binding":  {"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", "c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="},
		"unknown user":   {"n,,n=someone,r=abc", ""},
		"channel bound":  {"p=tls-unique,,n=user,r=abc", ""},
		"other authzid":  {"n,a=admin,n=user,r=abc", ""},
		"malformed":      {"hello", ""},
		"no proof":       {"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"},
		"bad name quote": {"n,,n=us=er,r=abc", ""},
	} {
		s := newServer()
		_, _, err := s.Step([]byte(tc.first))
		if err == nil && tc.final != "" {
			_, _, err = s.Step([]byte(tc.final))
		}
		if !errors.Is(err, ErrAuthenticationFailed) && !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}

func TestPlain(t *testing.T) {
	users, user, pass, err := ParseJAASUsers(`org.apache.kafka.common.security.plain.PlainLoginModule required
		username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice secret";`)
	if err != nil {
		t.Fatal(err)
	}
	if user != "admin" || pass != "admin-secret" || len(users) != 2 || users["alice"] != "alice secret" {
		t.Fatalf("parsed %v %q %q", users, user, pass)
	}
	for msg, ok := range map[string]bool{
		"\x00alice\x00alice secret":      true,
		"alice\x00alice\x00alice secret": true,
		"\x00alice\x00wrong":             false,
		"\x00bob\x00alice secret":        false,
		"admin\x00alice\x00alice secret": false,
		"\x00alice":                      false,
		"\x00\x00":                       false,
	} {
		p := NewPlainServer(users)
		_, done, err := p.Step([]byte(msg))
		if done != ok || (err == nil) != ok {
			t.Errorf("%q: done %v err %v, want ok=%v", msg, done, err, ok)
		}
	}
	if _, _, _, err := ParseJAASUsers("broken"); err == nil {
		t.Error("a JAAS line without options parsed")
	}
}
