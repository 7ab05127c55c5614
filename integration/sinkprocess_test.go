package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/testkit"
)

// sinkProcess is the sink binary running as a child process of the test.
type sinkProcess struct {
	cmd      *exec.Cmd
	logs     *testkit.LockedBuffer // its standard output and error (JSON log)
	exited   chan error            // receives cmd.Wait's result once
	grpcAddr string
	httpAddr string
}

// startSinkProcess starts the sink binary with testkit.Environ (both
// listeners on free loopback ports), a JSON log and env (NAME=value entries,
// which win), learns its listeners' addresses from its log and waits until
// /readyz answers 200. The process is killed in t.Cleanup, and its output
// logged when the test failed.
func startSinkProcess(t testing.TB, env ...string) *sinkProcess {
	t.Helper()
	return startSinkProcessUnder(t, nil, env...)
}

// startSinkProcessUnder is startSinkProcess with the binary run by the
// command prefix (such as taskset -c 1), if any.
func startSinkProcessUnder(t testing.TB, prefix []string, env ...string) *sinkProcess {
	t.Helper()
	return startProcessOf(t, append(append([]string(nil), prefix...), buildSink(t)), env...)
}

// startProcessOf is startSinkProcess with the command line argv (a build
// of the sink binary, such as sinkcount, and its arguments).
func startProcessOf(t testing.TB, argv []string, env ...string) *sinkProcess {
	t.Helper()
	p := &sinkProcess{cmd: exec.Command(argv[0], argv[1:]...), logs: &testkit.LockedBuffer{}, exited: make(chan error, 1)}
	p.cmd.Env = append(testkit.Environ("SINK_LOG_FORMAT", "json"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("sink output:\n%s", p.logs.String())
		}
	})
	eventually(t, 30*time.Second, "the sink process to be ready", func() (bool, string) {
		select {
		case err := <-p.exited:
			t.Fatalf("sink exited during start-up: %v\n%s", err, p.logs.String())
		default:
		}
		if p.grpcAddr == "" || p.httpAddr == "" {
			p.grpcAddr, p.httpAddr = listenAddresses(p.logs.String())
			if p.grpcAddr == "" || p.httpAddr == "" {
				return false, "its log does not name both listeners yet"
			}
		}
		code, body, err := opsGet("http://" + p.httpAddr + "/readyz")
		return code == http.StatusOK, fmt.Sprint(code, body, err)
	})
	return p
}

// listenAddresses finds the addresses that a JSON log reports for the gRPC
// API and the HTTP operations endpoint ("" for one not reported yet).
func listenAddresses(log string) (grpcAddr, httpAddr string) {
	for line := range strings.Lines(log) {
		var rec struct{ Msg, Address string }
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec.Msg {
		case "serving the Sink gRPC API":
			grpcAddr = rec.Address
		case "serving the HTTP operations endpoint":
			httpAddr = rec.Address
		}
	}
	return grpcAddr, httpAddr
}
