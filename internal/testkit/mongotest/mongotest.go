// Package mongotest gives integration tests a real MongoDB-wire server that the
// tests start themselves.
//
// [Start] picks the first server that works, in this order, and logs why the
// earlier ones were skipped:
//
//  1. env: the URI in SINK_TEST_MONGODB_URI, used as is.
//  2. docker: a mongo:7 single-node replica set (rs0) started with dockertest,
//     only when a Docker engine answers and the image is present or can be
//     pulled (SINK_TEST_DOCKER_PULL_TIMEOUT, default 2m, bounds the pull;
//     SINK_TEST_NO_DOCKER=1 skips this step).
//  3. ferretdb: FerretDB v1.24.2 with its SQLite backend, run as a subprocess
//     built from the repository's tools/ferretdb module. The binary is built on
//     first use (a few minutes on a cold Go build cache) and cached under
//     os.UserCacheDir()/sink-test/ferretdb-v1.24.2. With
//     SINK_TEST_FERRETDB_BACKEND=postgresql it uses its PostgreSQL backend
//     instead, over a PostgreSQL server of its own (pgtest.Start, from the
//     installed binaries), stopped with FerretDB.
//
// Most tests share one server per test binary:
//
//	func TestMain(m *testing.M) { mongotest.Main(m) }
//
//	func TestX(t *testing.T) {
//		srv := mongotest.Shared(t)
//		db := mongotest.DatabaseName(t)
//		// connect to srv.URI() and use database db
//	}
//
// Tests that stop or restart the server (outage tests) must [Start] their own
// server and [Server.Close] it, never Stop the shared one.
//
// See docs/mongodb.md for the FerretDB behaviour differences that tests must allow for.
package mongotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Server kinds returned by [Server.Kind].
const (
	KindEnv      = "env"
	KindDocker   = "docker"
	KindFerretDB = "ferretdb"
)

// Environment variables read by this package.
const (
	// EnvURI, when set, is the URI of an existing server to use as is.
	EnvURI = "SINK_TEST_MONGODB_URI"
	// EnvSkip=1 makes [Shared] skip the test instead of failing it when no server can be started.
	EnvSkip = "SINK_TEST_SKIP_MONGODB"
	// EnvNoDocker=1 skips the Docker step.
	EnvNoDocker = "SINK_TEST_NO_DOCKER"
	// EnvDockerPullTimeout bounds the pull of the mongo image (a Go duration, default 2m).
	EnvDockerPullTimeout = "SINK_TEST_DOCKER_PULL_TIMEOUT"
	// EnvFerretDBBackend picks FerretDB's backend: "sqlite" (the default)
	// or "postgresql" (a PostgreSQL server of its own, started from the
	// installed binaries by pgtest.Start and stopped with FerretDB).
	EnvFerretDBBackend = "SINK_TEST_FERRETDB_BACKEND"
)

// Server is a running (or stopped) MongoDB-wire server. Its methods are safe
// for concurrent use.
type Server struct {
	kind string
	uri  string
	logf func(format string, args ...any)

	mu     sync.Mutex
	closed bool

	docker *dockerServer // kind docker
	ferret *ferretServer // kind ferretdb
}

// URI returns the connection string, mongodb://host:port/ (no credentials when
// none are needed). For kind "env" it is SINK_TEST_MONGODB_URI as given.
func (s *Server) URI() string { return s.uri }

// Kind returns "env", "docker" or "ferretdb".
func (s *Server) Kind() string { return s.kind }

// IsFerretDB reports whether the server is the FerretDB fallback.
func (s *Server) IsFerretDB() bool { return s.kind == KindFerretDB }

// FerretDBBackend returns FerretDB's backend, [BackendSQLite] or
// [BackendPostgreSQL], and "" for other kinds.
func (s *Server) FerretDBBackend() string {
	if s.ferret == nil {
		return ""
	}
	return s.ferret.backend
}

// SinkEnv returns the environment a Sink process needs to use this server:
// SINK_MONGODB_URI and, on FerretDB, the bulk limits it needs (FerretDB v1
// stops answering when about 100 documents are modified at once).
func (s *Server) SinkEnv() map[string]string {
	env := map[string]string{"SINK_MONGODB_URI": s.URI()}
	if s.IsFerretDB() {
		env["SINK_MONGODB_BULK_CHUNK"] = "48"
		env["SINK_MONGODB_BULK_CONCURRENCY"] = "1"
	}
	return env
}

