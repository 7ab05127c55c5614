//go:build linux

package integration_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// make run loads examples/profiles.yaml: a new user can merge through the
// declarative example profiles at once, and Sink logs their fingerprints.
func TestMakeRunHasTheExampleProfiles(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	cmd := exec.Command(mk, "--no-print-directory", "run", "BINARY="+filepath.Join(t.TempDir(), "sink"))
	cmd.Dir = repoRoot(t)
	cmd.Env = cleanEnv("SINK_GRPC_ADDRESS=127.0.0.1:0", "SINK_HTTP_ADDRESS=127.0.0.1:0")
	p := startProc(t, cmd)
	grpcAddr, _ := p.serving(t, 5*time.Minute)

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
	out, _ := p.stop(t, syscall.SIGINT, true)
	for _, name := range []string{"counter", "tally", "latest", "events", "order-status"} {
		if !strings.Contains(out, `"msg":"loaded merge profile","profile":"`+name+`","fingerprint":"sha256:`) {
			t.Errorf("no log line for profile %s:\n%s", name, out)
		}
	}
}
