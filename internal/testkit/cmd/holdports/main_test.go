package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sink-io/sink/internal/testkit"
)

// TestHoldsPorts runs the command on a free port and on a port that is
// already taken: both end up taken, the command reports the taken one, and
// it stops cleanly on SIGTERM.
func TestHoldsPorts(t *testing.T) {
	if os.Getenv("HOLDPORTS_CHILD") == "1" {
		os.Exit(run(strings.Fields(os.Getenv("HOLDPORTS_ARGS"))))
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldsPorts$")
	cmd.Env = append(os.Environ(), "HOLDPORTS_CHILD=1",
		"HOLDPORTS_ARGS="+strconv.Itoa(free)+" "+strconv.Itoa(takenPort))
	var stderr testkit.LockedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("holdports did not report readiness: %q, %v\n%s", line, err, stderr.String())
	}
	if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(free)); err == nil {
		l.Close()
		t.Fatalf("port %d is free while holdports holds it", free)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holdports did not stop cleanly: %v\n%s", err, stderr.String())
	}
	if want := "port " + strconv.Itoa(takenPort) + " is already taken"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
	}
}

func TestRejectsBadArguments(t *testing.T) {
	for _, args := range [][]string{{}, {"http"}, {"0"}, {"70000"}, {"-1"}} {
		if code := run(args); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
}