// Stop stops the server (SIGTERM, then wait; SIGKILL after a grace period).
// For FerretDB the data directory is kept until Close, so Restart brings the
// same data back. For docker the container is removed. A server of kind "env"
// is not managed by this package and Stop returns an error.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.kind {
	case KindFerretDB:
		return s.ferret.stop()
	case KindDocker:
		return s.docker.close()
	default:
		return fmt.Errorf("mongotest: Stop is not supported for a server of kind %q", s.kind)
	}
}

// Restart starts a stopped FerretDB server again on the same port and data
// directory (a running one is stopped first). Used by outage/recovery tests.
// Other kinds return an error saying it is not supported.
func (s *Server) Restart() error {
	if s.kind != KindFerretDB {
		return fmt.Errorf("mongotest: Restart is not supported for a server of kind %q (FerretDB only)", s.kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("mongotest: Restart after Close")
	}
	if err := s.ferret.stop(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ferretReadyTimeout)
	defer cancel()
	return s.ferret.start(ctx, s.ferret.addr)
}

// Pause freezes the server without closing its connections: FerretDB's
// process is stopped (SIGSTOP), a Docker container is paused; requests on
// its sockets wait until [Server.Resume]. A server of kind "env" is not
// managed by this package and Pause returns an error. Tests that pause a
// server take a [Private] one.
func (s *Server) Pause() error { return s.freeze(true) }

// Resume continues a server that [Server.Pause] froze.
func (s *Server) Resume() error { return s.freeze(false) }

func (s *Server) freeze(stop bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.kind == KindFerretDB && s.ferret.cmd != nil && stop:
		return stopProcess(s.ferret.cmd.Process)
	case s.kind == KindFerretDB && s.ferret.cmd != nil:
		return continueProcess(s.ferret.cmd.Process)
	case s.kind == KindDocker && stop:
		return s.docker.pool.Client.PauseContainer(s.docker.res.Container.ID)
	case s.kind == KindDocker:
		return s.docker.pool.Client.UnpauseContainer(s.docker.res.Container.ID)
	default:
		return fmt.Errorf("mongotest: Pause and Resume are not supported for a server of kind %q", s.kind)
	}
}

// Close stops the server and removes everything it created (temporary
// directories, containers). It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	switch s.kind {
	case KindFerretDB:
		if err := s.ferret.close(); err != nil {
			s.logf("mongotest: closing FerretDB: %v", err)
		}
	case KindDocker:
		if err := s.docker.close(); err != nil {
			s.logf("mongotest: removing container: %v", err)
		}
	}
}

// Start starts (or, for SINK_TEST_MONGODB_URI, just adopts) a server, trying
// env, then docker, then FerretDB. logf receives progress and the reasons why
// earlier choices were skipped; nil means log.Printf. ctx bounds the start,
// including a first FerretDB build. The caller must Close the server.
func Start(ctx context.Context, logf func(format string, args ...any)) (*Server, error) {
	if logf == nil {
		logf = log.Printf
	}

	if uri := os.Getenv(EnvURI); uri != "" {
		logf("mongotest: using %s=%s (kind env)", EnvURI, redact(uri))
		return &Server{kind: KindEnv, uri: uri, logf: logf}, nil
	}
	logf("mongotest: %s is not set; trying Docker", EnvURI)

	var reasons []string
	if os.Getenv(EnvNoDocker) == "1" {
		reason := fmt.Sprintf("docker skipped: %s=1", EnvNoDocker)
		logf("mongotest: %s; trying FerretDB", reason)
		reasons = append(reasons, reason)
	} else {
		t0 := time.Now()
		d, err := startDocker(ctx, logf)
		if err == nil {
			logf("mongotest: using Docker mongo:7 replica set at %s (started in %s)", d.uri, time.Since(t0).Round(time.Millisecond))
			return &Server{kind: KindDocker, uri: d.uri, logf: logf, docker: d}, nil
		}
		reason := fmt.Sprintf("docker skipped after %s: %v", time.Since(t0).Round(time.Millisecond), err)
		logf("mongotest: %s; trying FerretDB", reason)
		reasons = append(reasons, reason)
	}

	f, err := startFerretDB(ctx, logf)
	if err != nil {
		reasons = append(reasons, "ferretdb: "+err.Error())
		return nil, fmt.Errorf("mongotest: no MongoDB-wire server could be started:\n  - %s", strings.Join(reasons, "\n  - "))
	}
	logf("mongotest: using FerretDB %s (%s backend) at %s", ferretVersion, f.backend, f.uri)
	return &Server{kind: KindFerretDB, uri: f.uri, logf: logf, ferret: f}, nil
}

