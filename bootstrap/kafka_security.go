package bootstrap

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms (SINK_KAFKA_SASL_MECHANISM).
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// KafkaSecurityConfig configures TLS and SASL towards the Kafka brokers.
type KafkaSecurityConfig struct {
	TLSEnabled    bool   `env:"SINK_KAFKA_TLS_ENABLED" envDefault:"false" desc:"Connect to the Kafka brokers over TLS (required by the other SINK_KAFKA_TLS_* settings)."`
	TLSCAFile     string `env:"SINK_KAFKA_TLS_CA_FILE" desc:"PEM CA certificates that verify the Kafka brokers (default: the system roots)."`
	TLSCertFile   string `env:"SINK_KAFKA_TLS_CERT_FILE" desc:"PEM client certificate for Kafka brokers that require mutual TLS (with SINK_KAFKA_TLS_KEY_FILE)."`
	TLSKeyFile    string `env:"SINK_KAFKA_TLS_KEY_FILE" desc:"PEM private key of SINK_KAFKA_TLS_CERT_FILE."`
	SASLMechanism string `env:"SINK_KAFKA_SASL_MECHANISM" desc:"SASL authentication towards the Kafka brokers: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: none). Use it with TLS: PLAIN sends the password as is."`
	SASLUsername  string `env:"SINK_KAFKA_SASL_USERNAME" desc:"SASL user name (with SINK_KAFKA_SASL_MECHANISM)."`
	SASLPassword  Secret `env:"SINK_KAFKA_SASL_PASSWORD" desc:"SASL password (with SINK_KAFKA_SASL_MECHANISM). Never logged."`
}

// validate reports every problem of the Kafka security settings. Messages
// never contain the password.
func (k KafkaSecurityConfig) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !k.TLSEnabled {
		for name, v := range map[string]string{"SINK_KAFKA_TLS_CA_FILE": k.TLSCAFile, "SINK_KAFKA_TLS_CERT_FILE": k.TLSCertFile, "SINK_KAFKA_TLS_KEY_FILE": k.TLSKeyFile} {
			if v != "" {
				add("%s is set but SINK_KAFKA_TLS_ENABLED is not true: enable TLS towards Kafka or unset it", name)
			}
		}
	} else if _, err := k.tlsConfig(); err != nil {
		errs = append(errs, err)
	}
	switch strings.ToUpper(k.SASLMechanism) {
	case "":
		if k.SASLUsername != "" || k.SASLPassword != "" {
			add("SINK_KAFKA_SASL_USERNAME or SINK_KAFKA_SASL_PASSWORD is set but SINK_KAFKA_SASL_MECHANISM is not: set it to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if k.SASLUsername == "" {
			add("SINK_KAFKA_SASL_MECHANISM=%s needs SINK_KAFKA_SASL_USERNAME", k.SASLMechanism)
		}
		if k.SASLPassword == "" {
			add("SINK_KAFKA_SASL_MECHANISM=%s needs SINK_KAFKA_SASL_PASSWORD", k.SASLMechanism)
		}
	default:
		add("SINK_KAFKA_SASL_MECHANISM must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", k.SASLMechanism)
	}
	return errors.Join(errs...)
}

// tlsConfig returns the client TLS configuration (nil without TLS),
// reporting every problem of the files.
func (k KafkaSecurityConfig) tlsConfig() (*tls.Config, error) {
	if !k.TLSEnabled {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var errs []error
	if k.TLSCAFile != "" {
		pool, err := loadCertPool("SINK_KAFKA_TLS_CA_FILE", k.TLSCAFile)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case k.TLSCertFile != "" && k.TLSKeyFile != "":
		pair, err := loadKeyPair("SINK_KAFKA_TLS_CERT_FILE", k.TLSCertFile, "SINK_KAFKA_TLS_KEY_FILE", k.TLSKeyFile)
		if err != nil {
			errs = append(errs, err)
		} else {
			cfg.Certificates = []tls.Certificate{pair}
		}
	case k.TLSCertFile != "":
		errs = append(errs, errors.New("SINK_KAFKA_TLS_CERT_FILE is set but SINK_KAFKA_TLS_KEY_FILE is not: set both for a client certificate, or neither"))
	case k.TLSKeyFile != "":
		errs = append(errs, errors.New("SINK_KAFKA_TLS_KEY_FILE is set but SINK_KAFKA_TLS_CERT_FILE is not: set both for a client certificate, or neither"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// mechanism returns the SASL mechanism (nil without SASL).
func (k KafkaSecurityConfig) mechanism() (sasl.Mechanism, error) {
	user, pass := k.SASLUsername, k.SASLPassword.Reveal()
	switch strings.ToUpper(k.SASLMechanism) {
	case "":
		return nil, nil
	case SASLPlain:
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case SASLScramSHA256:
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case SASLScramSHA512:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	default:
		return nil, fmt.Errorf("SINK_KAFKA_SASL_MECHANISM must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", k.SASLMechanism)
	}
}

// KafkaSecurityOpts turns the Kafka TLS and SASL settings into franz-go
// client options (kgo.DialTLSConfig, kgo.SASL). Every Kafka client of the
// process must get them: append them to the options of kgo.NewClient.
func KafkaSecurityOpts(k KafkaSecurityConfig) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tlsCfg, err := k.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("cannot configure TLS towards Kafka: %w", err)
	}
	if tlsCfg != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	mech, err := k.mechanism()
	if err != nil {
		return nil, fmt.Errorf("cannot configure SASL towards Kafka: %w", err)
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// loadCertPool reads PEM CA certificates.
func loadCertPool(setting, path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read %q: %w", setting, path, unwrapPathError(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: %q contains no PEM certificate", setting, path)
	}
	return pool, nil
}

// loadKeyPair loads a PEM certificate and its key, naming both settings
// in errors (which never contain key material).
func loadKeyPair(certSetting, certFile, keySetting, keyFile string) (tls.Certificate, error) {
	var errs []error
	cert, err := os.ReadFile(certFile)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: cannot read %q: %w", certSetting, certFile, unwrapPathError(err)))
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: cannot read %q: %w", keySetting, keyFile, unwrapPathError(err)))
	}
	if len(errs) > 0 {
		return tls.Certificate{}, errors.Join(errs...)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s and %s: cannot load the certificate and key: %w", certSetting, keySetting, err)
	}
	return pair, nil
}

// unwrapPathError drops the path of an *os.PathError (the message names
// the file already).
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
