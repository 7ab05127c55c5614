package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sink-io/sink/internal/pemfile"
)

// SASL mechanisms of SecurityConfig.SASLMechanism.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SecurityConfig configures TLS and SASL towards the brokers. The zero
// value is plaintext without authentication. fmt, slog and JSON never show
// the password.
type SecurityConfig struct {
	// TLS connects to the brokers over TLS 1.2 or later (required by the
	// other TLS fields).
	TLS bool
	// CAFile holds PEM CA certificates that verify the brokers (empty: the
	// system roots).
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// brokers that require mutual TLS (both or neither).
	CertFile, KeyFile string
	// SASLMechanism is SASLPlain, SASLScramSHA256 or SASLScramSHA512 (any
	// case; empty: no SASL). It needs Username and Password.
	SASLMechanism string
	Username      string
	Password      string `json:"-"`

	// Names, when set, name the fields in error messages (for example the
	// environment variables they come from).
	Names SecurityNames `json:"-"`
}

// SecurityNames name the fields of SecurityConfig in its error messages;
// an empty name stands for the field's own name.
type SecurityNames struct {
	TLS, CAFile, CertFile, KeyFile, SASLMechanism, Username, Password string
}

func orField(name, field string) string {
	if name == "" {
		return field
	}
	return name
}

// names returns the names of the fields with the defaults filled in.
func (c SecurityConfig) names() SecurityNames {
	n := c.Names
	return SecurityNames{
		TLS: orField(n.TLS, "TLS"), CAFile: orField(n.CAFile, "CAFile"), CertFile: orField(n.CertFile, "CertFile"), KeyFile: orField(n.KeyFile, "KeyFile"),
		SASLMechanism: orField(n.SASLMechanism, "SASLMechanism"), Username: orField(n.Username, "Username"), Password: orField(n.Password, "Password"),
	}
}

// redactedSecurity is a SecurityConfig with the password replaced, for
// printing.
type redactedSecurity struct {
	TLS                               bool
	CAFile, CertFile, KeyFile         string
	SASLMechanism, Username, Password string
}

func (c SecurityConfig) redacted() redactedSecurity {
	r := redactedSecurity{TLS: c.TLS, CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, SASLMechanism: c.SASLMechanism, Username: c.Username}
	if c.Password != "" {
		r.Password = "[redacted]"
	}
	return r
}

// String implements fmt.Stringer without the password.
func (c SecurityConfig) String() string { return fmt.Sprintf("%+v", c.redacted()) }

// GoString implements fmt.GoStringer (%#v) without the password.
func (c SecurityConfig) GoString() string {
	return fmt.Sprintf("kafka.SecurityConfig%+v", c.redacted())
}

// LogValue implements slog.LogValuer without the password.
func (c SecurityConfig) LogValue() slog.Value {
	r := c.redacted()
	return slog.GroupValue(slog.Bool("tls", r.TLS), slog.String("ca_file", r.CAFile), slog.String("cert_file", r.CertFile),
		slog.String("key_file", r.KeyFile), slog.String("sasl_mechanism", r.SASLMechanism), slog.String("username", r.Username),
		slog.String("password", r.Password))
}

// Validate reports every problem of c at once. It reads the certificate
// files, so a missing or broken file is reported before any connection is
// made. Messages never contain the password.
func (c SecurityConfig) Validate() error {
	n := c.names()
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !c.TLS {
		for _, f := range []struct{ name, value string }{{n.CAFile, c.CAFile}, {n.CertFile, c.CertFile}, {n.KeyFile, c.KeyFile}} {
			if f.value != "" {
				add("%s is set but %s is not true: enable TLS towards Kafka or unset it", f.name, n.TLS)
			}
		}
	} else if _, err := c.tlsConfig(); err != nil {
		errs = append(errs, err)
	}
	switch strings.ToUpper(c.SASLMechanism) {
	case "":
		if c.Username != "" || c.Password != "" {
			add("%s or %s is set but %s is not: set it to %s, %s or %s", n.Username, n.Password, n.SASLMechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.Username == "" {
			add("%s=%s needs %s", n.SASLMechanism, c.SASLMechanism, n.Username)
		}
		if c.Password == "" {
			add("%s=%s needs %s", n.SASLMechanism, c.SASLMechanism, n.Password)
		}
	default:
		errs = append(errs, c.unknownMechanism())
	}
	return errors.Join(errs...)
}

func (c SecurityConfig) unknownMechanism() error {
	return fmt.Errorf("%s must be %s, %s or %s, got %q", c.names().SASLMechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512, c.SASLMechanism)
}

// Opts returns the franz-go client options of c (kgo.DialTLSConfig,
// kgo.SASL; none for the zero value). NewClient adds them from
// ClientConfig.Security; other clients of the brokers (kgo.NewClient)
// must get them too.
func (c SecurityConfig) Opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("cannot configure TLS towards Kafka: %w", err)
	}
	if tlsCfg != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	mech, err := c.mechanism()
	if err != nil {
		return nil, fmt.Errorf("cannot configure SASL towards Kafka: %w", err)
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// tlsConfig returns the client TLS configuration (nil without TLS),
// reporting every problem of the files.
func (c SecurityConfig) tlsConfig() (*tls.Config, error) {
	if !c.TLS {
		return nil, nil
	}
	n := c.names()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var errs []error
	if c.CAFile != "" {
		pool, err := pemfile.LoadCertPool(n.CAFile, c.CAFile)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case c.CertFile != "" && c.KeyFile != "":
		pair, err := pemfile.LoadKeyPair(n.CertFile, c.CertFile, n.KeyFile, c.KeyFile)
		if err != nil {
			errs = append(errs, err)
		} else {
			cfg.Certificates = []tls.Certificate{pair}
		}
	case c.CertFile != "":
		errs = append(errs, fmt.Errorf("%s is set but %s is not: set both for a client certificate, or neither", n.CertFile, n.KeyFile))
	case c.KeyFile != "":
		errs = append(errs, fmt.Errorf("%s is set but %s is not: set both for a client certificate, or neither", n.KeyFile, n.CertFile))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// mechanism returns the SASL mechanism (nil without SASL).
func (c SecurityConfig) mechanism() (sasl.Mechanism, error) {
	switch strings.ToUpper(c.SASLMechanism) {
	case "":
		return nil, nil
	case SASLPlain:
		return plain.Auth{User: c.Username, Pass: c.Password}.AsMechanism(), nil
	case SASLScramSHA256:
		return scram.Auth{User: c.Username, Pass: c.Password}.AsSha256Mechanism(), nil
	case SASLScramSHA512:
		return scram.Auth{User: c.Username, Pass: c.Password}.AsSha512Mechanism(), nil
	default:
		return nil, c.unknownMechanism()
	}
}
