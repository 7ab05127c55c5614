package envconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sink-io/sink/adapters/auth"
	"github.com/sink-io/sink/adapters/sinkgrpc"
	"github.com/sink-io/sink/internal/pemfile"
)

// TLSConfig enables TLS and mutual TLS on the gRPC API.
type TLSConfig struct {
	CertFile     string `env:"SINK_TLS_CERT_FILE" desc:"PEM certificate (chain) of the gRPC API. With SINK_TLS_KEY_FILE it turns on TLS; both files are re-read when they change (certificate rotation)."`
	KeyFile      string `env:"SINK_TLS_KEY_FILE" desc:"PEM private key of SINK_TLS_CERT_FILE."`
	ClientCAFile string `env:"SINK_TLS_CLIENT_CA_FILE" desc:"PEM CA certificates of client certificates. When set, the gRPC API requires and verifies a client certificate on every connection (mutual TLS). Re-read when it changes (CA rotation)."`
}

// Enabled reports whether the gRPC API serves TLS.
func (t TLSConfig) Enabled() bool { return t.Server().Enabled() }

// Server returns the auth adapter's server TLS configuration, whose error
// messages name the SINK_TLS_* variables.
func (t TLSConfig) Server() auth.ServerTLSConfig {
	return auth.ServerTLSConfig{
		CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile,
		Names: auth.ServerTLSNames{CertFile: "SINK_TLS_CERT_FILE", KeyFile: "SINK_TLS_KEY_FILE", ClientCAFile: "SINK_TLS_CLIENT_CA_FILE"},
	}
}

// AuthConfig enables authentication and authorization.
type AuthConfig struct {
	TokenFile      string        `env:"SINK_AUTH_TOKEN_FILE" desc:"Authorization file (JSON): principals with hashed bearer tokens (sink hash-token) and/or client-certificate identities, and their read/write/delete grants per store/namespace/dataset. When set, every call must authenticate and every operation is authorized. See docs/security.md."`
	ReloadInterval time.Duration `env:"SINK_AUTH_RELOAD_INTERVAL" envDefault:"10s" desc:"How often SINK_AUTH_TOKEN_FILE is checked for changes; it is also reloaded on SIGHUP. An invalid new version is logged and the previous one stays in force."`
}

// Enabled reports whether calls must authenticate.
func (a AuthConfig) Enabled() bool { return a.TokenFile != "" }

// RateLimitConfig bounds the work the served store, and each principal,
// accepts. Only operations that passed validation and authorization count.
type RateLimitConfig struct {
	Ops               int `env:"SINK_RATE_LIMIT_OPS" envDefault:"0" desc:"Operations per second the store admits (reads, puts, merges and deletes that passed validation and authorization; invalid and denied ones cost nothing; 0 = unlimited). A request that does not fit is rejected whole with RESOURCE_EXHAUSTED and a retry delay."`
	OpsBurst          int `env:"SINK_RATE_LIMIT_OPS_BURST" envDefault:"0" desc:"Operations admitted at once above the rate (0 = the larger of SINK_RATE_LIMIT_OPS and SINK_MAX_OPERATIONS; must not be below SINK_MAX_OPERATIONS)."`
	Bytes             int `env:"SINK_RATE_LIMIT_BYTES" envDefault:"0" desc:"Bytes per second the store admits: keys, documents and intents of the operations that passed validation and authorization (0 = unlimited)."`
	BytesBurst        int `env:"SINK_RATE_LIMIT_BYTES_BURST" envDefault:"0" desc:"Bytes admitted at once above the rate (0 = the larger of SINK_RATE_LIMIT_BYTES and SINK_MAX_REQUEST_BYTES plus 1 MiB; must not be below SINK_MAX_REQUEST_BYTES)."`
	PrincipalOps      int `env:"SINK_RATE_LIMIT_PRINCIPAL_OPS" envDefault:"0" desc:"Operations per second each authenticated principal may have admitted, beside the store's limit, so that one caller cannot spend the whole store's budget (0 = unlimited; needs SINK_AUTH_TOKEN_FILE to have principals)."`
	PrincipalOpsBurst int `env:"SINK_RATE_LIMIT_PRINCIPAL_OPS_BURST" envDefault:"0" desc:"Operations one principal may have admitted at once above its rate (0 = the larger of SINK_RATE_LIMIT_PRINCIPAL_OPS and SINK_MAX_OPERATIONS; must not be below SINK_MAX_OPERATIONS)."`
}

