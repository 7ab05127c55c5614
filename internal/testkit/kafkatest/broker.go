package kafkatest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/testkit"
)

const (
	brokerPkg      = "./internal/testkit/cmd/kfakebroker"
	readyTimeout   = 30 * time.Second
	stopTimeout    = 30 * time.Second
	maxLoggedBytes = 1 << 20
)

// Broker is a standalone kfakebroker subprocess listening on a fixed free
// loopback port with a persistent data dir, so it can be stopped and
// restarted on the same address. The binary is built once per test binary.
// Cleanup kills it and removes the data dir; the child also gets SIGKILL if
// the test process dies (Pdeathsig on Linux, plus a parent watchdog), so no
// broker outlives the test. Its stdout and stderr are logged if the test
// fails.
type Broker struct {
	bin     string
	ports   []int
	addrs   []string
	dataDir string
	args    []string
	logs    *logBuffer

	mu  sync.Mutex
	cur *brokerRun // nil while stopped
}

type brokerRun struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returned; err is set before
	err    error
}

// StartBroker builds (once) and starts a kfakebroker process and waits until
// it prints READY. It fails the test if the broker cannot be started.
func StartBroker(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	cfg := newConfig(opts)
	bin, err := brokerBinary()
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	ports := freePorts(t, cfg.brokers)
	b := &Broker{
		bin:     bin,
		ports:   ports,
		dataDir: t.TempDir(), // removed after our Cleanup below has stopped the broker
		logs:    &logBuffer{},
	}
	for _, p := range ports {
		b.addrs = append(b.addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	b.args = []string{
		"-port", strconv.Itoa(ports[0]),
		"-brokers", strconv.Itoa(cfg.brokers),
		"-partitions", strconv.Itoa(cfg.partitions),
		"-data", b.dataDir,
		"-parent-pid", strconv.Itoa(os.Getpid()),
	}
	if len(cfg.topics) > 0 {
		b.args = append(b.args, "-topics", strings.Join(cfg.topics, ","))
	}
	b.args = append(b.args, cfg.extraArgs...)

	t.Cleanup(func() {
		if b.Running() {
			if err := b.Kill(); err != nil {
				t.Errorf("kafkatest: killing broker %s: %v", b.Addr(), err)
			}
		}
		if t.Failed() {
			t.Logf("kafkatest: output of broker %s:\n%s", b.Addr(), b.logs.String())
		}
	})
	if err := b.Start(); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return b
}

// Addr returns the address of the first (seed) broker, 127.0.0.1:PORT.
func (b *Broker) Addr() string { return b.addrs[0] }

// Addrs returns the addresses of all brokers of the process.
func (b *Broker) Addrs() []string { return append([]string(nil), b.addrs...) }

// DataDir returns the broker's persistence directory.
func (b *Broker) DataDir() string { return b.dataDir }

// Output returns what the broker processes printed so far (stdout and
// stderr, all runs, capped at 1 MiB).
func (b *Broker) Output() string { return b.logs.String() }

// Running reports whether the broker process is running.
func (b *Broker) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur == nil {
		return false
	}
	select {
	case <-b.cur.exited:
		return false
	default:
		return true
	}
}

// Start starts the broker process again, on the same port(s) with the same
// data dir, and waits until it prints READY. It fails if it is running.
func (b *Broker) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur != nil {
		select {
		case <-b.cur.exited:
		default:
			return fmt.Errorf("broker %s is already running", b.Addr())
		}
	}
	b.cur = nil

	ready := make(chan string, 1)
	cmd := exec.Command(b.bin, b.args...)
	cmd.Stdout = &readyWriter{out: b.logs, ready: ready}
	cmd.Stderr = b.logs
	setPdeathsig(cmd)
	fmt.Fprintf(b.logs, "--- kafkatest: starting %s %s\n", filepath.Base(b.bin), strings.Join(b.args, " "))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting broker %s: %w", b.Addr(), err)
	}
	r := &brokerRun{cmd: cmd, exited: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()

	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case line := <-ready:
		if want := "READY " + strings.Join(b.addrs, ","); line != want {
			_ = cmd.Process.Kill()
			<-r.exited
			return fmt.Errorf("broker announced %q, want %q", line, want)
		}
		b.cur = r
		return nil
	case <-r.exited:
		return fmt.Errorf("broker %s exited before READY (%v); output:\n%s", b.Addr(), r.err, b.logs.String())
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-r.exited
		return fmt.Errorf("broker %s not READY within %v; output:\n%s", b.Addr(), readyTimeout, b.logs.String())
	}
}

