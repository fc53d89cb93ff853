package auth

import (
	"encoding/base64"
	"errors"
	"testing"

	"github.com/xdg-go/scram"
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

// FuzzScramServer feeds any two client messages to a SCRAM exchange: it
// refuses or answers, and never panics (github.com/xdg-go/scram v1.1.2's
// server does, on a client-first message that starts with a comma).
func FuzzScramServer(f *testing.F) {
	salt := []byte("salt")
	salted, err := ScramSHA512.SaltPassword("pencil", salt, MinScramIterations)
	if err != nil {
		f.Fatal(err)
	}
	cred := ScramSHA512.CredentialFromSaltedPassword(salt, salted, MinScramIterations)
	f.Add("n,,n=user,r=abc", "c=biws,r=abc,p=AAAA")
	f.Add(",,n=user,r=abc", "")
	f.Add("n,a=user,n=us=3Der,r=abc", "c=,r=,p=")
	f.Add("y,,m=ext,n=user,r=abc", ",,,")
	f.Fuzz(func(t *testing.T, first, final string) {
		s := NewScramServer(ScramSHA512, func(user string, m ScramMechanism) (ScramCredential, bool) {
			return cred, user == "user"
		})
		if _, _, err := s.Step([]byte(first)); err != nil {
			return
		}
		if _, done, err := s.Step([]byte(final)); done && err == nil {
			t.Fatalf("%q then %q authenticated without the password", first, final)
		}
	})
}

// TestScramWithLibraryClient authenticates github.com/xdg-go/scram's
// client conversation (the SCRAM client of franz-go) against the server,
// for both mechanisms and a name with the characters RFC 5802 escapes, and
// checks that a wrong password is refused.
func TestScramWithLibraryClient(t *testing.T) {
	for _, m := range []ScramMechanism{ScramSHA256, ScramSHA512} {
		hash := scram.SHA256
		if m == ScramSHA512 {
			hash = scram.SHA512
		}
		salt := []byte("a salt of 16 b..")
		salted, err := m.SaltPassword("pass word", salt, MinScramIterations)
		if err != nil {
			t.Fatal(err)
		}
		cred := m.CredentialFromSaltedPassword(salt, salted, MinScramIterations)
		const user = "al,ice=x"
		for password, ok := range map[string]bool{"pass word": true, "pass-word": false} {
			client, err := hash.NewClient(user, password, "")
			if err != nil {
				t.Fatal(err)
			}
			conv := client.NewConversation()
			server := NewScramServer(m, func(name string, got ScramMechanism) (ScramCredential, bool) {
				return cred, name == user && got == m
			})
			msg, err := conv.Step("")
			var done bool
			for err == nil && !done {
				var reply []byte
				reply, done, err = server.Step([]byte(msg))
				if err == nil {
					msg, err = conv.Step(string(reply))
				}
			}
			if ok && (err != nil || !done || !conv.Valid() || server.Principal() != User(user)) {
				t.Errorf("%v, right password: err %v done %v client valid %v principal %v", m, err, done, conv.Valid(), server.Principal())
			}
			if !ok && !errors.Is(err, ErrAuthenticationFailed) {
				t.Errorf("%v, wrong password: %v, want %v", m, err, ErrAuthenticationFailed)
			}
		}
	}
}
