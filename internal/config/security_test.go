package config

import (
	"errors"
	"testing"
)

func TestListenerSecurity(t *testing.T) {
	s, err := NewServer(map[string]string{
		"listeners":                                             "PLAINTEXT://:9092,EXTERNAL://:9094,CONTROLLER://:9093",
		"listener.security.protocol.map":                        "PLAINTEXT:PLAINTEXT,EXTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT",
		"ssl.client.auth":                                       "none",
		"listener.name.external.ssl.client.auth":                "required",
		"listener.name.external.scram-sha-256.sasl.jaas.config": "x",
		"controller.quorum.voters":                              "1@localhost:9093",
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Cluster()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Brokers) != 2 || c.Brokers[1].Name != "EXTERNAL" || c.Brokers[1].Protocol != ProtocolSASLSSL || c.Client.Protocol != ProtocolPlaintext {
		t.Fatalf("brokers %+v", c.Brokers)
	}
	if got := s.ListenerString("EXTERNAL", "ssl.client.auth"); got != "required" {
		t.Fatalf("EXTERNAL ssl.client.auth = %q", got)
	}
	if got := s.ListenerString("PLAINTEXT", "ssl.client.auth"); got != "none" {
		t.Fatalf("PLAINTEXT ssl.client.auth = %q", got)
	}
	if got := s.ListenerMechanismString("EXTERNAL", "SCRAM-SHA-256", "sasl.jaas.config"); got != "x" {
		t.Fatalf("per-mechanism key = %q", got)
	}

	for name, overrides := range map[string]map[string]string{
		"unmapped listener": {"listeners": "FOO://:9092"},
		"bad protocol":      {"listener.security.protocol.map": "PLAINTEXT:TLS"},
		"bad override":      {"listener.name.plaintext.ssl.client.auth": "sometimes"},
	} {
		if _, err := NewServer(overrides); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
