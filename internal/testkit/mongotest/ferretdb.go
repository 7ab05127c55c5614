package mongotest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/internal/testkit/pgtest"
)

const (
	ferretVersion      = "v1.24.2"
	ferretToolDir      = "tools/ferretdb"
	ferretReadyTimeout = 60 * time.Second
	ferretStopGrace    = 15 * time.Second
)

// FerretDB backends ([EnvFerretDBBackend]).
const (
	BackendSQLite     = "sqlite"
	BackendPostgreSQL = "postgresql"
)

// ferretServer is a FerretDB subprocess with its own temporary directory
// and, with the PostgreSQL backend, a PostgreSQL server of its own.
type ferretServer struct {
	bin     string
	dir     string // temp dir: data/ and ferretdb.log
	addr    string // host:port, fixed after the first start
	uri     string
	backend string
	pg      *pgtest.Server // BackendPostgreSQL: the server FerretDB stores into

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	logf   func(string, ...any)
}

func startFerretDB(ctx context.Context, logf func(string, ...any)) (_ *ferretServer, err error) {
	backend := os.Getenv(EnvFerretDBBackend)
	switch backend {
	case "":
		backend = BackendSQLite
	case BackendSQLite, BackendPostgreSQL:
	default:
		return nil, fmt.Errorf("%s=%q: want %s or %s", EnvFerretDBBackend, backend, BackendSQLite, BackendPostgreSQL)
	}
	bin, err := ferretBinary(ctx, logf)
	if err != nil {
		return nil, err
	}
	var pg *pgtest.Server
	if backend == BackendPostgreSQL {
		t0 := time.Now()
		if pg, err = pgtest.Start(ctx); err != nil {
			return nil, fmt.Errorf("PostgreSQL for FerretDB: %w", err)
		}
		// Stopped on every failure below; on success by close.
		defer func() {
			if err != nil {
				pg.Close()
			}
		}()
		logf("mongotest: started PostgreSQL for FerretDB at %s in %s", pg.Addr(), time.Since(t0).Round(time.Millisecond))
	}
	removeStaleDirs()
	dir, err := os.MkdirTemp("", tempDirPattern)
	if err != nil {
		return nil, err
	}
	// The owner pid lets a later run remove this dir if this process is killed.
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	f := &ferretServer{bin: bin, dir: dir, logf: logf, backend: backend, pg: pg}
	readyCtx, cancel := context.WithTimeout(ctx, ferretReadyTimeout)
	defer cancel()
	if err := f.start(readyCtx, "127.0.0.1:0"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return f, nil
}

const (
	tempDirPattern = "sink-ferretdb-*"
	ownerFile      = "owner.pid"
)

// removeStaleDirs removes FerretDB temp dirs left by test processes that were
// killed before they could Close (their FerretDB child died with them).
func removeStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPattern))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != os.Getpid() && processGone(pid) {
			_ = os.RemoveAll(d)
		}
	}
}