// Secret is a setting that must never be printed: fmt, slog and JSON show
// it as [redacted]. Reveal returns the value.
type Secret string

const redacted = "[redacted]"

// Reveal returns the secret value.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer (%#v).
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON keeps the secret out of JSON dumps.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalText reads the secret from the environment.
func (s *Secret) UnmarshalText(b []byte) error {
	*s = Secret(b)
	return nil
}

// validateSecurity reports every problem of the TLS, authorization, rate
// limit and Kafka security settings. Files are read and parsed, so a
// missing or broken file stops start-up with a clear message.
func (c Config) validateSecurity(unparsed map[string]bool) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := c.TLS.Server().Validate(); err != nil {
		errs = append(errs, err)
	}
	if a := c.Auth; a.Enabled() {
		if b, err := os.ReadFile(a.TokenFile); err != nil {
			add("SINK_AUTH_TOKEN_FILE: cannot read %q: %v", a.TokenFile, pemfile.PathError(err))
		} else if err := auth.Check(b); err != nil {
			add("SINK_AUTH_TOKEN_FILE %q: %v", a.TokenFile, err)
		}
	}
	if c.Auth.ReloadInterval <= 0 && !unparsed["SINK_AUTH_RELOAD_INTERVAL"] {
		add("SINK_AUTH_RELOAD_INTERVAL must be positive, got %s", c.Auth.ReloadInterval)
	}
	r := c.RateLimit
	for _, x := range []struct {
		rate, burst           int
		rateName, burstName   string
		largest               int
		largestName, largestU string
	}{
		{r.Ops, r.OpsBurst, "SINK_RATE_LIMIT_OPS", "SINK_RATE_LIMIT_OPS_BURST", c.MaxOperations, "SINK_MAX_OPERATIONS", "operations"},
		{r.Bytes, r.BytesBurst, "SINK_RATE_LIMIT_BYTES", "SINK_RATE_LIMIT_BYTES_BURST", c.MaxRequestBytes, "SINK_MAX_REQUEST_BYTES", "bytes"},
		{r.PrincipalOps, r.PrincipalOpsBurst, "SINK_RATE_LIMIT_PRINCIPAL_OPS", "SINK_RATE_LIMIT_PRINCIPAL_OPS_BURST", c.MaxOperations, "SINK_MAX_OPERATIONS", "operations"},
	} {
		if x.rate < 0 {
			add("%s must not be negative (0 = unlimited), got %d", x.rateName, x.rate)
		}
		switch {
		case x.burst < 0:
			add("%s must not be negative, got %d", x.burstName, x.burst)
		case x.burst > 0 && x.rate == 0 && !unparsed[x.rateName]:
			add("%s is set but %s is not: a burst needs a rate", x.burstName, x.rateName)
		case x.burst > 0 && x.burst < x.largest:
			add("%s (%d) must not be below %s (%d): the largest requests could never be admitted", x.burstName, x.burst, x.largestName, x.largest)
		}
	}
	if err := c.GRPC.validate(unparsed); err != nil {
		errs = append(errs, err)
	}
	if m := c.GRPC.MaxInFlightOperations; m > 0 && m < c.MaxOperations {
		add("SINK_MAX_INFLIGHT_OPERATIONS (%d) must not be below SINK_MAX_OPERATIONS (%d): the largest requests could only run alone", m, c.MaxOperations)
	}
	if err := c.Kafka.Security.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RateLimits returns the gRPC adapter's rate limits with the default bursts.
func (c Config) RateLimits() sinkgrpc.RateLimit {
	r := c.RateLimit
	l := sinkgrpc.RateLimit{OpsPerSecond: float64(r.Ops), OpsBurst: r.OpsBurst, BytesPerSecond: float64(r.Bytes), BytesBurst: r.BytesBurst,
		PrincipalOpsPerSecond: float64(r.PrincipalOps), PrincipalOpsBurst: r.PrincipalOpsBurst}
	if l.OpsBurst == 0 {
		l.OpsBurst = max(r.Ops, c.MaxOperations)
	}
	if l.PrincipalOpsBurst == 0 {
		l.PrincipalOpsBurst = max(r.PrincipalOps, c.MaxOperations)
	}
	if l.BytesBurst == 0 {
		l.BytesBurst = max(r.Bytes, c.MaxRequestBytes+1<<20)
	}
	return l
}
