package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/testkit"
)

const upMarker = "FAULTS-UP run="

// Interrupting the suite leaves no container, network or image behind: a
// child test process (this binary, running TestFaultsHold) starts the whole
// cluster, then gets SIGINT as Ctrl-C would send it; once it has exited,
// nothing labelled with its run is left.
func TestFaultsInterruptLeavesNothing(t *testing.T) {
	e := suiteEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFaultsHold$", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), envRun+"=1", envHold+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testkit.LockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	runID := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), upMarker); ok {
				runID <- strings.TrimSpace(id)
			}
		}
		exited <- cmd.Wait()
	}()
	var run string
	select {
	case run = <-runID:
	case err := <-exited:
		t.Fatalf("the child exited before its cluster was up: %v\n%s", err, stderr.String())
	case <-ctx.Done():
		t.Fatalf("the child's cluster did not come up\n%s", stderr.String())
	}

	// The check below can fail: the child's objects exist now.
	before, err := leftovers(e.dc, run)
	if err != nil {
		t.Fatal(err)
	}
	var containers, networks, images int
	for _, l := range before {
		switch strings.Fields(l)[0] {
		case "container":
			containers++
		case "network":
			networks++
		case "image":
			images++
		}
	}
	if containers < 5 || networks != 2 || images < 3 {
		t.Fatalf("before the interrupt the child has %d containers, %d networks, %d images; want 5, 2, 3:\n%s", containers, networks, images, strings.Join(before, "\n"))
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("the interrupted child exited with %v, want status 130\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("the child did not exit after SIGINT\n%s", stderr.String())
	}
	after, err := leftovers(e.dc, run)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) > 0 {
		t.Errorf("left behind after SIGINT:\n%s", strings.Join(after, "\n"))
		_ = sweep(e.dc, labelRun+"="+run, func(map[string]string) bool { return true }, nil)
	}
	t.Logf("SIGINT removed %d containers, %d networks and %d images of run %s", containers, networks, images, run)
}

// TestFaultsHold is the child of TestFaultsInterruptLeavesNothing: it starts
// the cluster, says so, and waits for the signal.
func TestFaultsHold(t *testing.T) {
	if os.Getenv(envHold) != "1" {
		t.Skip("the child process of TestFaultsInterruptLeavesNothing")
	}
	e := suiteEngine(t)
	c, err := startCluster(context.Background(), e, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	fmt.Printf("%s%s\n", upMarker, e.run)
	time.Sleep(2 * time.Minute) // the parent interrupts long before; TestMain exits on the signal
	t.Fatal("no signal came within 2 minutes")
}
