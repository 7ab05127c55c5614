package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sink-io/sink/internal/testkit"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// TestCustomBinary builds this example, starts it, and merges through its
// own profile next to the stock merge-patch profile.
func TestCustomBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "customprofile")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// Both listeners on free loopback ports; the log says which.
	cmd := exec.Command(bin)
	cmd.Env = testkit.Environ("SINK_LOG_FORMAT", "json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Address string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving the Sink gRPC API" {
				ready <- line.Address
			}
			t.Log(sc.Text())
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("custom binary did not stop cleanly on SIGTERM: %v", err)
		}
	})
	var address string
	select {
	case address = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("custom binary did not start")
	}

	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := sinkv1.NewSinkClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := &sinkv1.RecordAddress{Namespace: "web", Dataset: "stats", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: "home"}}}
	merge := func(profile, intent string) *sinkv1.WriteOperation {
		return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
			Address: a, Profile: profile, Intent: &sinkv1.Document{ContentType: "application/json", Data: []byte(intent)}}}}
	}
	resp, err := c.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
		merge("tally", `{"event":"click"}`),
		merge("tally", `{"event":"click","by":2}`),
		merge("tally", `{"event":"view","by":5}`),
		merge("tally", `{"nope":1}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if r := resp.Results[i]; r.Status != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED {
			t.Fatalf("merge %d: %v %v", i, r.Status, r.Error)
		}
	}
	if r := resp.Results[3]; r.Error == nil || !strings.Contains(r.Error.Message, "tally: the intent must look like") {
		t.Fatalf("bad intent: %+v", r)
	}
	got, err := c.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: a}}})
	if err != nil {
		t.Fatal(err)
	}
	if doc := string(got.Results[0].GetDocument().GetData()); doc != `{"counts":{"click":3,"view":5}}` {
		t.Fatalf("document = %s", doc)
	}
	// The stock profile is still there.
	resp, err = c.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{merge("merge-patch", `{"owner":"web"}`)}})
	if err != nil || resp.Results[0].Status != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED {
		t.Fatalf("merge-patch: %v %v", resp, err)
	}
	fmt.Println("custom binary merged through its own profile")
}
