package auth

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sink-io/sink/internal/pemfile"
)

// ServerTLSConfig names the PEM files of a TLS server.
type ServerTLSConfig struct {
	// CertFile and KeyFile are the server's certificate (chain) and its
	// private key. Both are needed to serve TLS.
	CertFile, KeyFile string
	// ClientCAFile, when set, holds the CA certificates of client
	// certificates: every client must present a certificate one of them
	// signed (mutual TLS).
	ClientCAFile string
	// CheckInterval is how often at most the files are checked for changes,
	// on new connections (default DefaultTLSCheckInterval).
	CheckInterval time.Duration
	// Names, when set, name the fields in error messages (for example the
	// environment variables they come from).
	Names ServerTLSNames
}

// ServerTLSNames name the file fields of ServerTLSConfig in its error
// messages; an empty name stands for the field's own name.
type ServerTLSNames struct {
	CertFile, KeyFile, ClientCAFile string
}

// DefaultTLSCheckInterval is ServerTLSConfig.CheckInterval's default.
const DefaultTLSCheckInterval = time.Second

// Enabled reports whether c serves TLS (both CertFile and KeyFile are set).
func (c ServerTLSConfig) Enabled() bool { return c.CertFile != "" && c.KeyFile != "" }

func (c ServerTLSConfig) names() ServerTLSNames {
	or := func(name, field string) string {
		if name == "" {
			return field
		}
		return name
	}
	return ServerTLSNames{CertFile: or(c.Names.CertFile, "CertFile"), KeyFile: or(c.Names.KeyFile, "KeyFile"), ClientCAFile: or(c.Names.ClientCAFile, "ClientCAFile")}
}

