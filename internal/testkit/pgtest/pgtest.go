// Package pgtest starts PostgreSQL for tests.
//
// Shared returns one server per test binary: the one SINK_TEST_POSTGRES_URL
// names when it is set, otherwise a server of its own, started on first use
// from the installed binaries (PATH, or the directory `pg_config --bindir`
// prints; Debian: /usr/lib/postgresql/15/bin): initdb into a temporary
// directory, then postgres on 127.0.0.1 with a free port and its socket in
// that directory, fsync off. As root it runs them as the postgres system
// user (initdb refuses root). Main (call it from TestMain) stops the server
// and removes the directory; the server also dies with the test binary
// (Pdeathsig), so a crashed or killed test leaves no server behind.
//
// Every test takes a database of its own (Server.NewDatabase), dropped when
// the test ends. The superuser's password holds '?', '/', '@', ':' and '%'
// (Password), so that every test exercises connection strings that need
// escaping. Without binaries the tests skip with one line saying how to get
// them.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names an existing server to use instead of starting one: a
// superuser's connection URL (any database; tests create their own).
const EnvURL = "SINK_TEST_POSTGRES_URL"

// User is the superuser of a started server.
const User = "sink"

// Password is the superuser's password of a started server. It holds every
// character that needs escaping in a connection URL; tests check that no
// output shows any of its Fragments.
const Password = "Pq7r?Wv3k/Jx8m@Tp4t:Mc6n%Ub2s"

// Fragments are the parts of Password between its special characters.
var Fragments = []string{"Pq7r", "Wv3k", "Jx8m", "Tp4t", "Mc6n", "Ub2s"}

// InstallHint says how to get the binaries.
const InstallHint = "PostgreSQL binaries (initdb, postgres) not found on PATH or in `pg_config --bindir`: apt-get install postgresql, or set " + EnvURL

// Server is a running PostgreSQL.
type Server struct {
	admin *url.URL // superuser URL (database postgres or the one given)

	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// URL returns the superuser's connection URL of database db.
func (s *Server) URL(db string) string {
	u := *s.admin
	u.Path = "/" + db
	return u.String()
}

// AdminURL returns the superuser's URL of the server's maintenance database.
func (s *Server) AdminURL() string { return s.admin.String() }

// Addr returns host:port.
func (s *Server) Addr() string { return s.admin.Host }

var shared struct {
	mu      sync.Mutex
	started bool
	srv     *Server
	err     error
	skip    bool
}

// Shared returns the test binary's server, starting it on first use. It
// skips the test when no binaries are installed and fails it when the
// server cannot be started.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	if !shared.started {
		shared.started = true
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		shared.srv, shared.skip, shared.err = start(ctx)
		cancel()
	}
	srv, skip, err := shared.srv, shared.skip, shared.err
	shared.mu.Unlock()
	if skip {
		t.Skip(InstallHint)
	}
	if err != nil {
		t.Fatalf("pgtest: cannot start PostgreSQL: %v", err)
	}
	return srv
}

// Main is for TestMain: it runs the tests, stops the shared server (if one
// was started) and exits with the tests' code.
// Ctrl-C (SIGINT) or SIGTERM also stops the server and removes its
// directory before the test binary exits.
//
// also are run after it, and on the signals, too (the shared servers of
// other test kits: mongotest.CloseShared).
func Main(m *testing.M, also ...func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		closeShared()
		for _, f := range also {
			f()
		}
		log.Printf("pgtest: %v: stopped the PostgreSQL server", sig)
		os.Exit(1)
	}()
	code := m.Run()
	signal.Stop(sigs)
	close(sigs)
	closeShared()
	for _, f := range also {
		f()
	}
	os.Exit(code)
}

func closeShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		shared.srv.Close()
		shared.srv = nil
	}
}

var (
	dbCounter atomic.Uint64
	dbTag     = randomHex(3)
)

// DatabaseName returns a fresh database name: the test's name, sanitised,
// a tag of this process and a counter (at most 63 bytes of [a-z0-9_]).
func DatabaseName(t testing.TB) string {
	suffix := "_" + dbTag + "_" + strconv.FormatUint(dbCounter.Add(1), 10)
	var b strings.Builder
	last := true
	for _, r := range strings.ToLower(t.Name()) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			last = false
		} else if !last {
			b.WriteByte('_')
			last = true
		}
	}
	base := strings.Trim(b.String(), "_")
	if room := 40 - len(suffix); len(base) > room {
		base = strings.TrimRight(base[:room], "_")
	}
	if base == "" || base[0] >= '0' && base[0] <= '9' {
		base = "t" + base
	}
	return base + suffix
}

// NewDatabase creates a database for this test and returns its superuser
// URL; the database is dropped when the test ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := DatabaseName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: cannot create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: cannot drop database %s: %v", name, err)
		}
	})
	return s.URL(name)
}

func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.AdminURL())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// Close stops the server and removes its directory (a server named by
// SINK_TEST_POSTGRES_URL is left alone).
func (s *Server) Close() {
	if s.cmd == nil {
		return
	}
	// SIGINT: PostgreSQL's fast shutdown (continued first, in case a test
	// left it paused).
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) // any backend left in the group
	s.cmd = nil
	if err := os.RemoveAll(s.dir); err != nil {
		log.Printf("pgtest: cannot remove %s: %v", s.dir, err)
	}
}

// ErrNoBinaries is what [Start] returns when no PostgreSQL binaries are
// installed (its message is [InstallHint]).
var ErrNoBinaries = errors.New(InstallHint)