// sharedStartTimeout bounds the start of the shared server, including a cold
// FerretDB build.
const sharedStartTimeout = 15 * time.Minute

var shared struct {
	mu      sync.Mutex
	started bool
	srv     *Server
	err     error
}

// Private starts a server for this test alone (for tests that stop or
// restart it, or that must not share one), closed in t.Cleanup. If no server
// can be started, the test fails with the reasons, or is skipped when
// SINK_TEST_SKIP_MONGODB=1.
func Private(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	srv, err := Start(ctx, t.Logf)
	if err != nil {
		if os.Getenv(EnvSkip) == "1" {
			t.Skipf("no MongoDB-wire server: %v", err)
		}
		t.Fatalf("no MongoDB-wire server: %v (set %s=1 to skip)", err, EnvSkip)
	}
	t.Cleanup(srv.Close)
	return srv
}

// Shared returns one server per test binary (package), started lazily on first
// use and shut down by [Main] (which the package's TestMain must call). Tests
// get a fresh database name from [DatabaseName]. If no server can be started,
// the test fails with the reasons, or is skipped when SINK_TEST_SKIP_MONGODB=1.
// Tests must not Stop, Restart or Close the shared server.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	if !shared.started {
		shared.started = true
		ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
		shared.srv, shared.err = Start(ctx, func(format string, args ...any) {
			t.Logf(format, args...)
		})
		cancel()
		if shared.srv != nil {
			// Later log lines (e.g. from Close in Main) must not go to a finished test.
			shared.srv.logf = log.Printf
		}
	}
	srv, err := shared.srv, shared.err
	shared.mu.Unlock()

	if err != nil {
		if os.Getenv(EnvSkip) == "1" {
			t.Skipf("%v\n(skipping because %s=1)", err, EnvSkip)
		}
		t.Fatalf("%v\n(set %s=1 to skip MongoDB tests instead)", err, EnvSkip)
	}
	t.Logf("mongotest: shared %s server %s", srv.Kind(), redact(srv.URI()))
	return srv
}

// Main is for TestMain: it runs m, closes the shared server (if one was
// started) and exits with m's exit code.
//
//	func TestMain(m *testing.M) { mongotest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	CloseShared()
	os.Exit(code)
}

// CloseShared closes the shared server, if one was started (for a TestMain
// that also runs other kits' cleanups, such as pgtest.Main's).
func CloseShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		shared.srv.Close()
	}
	shared.srv, shared.err, shared.started = nil, nil, false
}

// maxDatabaseName is the longest name DatabaseName returns.
const maxDatabaseName = 38

var (
	dbCounter atomic.Uint64
	dbPrefix  = randomHex(3) // distinguishes test binaries sharing one server
)

// DatabaseName returns a unique, valid MongoDB database name (at most 38
// characters of [a-z0-9_]) derived from the test name plus a per-process
// random tag and a counter, e.g. "testfoo_sub_case_1a2b3c_7".
func DatabaseName(t testing.TB) string {
	suffix := "_" + dbPrefix + "_" + strconv.FormatUint(dbCounter.Add(1), 10)
	base := sanitizeName(t.Name())
	if room := maxDatabaseName - len(suffix); len(base) > room {
		base = strings.TrimRight(base[:room], "_")
	}
	if base == "" {
		base = "db"
	}
	return base + suffix
}

func sanitizeName(name string) string {
	var b strings.Builder
	lastUnderscore := true // trims leading underscores
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			lastUnderscore = false
		default:
			if !lastUnderscore {
				b.WriteByte('_')
				lastUnderscore = true
			}
		}
	}
	return strings.TrimRight(b.String(), "_")
}

func randomHex(n int) string {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return strconv.FormatInt(int64(os.Getpid()%(1<<24)), 16)
	}
	return hex.EncodeToString(buf)
}

// redact hides a password in a URI for logging.
func redact(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.User == nil {
		return uri
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