// Stop sends SIGTERM and waits for the process to exit. The broker closes
// the cluster cleanly, flushing its state to the data dir. It returns an
// error if the broker was not running or did not exit with status 0 (after
// 30 s it is killed).
func (b *Broker) Stop() error { return b.halt(syscall.SIGTERM) }

// Kill sends SIGKILL and waits for the process to exit: a crash without any
// shutdown work. It returns an error if the broker was not running.
func (b *Broker) Kill() error { return b.halt(syscall.SIGKILL) }

func (b *Broker) halt(sig syscall.Signal) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.cur
	if r == nil {
		return fmt.Errorf("broker %s is not running", b.Addr())
	}
	b.cur = nil
	select {
	case <-r.exited:
		return fmt.Errorf("broker %s had exited by itself: %v", b.Addr(), r.err)
	default:
	}
	if err := r.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling broker %s: %w", b.Addr(), err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-r.exited:
	case <-timer.C:
		_ = r.cmd.Process.Kill()
		<-r.exited
		return fmt.Errorf("broker %s did not exit within %v of %v; killed", b.Addr(), stopTimeout, sig)
	}
	if sig == syscall.SIGKILL {
		var ee *exec.ExitError
		if errors.As(r.err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				return nil
			}
		}
		return fmt.Errorf("broker %s: unexpected exit on SIGKILL: %v", b.Addr(), r.err)
	}
	if r.err != nil {
		return fmt.Errorf("broker %s: unclean exit on %v: %w", b.Addr(), sig, r.err)
	}
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("kafkatest: finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// freePorts returns n consecutive free loopback ports.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	for range 100 {
		first := FreePort(t)
		if first+n-1 > 65535 {
			continue
		}
		ok := true
		for p := first + 1; p < first+n && ok; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				ok = false
				continue
			}
			ln.Close()
		}
		if ok {
			ports := make([]int, n)
			for i := range ports {
				ports[i] = first + i
			}
			return ports
		}
	}
	t.Fatalf("kafkatest: no %d consecutive free loopback ports found", n)
	return nil
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// brokerBinary builds internal/testkit/cmd/kfakebroker once per test binary into
// the user cache dir (falling back to the temp dir), under a name keyed by
// the repo root. It builds to a unique file and renames it into place, so
// test binaries building at the same time never see a partial file.
func brokerBinary() (string, error) {
	buildOnce.Do(func() { buildBin, buildErr = build() })
	return buildBin, buildErr
}

func build() (string, error) {
	root, err := testkit.RepoRoot()
	if err != nil {
		return "", err
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "sink-kafkatest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating build dir: %w", err)
	}
	sum := sha256.Sum256([]byte(root))
	final := filepath.Join(dir, "kfakebroker-"+hex.EncodeToString(sum[:6]))
	tmp, err := os.CreateTemp(dir, ".kfakebroker-*")
	if err != nil {
		return "", fmt.Errorf("creating build output: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // no-op once renamed

	goBin, err := exec.LookPath("go") // go test puts GOROOT/bin first on PATH
	if err != nil {
		return "", fmt.Errorf("finding the go command: %w", err)
	}
	cmd := exec.Command(goBin, "build", "-o", tmp.Name(), brokerPkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %v\n%s", brokerPkg, root, err, out)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("installing broker binary: %w", err)
	}
	return final, nil
}

// readyWriter copies a broker's stdout to out and sends the first line that
// starts with "READY " to ready.
type readyWriter struct {
	out   *logBuffer
	ready chan<- string
	line  []byte
	sent  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.out.Write(p) //nolint:errcheck // never fails
	if w.sent {
		return len(p), nil
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(w.line[:i]), "\r")
		w.line = w.line[i+1:]
		if strings.HasPrefix(line, "READY ") {
			w.sent = true
			w.line = nil
			w.ready <- line
			break
		}
	}
	return len(p), nil
}

// logBuffer is a goroutine-safe buffer that keeps at most maxLoggedBytes.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - maxLoggedBytes; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}
