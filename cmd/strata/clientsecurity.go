package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/config"
)

// securityOptions are the client commands' TLS and SASL flags, with the
// names of Kafka's client properties, which a --command-config file may
// also give (as Kafka's tools take one).
type securityOptions struct {
	commandConfig string
	protocol      string
	caFile        string
	certFile      string
	keyFile       string
	keyPassword   string
	mechanism     string
	username      string
	password      string
}

const (
	envSASLPassword   = "STRATA_SASL_PASSWORD"
	envTLSKeyPassword = "STRATA_TLS_KEY_PASSWORD"
)

func (s *securityOptions) addFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&s.commandConfig, "command-config", "", "a client properties file (security.protocol, ssl.truststore.location, ssl.keystore.location, ssl.key.password, sasl.mechanism, sasl.username, sasl.password) as Kafka's tools take")
	f.StringVar(&s.protocol, "security-protocol", "", "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL")
	f.StringVar(&s.caFile, "tls-ca", "", "PEM file of the CA certificates that the brokers' certificates must chain to (system roots when unset)")
	f.StringVar(&s.certFile, "tls-cert", "", "PEM client certificate, for listeners with ssl.client.auth")
	f.StringVar(&s.keyFile, "tls-key", "", "PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC 1; or encrypted PKCS#8 with --tls-key-password)")
	f.StringVar(&s.keyPassword, "tls-key-password", "", "the password of an encrypted --tls-key, as Kafka's ssl.key.password (default from $"+envTLSKeyPassword+")")
	f.StringVar(&s.mechanism, "sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	f.StringVar(&s.username, "sasl-username", "", "SASL user name")
	f.StringVar(&s.password, "sasl-password", "", "SASL password (default from $"+envSASLPassword+")")
}

// opts returns the franz-go options the flags (and --command-config)
// ask for.
func (s *securityOptions) opts() ([]kgo.Opt, error) {
	if s.commandConfig != "" {
		if err := s.readCommandConfig(); err != nil {
			return nil, err
		}
	}
	if s.password == "" {
		s.password = os.Getenv(envSASLPassword)
	}
	if s.keyPassword == "" {
		s.keyPassword = os.Getenv(envTLSKeyPassword)
	}
	protocol := strings.ToUpper(s.protocol)
	if protocol == "" {
		switch {
		case s.mechanism != "" && (s.caFile != "" || s.certFile != ""):
			protocol = config.ProtocolSASLSSL
		case s.mechanism != "":
			protocol = config.ProtocolSASLPlaintext
		case s.caFile != "" || s.certFile != "":
			protocol = config.ProtocolSSL
		default:
			protocol = config.ProtocolPlaintext
		}
	}
	var opts []kgo.Opt
	switch protocol {
	case config.ProtocolPlaintext, config.ProtocolSASLPlaintext:
	case config.ProtocolSSL, config.ProtocolSASLSSL:
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.caFile != "" {
			pem, err := os.ReadFile(s.caFile)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", s.caFile)
			}
		}
		if s.certFile != "" || s.keyFile != "" {
			key := s.keyFile
			if key == "" {
				key = s.certFile // a PEM key store with both
			}
			chainPEM, err := os.ReadFile(s.certFile)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert: %w", err)
			}
			keyPEM, err := os.ReadFile(key)
			if err != nil {
				return nil, fmt.Errorf("--tls-key: %w", err)
			}
			cert, err := auth.KeyPair(chainPEM, keyPEM, s.keyPassword)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	default:
		return nil, fmt.Errorf("--security-protocol %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", s.protocol)
	}
	if config.IsSASL(protocol) {
		if s.mechanism == "" || s.username == "" {
			return nil, errors.New("SASL needs --sasl-mechanism and --sasl-username (and --sasl-password or $" + envSASLPassword + ")")
		}
		switch strings.ToUpper(s.mechanism) {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: s.username, Pass: s.password}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: s.username, Pass: s.password}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: s.username, Pass: s.password}.AsSha512Mechanism()))
		default:
			return nil, fmt.Errorf("--sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.mechanism)
		}
	}
	return opts, nil
}

// readCommandConfig fills the flags left unset from a client properties
// file with Kafka's client keys.
func (s *securityOptions) readCommandConfig() error {
	f, err := os.Open(s.commandConfig)
	if err != nil {
		return fmt.Errorf("--command-config: %w", err)
	}
	defer f.Close()
	props, err := config.ParseProperties(f)
	if err != nil {
		return fmt.Errorf("--command-config %s: %w", s.commandConfig, err)
	}
	set := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	for _, kv := range props {
		switch kv[0] {
		case "security.protocol":
			set(&s.protocol, kv[1])
		case "ssl.truststore.location", "ssl.ca.location":
			set(&s.caFile, kv[1])
		case "ssl.keystore.location", "ssl.certificate.location":
			set(&s.certFile, kv[1])
		case "ssl.key.location":
			set(&s.keyFile, kv[1])
		case "ssl.key.password":
			set(&s.keyPassword, kv[1])
		case "sasl.mechanism", "sasl.mechanisms":
			set(&s.mechanism, kv[1])
		case "sasl.username":
			set(&s.username, kv[1])
		case "sasl.password":
			set(&s.password, kv[1])
		}
	}
	return nil
}