// Validate reports every problem of c at once. It reads and parses the
// files, so a missing or broken file is reported before serving. The zero
// value (no TLS) is valid. Messages never contain key material.
func (c ServerTLSConfig) Validate() error {
	n := c.names()
	var errs []error
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		errs = append(errs, fmt.Errorf("%s is set but %s is not: set both to serve TLS, or neither", n.CertFile, n.KeyFile))
	case c.CertFile == "" && c.KeyFile != "":
		errs = append(errs, fmt.Errorf("%s is set but %s is not: set both to serve TLS, or neither", n.KeyFile, n.CertFile))
	case c.Enabled():
		if _, err := c.keyPair().check(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ClientCAFile != "" {
		if !c.Enabled() {
			errs = append(errs, fmt.Errorf("%s (mutual TLS) needs TLS: set %s and %s too", n.ClientCAFile, n.CertFile, n.KeyFile))
		}
		if _, err := c.clientCAs().check(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c ServerTLSConfig) keyPair() *watched[tls.Certificate] {
	n := c.names()
	return &watched[tls.Certificate]{
		what:  "the TLS certificate",
		files: []string{c.CertFile, c.KeyFile}, names: []string{n.CertFile, n.KeyFile},
		parse: func(b [][]byte) (tls.Certificate, error) {
			return pemfile.KeyPair(n.CertFile, n.KeyFile, b[0], b[1])
		},
	}
}

func (c ServerTLSConfig) clientCAs() *watched[*x509.CertPool] {
	n := c.names()
	return &watched[*x509.CertPool]{
		what:  "the client CA certificates",
		files: []string{c.ClientCAFile}, names: []string{n.ClientCAFile},
		parse: func(b [][]byte) (*x509.CertPool, error) {
			return pemfile.CertPool(n.ClientCAFile, c.ClientCAFile, b[0])
		},
	}
}

// ServerTLS serves the TLS material of a server from its files and re-reads
// them when their content changes: the key pair (certificate rotation) and
// the client CA certificates (CA rotation), each on its own. A file is
// checked at most once per CheckInterval, when a connection arrives. A
// version that cannot be read or loaded is logged once and the previous
// material stays in use.
//
// The material is handed out through tls.Config.GetConfigForClient, so
// every handshake uses the current certificate and client CA pool, and
// crypto/tls verifies client certificates itself against that pool (the
// certificate request also names the current CAs). A resumed session is
// re-verified against the current pool too, so a client of a removed CA
// cannot resume. Connections established before a change keep their
// verified peer until they close.
type ServerTLS struct {
	log      *slog.Logger
	interval time.Duration
	base     *tls.Config

	current   atomic.Pointer[tls.Config]
	nextCheck atomic.Int64 // Unix nanoseconds

	mu   sync.Mutex // serializes checks
	pair *watched[tls.Certificate]
	cas  *watched[*x509.CertPool] // nil without a client CA file
}

// NewServerTLS loads the files of cfg (which must be Enabled) and returns
// their ServerTLS. log receives reloads and reload failures.
func NewServerTLS(cfg ServerTLSConfig, log *slog.Logger) (*ServerTLS, error) {
	if !cfg.Enabled() {
		return nil, errors.New("cannot serve TLS: the certificate or key file is not set")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &ServerTLS{log: log, interval: cfg.CheckInterval, pair: cfg.keyPair()}
	if s.interval <= 0 {
		s.interval = DefaultTLSCheckInterval
	}
	var errs []error
	if _, err := s.pair.check(); err != nil {
		errs = append(errs, err)
	}
	if cfg.ClientCAFile != "" {
		s.cas = cfg.clientCAs()
		if _, err := s.cas.check(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("cannot load the TLS files: %w", err)
	}
	s.current.Store(s.build())
	s.nextCheck.Store(time.Now().Add(s.interval).UnixNano())
	s.base = &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: s.configForClient}
	return s, nil
}

// Config returns the server's TLS configuration: TLS 1.2 or later, the
// current material on every handshake, and with a client CA file client
// certificates required and verified. Each handshake runs with the
// configuration its GetConfigForClient returns, so settings added to this
// one (such as NextProtos) apply only through a wrapper of
// GetConfigForClient; gRPC's credentials.NewTLS wraps it and adds HTTP/2.
func (s *ServerTLS) Config() *tls.Config { return s.base.Clone() }

// build returns the configuration of the current material.
func (s *ServerTLS) build() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{s.pair.value}}
	if s.cas != nil {
		cfg.ClientCAs = s.cas.value
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg
}

func (s *ServerTLS) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	s.refresh()
	return s.current.Load(), nil
}

// refresh re-reads the files when a check is due. A handshake that arrives
// while another one checks uses the current material.
func (s *ServerTLS) refresh() {
	now := time.Now()
	if now.UnixNano() < s.nextCheck.Load() || !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	if now.UnixNano() < s.nextCheck.Load() {
		return
	}
	changed := recheck(s.log, s.pair)
	if s.cas != nil && recheck(s.log, s.cas) {
		changed = true
	}
	if changed {
		s.current.Store(s.build())
	}
	s.nextCheck.Store(time.Now().Add(s.interval).UnixNano())
}

// recheck checks one set of files, logging a new version and, once per
// distinct problem, a failure.
func recheck[T any](log *slog.Logger, w *watched[T]) bool {
	changed, err := w.check()
	switch {
	case err != nil:
		if msg := err.Error(); msg != w.failure {
			w.failure = msg
			log.Error("cannot reload "+w.what+"; the previous version stays in use", "files", w.files, "error", err)
		}
	case changed:
		log.Info("reloaded "+w.what, "files", w.files)
	}
	return changed
}

// watched is material loaded from files, re-read when their content
// changes.
type watched[T any] struct {
	what         string
	files, names []string
	parse        func([][]byte) (T, error)

	value   T
	sum     [sha256.Size]byte // of the loaded version's contents
	loaded  bool
	failure string // the last failure logged (a lasting one is logged once)
}

// check reads the files and loads them when their content differs from the
// loaded version. It reports whether it loaded a new version; on error the
// previous version stays.
func (w *watched[T]) check() (bool, error) {
	contents := make([][]byte, len(w.files))
	var errs []error
	h := sha256.New()
	for i, f := range w.files {
		b, err := pemfile.Read(w.names[i], f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		contents[i] = b
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if w.loaded && sum == w.sum {
		w.failure = ""
		return false, nil
	}
	v, err := w.parse(contents)
	if err != nil {
		return false, err
	}
	w.value, w.sum, w.loaded, w.failure = v, sum, true, ""
	return true, nil
}
