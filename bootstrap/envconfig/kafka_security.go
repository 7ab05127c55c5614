package envconfig

import "github.com/sink-io/sink/adapters/kafka"

// KafkaSecurityConfig configures TLS and SASL towards the Kafka brokers
// (kafka.SecurityConfig).
type KafkaSecurityConfig struct {
	TLSEnabled    bool   `env:"SINK_KAFKA_TLS_ENABLED" envDefault:"false" desc:"Connect to the Kafka brokers over TLS (required by the other SINK_KAFKA_TLS_* settings)."`
	TLSCAFile     string `env:"SINK_KAFKA_TLS_CA_FILE" desc:"PEM CA certificates that verify the Kafka brokers (default: the system roots)."`
	TLSCertFile   string `env:"SINK_KAFKA_TLS_CERT_FILE" desc:"PEM client certificate for Kafka brokers that require mutual TLS (with SINK_KAFKA_TLS_KEY_FILE)."`
	TLSKeyFile    string `env:"SINK_KAFKA_TLS_KEY_FILE" desc:"PEM private key of SINK_KAFKA_TLS_CERT_FILE."`
	SASLMechanism string `env:"SINK_KAFKA_SASL_MECHANISM" desc:"SASL authentication towards the Kafka brokers: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: none). Use it with TLS: PLAIN sends the password as is."`
	SASLUsername  string `env:"SINK_KAFKA_SASL_USERNAME" desc:"SASL user name (with SINK_KAFKA_SASL_MECHANISM)."`
	SASLPassword  Secret `env:"SINK_KAFKA_SASL_PASSWORD" desc:"SASL password (with SINK_KAFKA_SASL_MECHANISM). Never logged."`
}

// Kafka returns the Kafka adapter's security configuration, whose error
// messages name the SINK_KAFKA_* variables. Every Kafka client of the
// process must use it (kafka.ClientConfig.Security, or
// kafka.SecurityConfig.Opts for other clients).
func (k KafkaSecurityConfig) Kafka() kafka.SecurityConfig {
	return kafka.SecurityConfig{
		TLS:           k.TLSEnabled,
		CAFile:        k.TLSCAFile,
		CertFile:      k.TLSCertFile,
		KeyFile:       k.TLSKeyFile,
		SASLMechanism: k.SASLMechanism,
		Username:      k.SASLUsername,
		Password:      k.SASLPassword.Reveal(),
		Names: kafka.SecurityNames{
			TLS:           "SINK_KAFKA_TLS_ENABLED",
			CAFile:        "SINK_KAFKA_TLS_CA_FILE",
			CertFile:      "SINK_KAFKA_TLS_CERT_FILE",
			KeyFile:       "SINK_KAFKA_TLS_KEY_FILE",
			SASLMechanism: "SINK_KAFKA_SASL_MECHANISM",
			Username:      "SINK_KAFKA_SASL_USERNAME",
			Password:      "SINK_KAFKA_SASL_PASSWORD",
		},
	}
}

// validate reports every problem of the Kafka security settings, reading
// the certificate files. Messages never contain the password.
func (k KafkaSecurityConfig) validate() error { return k.Kafka().Validate() }