// Start starts a server of its own from the installed binaries (never the
// one SINK_TEST_POSTGRES_URL names), for kits that run PostgreSQL under
// another server (mongotest's FerretDB). The caller must Close it; it also
// dies with the test binary. Without binaries it returns ErrNoBinaries.
func Start(ctx context.Context) (*Server, error) {
	bin, ok := binDir()
	if !ok {
		return nil, ErrNoBinaries
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	srv, err := startIn(ctx, bin, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return srv, nil
}

// Private starts a server for this test alone (for tests that pause it,
// which must not hold up the tests sharing [Shared]'s), closed when the
// test ends. It skips the test when no binaries are installed or when
// SINK_TEST_POSTGRES_URL names a server (one this package does not run).
func Private(t testing.TB) *Server {
	t.Helper()
	if os.Getenv(EnvURL) != "" {
		t.Skip("pgtest: a private server is started from the installed binaries; " + EnvURL + " names an existing one")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := Start(ctx)
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(InstallHint)
	}
	if err != nil {
		t.Fatalf("pgtest: cannot start PostgreSQL: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// Pause freezes the server: SIGSTOP to the postmaster and to every
// backend and auxiliary process (connections stay open; statements wait),
// and returns once each of them is stopped. PostgreSQL's children call
// setsid(), so they are not in the postmaster's process group: each is
// signalled by its parent process ID. Resume continues it. Only for a
// server this package started.
func (s *Server) Pause() error {
	if s.cmd == nil {
		return fmt.Errorf("pgtest: pause: not a server this package runs")
	}
	pid := s.cmd.Process.Pid
	// The postmaster first: stopped, it starts no new backend.
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		return err
	}
	kids := children(pid)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGSTOP) // one may have exited meanwhile
	}
	return waitStopped(append(kids, pid), 10*time.Second)
}

// Resume continues a server that Pause froze: its children, then the
// postmaster's process group.
func (s *Server) Resume() error {
	if s.cmd == nil {
		return fmt.Errorf("pgtest: resume: not a server this package runs")
	}
	pid := s.cmd.Process.Pid
	for _, k := range children(pid) {
		_ = syscall.Kill(k, syscall.SIGCONT)
	}
	return syscall.Kill(-pid, syscall.SIGCONT)
}

// children returns the processes whose parent is pid (from /proc).
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(c); ok && ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// procStat reads a process's parent ID and state from /proc/PID/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// waitStopped waits until each process that still exists is stopped
// (state T): a signal is delivered asynchronously.
func waitStopped(pids []int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		running := 0
		for _, p := range pids {
			if _, st, ok := procStat(p); ok && st != 'T' && st != 't' && st != 'Z' && st != 'X' {
				running = p
				break
			}
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: pause: process %d not stopped after %s", running, bound)
		}
		time.Sleep(time.Millisecond) // no notification exists for another process's stop
	}
}

// start returns the server, or skip when there are no binaries.
func start(ctx context.Context) (*Server, bool, error) {
	if raw := os.Getenv(EnvURL); raw != "" {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, false, fmt.Errorf("%s does not parse as a URL", EnvURL)
		}
		return &Server{admin: u}, false, nil
	}
	bin, ok := binDir()
	if !ok {
		return nil, true, nil
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, false, err
	}
	srv, err := startIn(ctx, bin, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, false, err
	}
	return srv, false, nil
}

// binDir returns the directory holding initdb and postgres.
func binDir() (string, bool) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p), true
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "postgres")) {
			return d, true
		}
	}
	// Debian's layout, when pg_config (libpq-dev) is not installed.
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	for i := len(matches) - 1; i >= 0; i-- {
		d := filepath.Dir(matches[i])
		if isFile(filepath.Join(d, "postgres")) {
			return d, true
		}
	}
	return "", false
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// credential returns the postgres user's credential when running as root.
func credential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("running as root, and there is no postgres user to run PostgreSQL as (initdb refuses root): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, uid, gid, nil
}

func startIn(ctx context.Context, bin, dir string) (*Server, error) {
	cred, uid, gid, err := credential()
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(Password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(pwfile, uid, gid); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", User, "--pwfile", pwfile,
		"-A", "scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.Dir = dir
	initdb.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, tailOf(out, 2048))
	}
	_ = os.Remove(pwfile)

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=64MB", "-c", "log_min_messages=warning")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startOnLongLivedThread(cmd); err != nil {
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	admin := &url.URL{Scheme: "postgres", User: url.UserPassword(User, Password), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path: "/postgres", RawQuery: "sslmode=disable"}
	srv := &Server{admin: admin, dir: dir, cmd: cmd, exited: exited}
	// Wait until it accepts connections (or exits).
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, admin.String())
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return srv, nil
		}
		select {
		case <-exited:
			srv.cmd = nil
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("postgres exited before it was ready: %s", tailOf(b, 2048))
		case <-ctx.Done():
			srv.Close()
			return nil, fmt.Errorf("postgres not ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func tailOf(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return strconv.Itoa(os.Getpid())
	}
	return hex.EncodeToString(b)
}

// Children start from one goroutine locked to its OS thread for the life of
// the process: Pdeathsig fires when the thread that started the child
// exits, not the process.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func startOnLongLivedThread(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread()
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

// PSQL runs sql with psql (as another program writing the database would)
// on the database of url and returns its output (unaligned, tuples only).
// It fails the test when psql is missing or the SQL fails.
func PSQL(t testing.TB, dbURL, sql string) string {
	t.Helper()
	bin, err := exec.LookPath("psql")
	if err != nil {
		d, ok := binDir()
		if !ok || !isFile(filepath.Join(d, "psql")) {
			t.Fatalf("pgtest: no psql: %s", InstallHint)
		}
		bin = filepath.Join(d, "psql")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dbURL, "-c", sql)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v: %s", sql, err, out)
	}
	return strings.TrimSpace(string(out))
}
