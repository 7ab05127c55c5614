//go:build linux

package integration_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// runProc is a process started the way a terminal starts a foreground
// job: in a process group of its own, so that a signal to the group
// reaches it and everything it started, as Ctrl-C does.
type runProc struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out bytes.Buffer // combined output
	// logged gets (msg, address) of each of Sink's log lines that has an
	// "address" field ("serving the Sink gRPC API", ...).
	logged chan [2]string
	done   chan error // the Wait result, once the output is read to its end
}

// cleanEnv is the test process's environment without the SINK_
// configuration of whoever runs the tests and without an outer make's
// variables (its jobserver descriptors are not inherited), plus env.
func cleanEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SINK_") || strings.HasPrefix(name, "MAKE") || name == "MFLAGS" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, env...)
}

func startProc(t *testing.T, cmd *exec.Cmd) *runProc {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &runProc{cmd: cmd, logged: make(chan [2]string, 16), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.out.WriteString(line + "\n")
			p.mu.Unlock()
			var entry struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Address != "" {
				select {
				case p.logged <- [2]string{entry.Msg, entry.Address}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := cmd.Wait()
		_ = pw.Close()
		<-read
		p.done <- err
	}()
	t.Cleanup(func() {
		select {
		case err := <-p.done:
			p.done <- err
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

func (p *runProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// serving waits for Sink's log lines that give the gRPC and HTTP
// listeners' actual addresses (it binds port 0), then polls /readyz until
// it answers 200.
func (p *runProc) serving(t *testing.T, timeout time.Duration) (grpcAddr, httpAddr string) {
	t.Helper()
	deadline := time.After(timeout)
	for grpcAddr == "" || httpAddr == "" {
		select {
		case l := <-p.logged:
			switch l[0] {
			case "serving the Sink gRPC API":
				grpcAddr = l[1]
			case "serving the HTTP operations endpoint":
				httpAddr = l[1]
			}
		case err := <-p.done:
			p.done <- err
			t.Fatalf("the process ended before Sink served (%v):\n%s", err, p.output())
		case <-deadline:
			t.Fatalf("Sink did not log its listeners within %s:\n%s", timeout, p.output())
		}
	}
	for end := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return grpcAddr, httpAddr
			}
		}
		if time.Now().After(end) {
			t.Fatalf("/readyz did not answer 200 within 30s (%v):\n%s", err, p.output())
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not synchronisation
	}
}

// stop sends sig (to the process group when group is set, as a terminal
// does on Ctrl-C) and returns the Wait result and the whole output.
func (p *runProc) stop(t *testing.T, sig syscall.Signal, group bool) (string, error) {
	t.Helper()
	pid := p.cmd.Process.Pid
	if group {
		pid = -pid
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		return p.output(), err
	case <-time.After(60 * time.Second):
		t.Fatalf("the process did not end within 60s of %s:\n%s", sig, p.output())
		return "", nil
	}
}

// useAPI writes and reads one record, so that shutdown has served RPCs.
func useAPI(t *testing.T, grpcAddr string) {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := sinkv1.NewSinkClient(conn)
	write(t, client, putOp(addr("n", "d", "k"), `{"a":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
	if got := readJSON(t, client, addr("n", "d", "k")); got != `{"a":1}` {
		t.Fatalf("read %q", got)
	}
}

// useExampleProfiles merges through two of the example declarative
// profiles that make run loads (examples/profiles.yaml).
func useExampleProfiles(t *testing.T, grpcAddr string) {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := sinkv1.NewSinkClient(conn)
	a := addr("shop", "orders", "o-1")
	for _, intent := range []string{`{"by":5}`, `{}`} {
		if r := write(t, c, mergeOp(a, "counter", intent))[0]; r.Status != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED {
			t.Fatalf("counter merge: %v %v", r.Status, r.Error)
		}
	}
	if got := readJSON(t, c, a); got != `{"n":6,"merges":2}` {
		t.Fatalf("counter document %s", got)
	}
	s := addr("shop", "status", "o-1")
	write(t, c, mergeOp(s, "order-status", `{"status":"paid"}`))
	r := write(t, c, mergeOp(s, "order-status", `{"status":"delivered"}`))[0]
	if r.Error == nil || r.Error.Reason != "INVALID_ARGUMENT" || !strings.Contains(r.Error.Message, "this status change is not allowed from the current status") {
		t.Fatalf("forbidden transition: %+v", r)
	}
}

// Ctrl-C on `make run` ends cleanly: Sink drains and exits 0, and make
// reports no error (before, `go run` exited 1 when interrupted and make
// printed "make: *** [Makefile:…: run] Error 1"). make run also loads the
// example declarative merge profiles: a new user can merge through them at
// once, and Sink logs their fingerprints.
func TestMakeRunStopsCleanlyOnInterrupt(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	// The binary goes to a temporary path; with the go build cache the
	// build links packages the tests compiled already.
	cmd := exec.Command(mk, "--no-print-directory", "run", "BINARY="+filepath.Join(t.TempDir(), "sink"))
	cmd.Dir = repoRoot(t)
	cmd.Env = cleanEnv("SINK_GRPC_ADDRESS=127.0.0.1:0", "SINK_HTTP_ADDRESS=127.0.0.1:0")
	p := startProc(t, cmd)
	grpcAddr, _ := p.serving(t, 5*time.Minute)
	useAPI(t, grpcAddr)
	useExampleProfiles(t, grpcAddr)

	out, waitErr := p.stop(t, syscall.SIGINT, true)
	for _, name := range []string{"counter", "tally", "latest", "events", "order-status"} {
		if !strings.Contains(out, `"msg":"loaded merge profile","profile":"`+name+`","fingerprint":"sha256:`) {
			t.Errorf("no log line for profile %s:\n%s", name, out)
		}
	}
	// make waits for its child and reports a failed one ("make: ***
	// [Makefile:…: run] Error 1") or one killed by a signal ("… Interrupt");
	// a clean exit (0) it does not. go run would add "exit status 1".
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "make") || strings.Contains(line, "Error") || strings.Contains(line, `"level":"ERROR"`) ||
			strings.HasPrefix(line, "exit status") {
			t.Errorf("the output of make run after Ctrl-C has the line %q:\n%s", line, out)
		}
	}
	if !strings.Contains(out, `"msg":"stopped"`) {
		t.Errorf("Sink did not log a clean stop:\n%s", out)
	}
	// make itself then ends by the terminal's SIGINT, as interrupted
	// programs do (a shell prints nothing for it), or exits 0 where it was
	// started with SIGINT ignored. Anything else is a failure.
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT:
	default:
		t.Errorf("make run ended with %v after Ctrl-C, want exit 0 or its own SIGINT:\n%s", waitErr, out)
	}
}

// The binary that make run executes exits 0 on SIGINT and on SIGTERM after
// a clean drain: that is the status make sees.
func TestSinkBinaryExitsZeroOnSignal(t *testing.T) {
	bin := buildSink(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			cmd.Env = cleanEnv("SINK_GRPC_ADDRESS=127.0.0.1:0", "SINK_HTTP_ADDRESS=127.0.0.1:0")
			p := startProc(t, cmd)
			grpcAddr, _ := p.serving(t, time.Minute)
			useAPI(t, grpcAddr)
			if out, err := p.stop(t, sig, false); err != nil {
				t.Fatalf("sink exited with %v after %s, want 0:\n%s", err, sig, out)
			}
		})
	}
}