// start runs the binary on listen and waits for its READY line.
func (f *ferretServer) start(ctx context.Context, listen string) error {
	if f.cmd != nil {
		return errors.New("mongotest: FerretDB is already running")
	}
	logPath := filepath.Join(f.dir, "ferretdb.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}

	cmd := exec.Command(f.bin, "-listen", listen, "-log-level", "warn")
	if f.pg != nil {
		// The URL (password included) goes through the environment, not
		// the argument list that any process may read.
		cmd.Args = append(cmd.Args, "-backend", BackendPostgreSQL)
		cmd.Env = append(os.Environ(), "SINK_FERRETDB_POSTGRESQL_URL="+f.pg.URL("postgres"))
	} else {
		cmd.Args = append(cmd.Args, "-backend", BackendSQLite, "-data", filepath.Join(f.dir, "data"))
	}
	cmd.Stdout = pw
	cmd.Stderr = logFile
	cmd.SysProcAttr = childSysProcAttr()
	if err := startOnLongLivedThread(cmd); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("starting %s: %w", f.bin, err)
	}
	pw.Close()

	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	ready := make(chan string, 1)
	go func() {
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if uri, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				select {
				case ready <- strings.TrimSpace(uri):
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()

	fail := func(reason error) error {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("FerretDB (%s -listen %s) %w; log tail:\n%s", f.bin, listen, reason, tail(logPath, 2048))
	}
	select {
	case uri := <-ready:
		u, err := url.Parse(uri)
		if err != nil || u.Host == "" {
			return fail(fmt.Errorf("printed a bad URI %q", uri))
		}
		f.cmd, f.exited = cmd, exited
		f.addr = u.Host
		f.uri = "mongodb://" + u.Host + "/"
		return nil
	case <-exited:
		return fail(fmt.Errorf("exited before it was ready (%v)", cmd.ProcessState))
	case <-ctx.Done():
		return fail(fmt.Errorf("not ready: %w", ctx.Err()))
	}
}

// stop sends SIGTERM, waits, and kills after a grace period. No-op when stopped.
func (f *ferretServer) stop() error {
	if f.cmd == nil {
		return nil
	}
	cmd, exited := f.cmd, f.exited
	f.cmd, f.exited = nil, nil
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = cmd.Process.Kill() // e.g. Windows, where SIGTERM can't be sent
	}
	select {
	case <-exited:
	case <-time.After(ferretStopGrace):
		f.logf("mongotest: FerretDB did not stop within %s; killing it", ferretStopGrace)
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

func (f *ferretServer) close() error {
	err := f.stop()
	if f.pg != nil {
		f.pg.Close()
		f.pg = nil
	}
	if rerr := os.RemoveAll(f.dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// ferretBinary returns the path of the FerretDB test binary, building it once
// per content of tools/ferretdb into the user cache directory.
func ferretBinary(ctx context.Context, logf func(string, ...any)) (string, error) {
	root, err := testkit.RepoRoot()
	if err != nil {
		return "", err
	}
	toolDir := filepath.Join(root, filepath.FromSlash(ferretToolDir))
	key, err := toolKey(toolDir)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", toolDir, err)
	}

	cacheBase, err := os.UserCacheDir()
	if err != nil || cacheBase == "" {
		cacheBase = os.TempDir()
	}
	cacheDir := filepath.Join(cacheBase, "sink-test", "ferretdb-"+ferretVersion)
	exe := ""
	if runtime.GOOS == "windows" {
		exe = ".exe"
	}
	bin := filepath.Join(cacheDir, "ferretdb-"+key+exe)
	if isFile(bin) {
		logf("mongotest: using cached FerretDB binary %s", bin)
		return bin, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}

	// Parallel test packages may get here at once: one builds, the others wait.
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, "build.lock"))
	if err != nil {
		return "", fmt.Errorf("locking FerretDB build: %w", err)
	}
	defer unlock()
	if isFile(bin) {
		logf("mongotest: using FerretDB binary %s (built by another test process)", bin)
		return bin, nil
	}

	goTool, err := goCommand()
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(cacheDir, fmt.Sprintf(".build-%d-%s%s", os.Getpid(), randomHex(4), exe))
	logf("mongotest: building FerretDB %s from %s (first use; takes a few minutes on a cold Go build cache)", ferretVersion, toolDir)
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", tmp, ".")
	cmd.Dir = toolDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("building FerretDB (go build in %s): %w\n%s", toolDir, err, out.String())
	}
	if err := os.Rename(tmp, bin); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	logf("mongotest: built FerretDB in %s -> %s", time.Since(t0).Round(time.Second), bin)

	// Drop binaries built from older tools/ferretdb contents.
	if old, _ := filepath.Glob(filepath.Join(cacheDir, "ferretdb-*")); len(old) > 0 {
		for _, p := range old {
			if p != bin {
				_ = os.Remove(p)
			}
		}
	}
	return bin, nil
}

// toolKey hashes the files that determine the tool binary.
func toolKey(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	files = append(files, filepath.Join(dir, "go.mod"), filepath.Join(dir, "go.sum"))
	sort.Strings(files)
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s\n", ferretVersion, runtime.GOOS, runtime.GOARCH)
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(p), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// goCommand finds the go tool (go test puts GOROOT/bin first on PATH).
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); isFile(p) {
			return p, nil
		}
	}
	return "", errors.New("the go command is not on PATH; it is needed to build FerretDB")
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log)"
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	if len(b) == 0 {
		return "(empty log)"
	}
	return string(b)
}

// Children are started from one goroutine locked to its OS thread for the life
// of the process: on Linux, Pdeathsig fires when the *thread* that started the
// child exits, so starting from an arbitrary thread could kill the child early.
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
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}
