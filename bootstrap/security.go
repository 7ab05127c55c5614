package bootstrap

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sink-io/sink/adapters/auth"
	sinkgrpc "github.com/sink-io/sink/adapters/grpc"
)

// TLSConfig enables TLS and mutual TLS on the gRPC API.
type TLSConfig struct {
	CertFile     string `env:"SINK_TLS_CERT_FILE" desc:"PEM certificate (chain) of the gRPC API. With SINK_TLS_KEY_FILE it turns on TLS; both files are re-read when they change (certificate rotation)."`
	KeyFile      string `env:"SINK_TLS_KEY_FILE" desc:"PEM private key of SINK_TLS_CERT_FILE."`
	ClientCAFile string `env:"SINK_TLS_CLIENT_CA_FILE" desc:"PEM CA certificates of client certificates. When set, the gRPC API requires and verifies a client certificate on every connection (mutual TLS)."`
}

// Enabled reports whether the gRPC API serves TLS.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" && t.KeyFile != "" }

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
	t := c.TLS
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		add("SINK_TLS_CERT_FILE is set but SINK_TLS_KEY_FILE is not: set both to serve TLS, or neither")
	case t.CertFile == "" && t.KeyFile != "":
		add("SINK_TLS_KEY_FILE is set but SINK_TLS_CERT_FILE is not: set both to serve TLS, or neither")
	case t.Enabled():
		if _, err := loadKeyPair("SINK_TLS_CERT_FILE", t.CertFile, "SINK_TLS_KEY_FILE", t.KeyFile); err != nil {
			errs = append(errs, err)
		}
	}
	if t.ClientCAFile != "" {
		if !t.Enabled() {
			add("SINK_TLS_CLIENT_CA_FILE (mutual TLS) needs TLS: set SINK_TLS_CERT_FILE and SINK_TLS_KEY_FILE too")
		}
		if _, err := loadCertPool("SINK_TLS_CLIENT_CA_FILE", t.ClientCAFile); err != nil {
			errs = append(errs, err)
		}
	}
	if a := c.Auth; a.Enabled() {
		if b, err := os.ReadFile(a.TokenFile); err != nil {
			add("SINK_AUTH_TOKEN_FILE: cannot read %q: %v", a.TokenFile, unwrapPathError(err))
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
	if err := c.Kafka.Security.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RateLimit returns the gRPC adapter's rate limits with the default bursts.
func (c Config) rateLimit() sinkgrpc.RateLimit {
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

// ServerTLSConfig returns the TLS configuration of the gRPC API (nil
// without TLS): TLS 1.2 or later, the key pair re-read when its files
// change, and with a client CA, client certificates required and verified.
func ServerTLSConfig(t TLSConfig, log *slog.Logger) (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	kp := &keyPairReloader{certFile: t.CertFile, keyFile: t.KeyFile, log: log}
	if err := kp.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}
	if t.ClientCAFile != "" {
		pool, err := loadCertPool("SINK_TLS_CLIENT_CA_FILE", t.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// keyPairReloader serves the key pair and reloads it when either file's
// modification time or size changes (checked at most once a second).
type keyPairReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

func (k *keyPairReloader) fileStamp() string {
	s := ""
	for _, f := range []string{k.certFile, k.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return s
}

func (k *keyPairReloader) load() error {
	stamp := k.fileStamp()
	pair, err := loadKeyPair("SINK_TLS_CERT_FILE", k.certFile, "SINK_TLS_KEY_FILE", k.keyFile)
	if err != nil {
		return err
	}
	k.cert, k.stamp = &pair, stamp
	return nil
}

func (k *keyPairReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if now := time.Now(); now.Sub(k.checked) >= time.Second {
		k.checked = now
		if k.fileStamp() != k.stamp {
			if err := k.load(); err != nil {
				k.log.Error("cannot reload the TLS certificate; the previous one stays in use", "error", err)
			} else {
				k.log.Info("reloaded the TLS certificate", "file", k.certFile)
			}
		}
	}
	return k.cert, nil
}

// GRPCServerOptions are the gRPC server options of the security settings:
// TLS credentials, then the authentication interceptors. (Rate limits are
// applied by the application, see ApplicationModule.)
type GRPCServerOptions struct {
	Options []grpc.ServerOption
}

// securityProviders provides GRPCServerOptions; it belongs to GRPCModule.
// With SINK_AUTH_TOKEN_FILE it also watches the file (polling and SIGHUP).
func securityProviders() fx.Option {
	return fx.Provide(func(lc fx.Lifecycle, cfg Config, log *slog.Logger) (GRPCServerOptions, error) {
		var out GRPCServerOptions
		tlsCfg, err := ServerTLSConfig(cfg.TLS, log)
		if err != nil {
			return out, fmt.Errorf("cannot configure TLS: %w", err)
		}
		if tlsCfg != nil {
			out.Options = append(out.Options, grpc.Creds(credentials.NewTLS(tlsCfg)))
		}
		if cfg.Auth.Enabled() {
			a, err := auth.Load(cfg.Auth.TokenFile, log)
			if err != nil {
				return out, fmt.Errorf("cannot load SINK_AUTH_TOKEN_FILE: %w", err)
			}
			watchAuthFile(lc, a, cfg.Auth.ReloadInterval)
			out.Options = append(out.Options, sinkgrpc.NewAuthentication(a, log).ServerOptions()...)
		} else if tlsCfg == nil {
			log.Warn("the gRPC API serves plaintext without authentication (SINK_TLS_CERT_FILE and SINK_AUTH_TOKEN_FILE are not set); expose it only to trusted networks")
		}
		// Rate limits are not an interceptor: the application asks the
		// limiter after validation and authorization (ApplicationModule).
		return out, nil
	})
}

// watchAuthFile reloads the authorization file while the app runs: every
// interval and on SIGHUP.
func watchAuthFile(lc fx.Lifecycle, a *auth.Authenticator, interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	hup := make(chan os.Signal, 1)
	trigger := make(chan struct{}, 1)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			signal.Notify(hup, syscall.SIGHUP)
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						select {
						case trigger <- struct{}{}:
						default:
						}
					}
				}
			}()
			go func() {
				defer close(done)
				a.Watch(ctx, interval, trigger)
			}()
			return nil
		},
		OnStop: func(context.Context) error {
			signal.Stop(hup)
			cancel()
			<-done
			return nil
		},
	})
}
