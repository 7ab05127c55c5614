package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

const (
	asyncTopic     = "sink.mutations"
	asyncDLT       = "sink.mutations.dead-letter"
	accepted       = sinkv1.OperationStatus_OPERATION_STATUS_ACCEPTED
	returnAccepted = sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED
)

func asyncSkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Kafka brokers; skipped with -short")
	}
}

// asyncEnv is the environment of a Sink process using the mutation queue.
func asyncEnv(brokers []string, mode string, extra map[string]string) map[string]string {
	env := testkit.Env(
		"SINK_MODE", mode,
		"SINK_KAFKA_BROKERS", strings.Join(brokers, ","),
		"SINK_KAFKA_TOPIC", asyncTopic,
		"SINK_KAFKA_GROUP_ID", "sink-workers",
		"SINK_KAFKA_SESSION_TIMEOUT", "6s",
		"SINK_KAFKA_PUBLISH_TIMEOUT", "3s",
		"SINK_APPLY_MAX_BACKOFF", "500ms",
		"SINK_LOG_LEVEL", "warn",
	)
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// asyncStartAll starts Sink in all mode (server and worker in one process).
func asyncStartAll(t testing.TB, brokers []string, extra map[string]string, opts ...fx.Option) *sinktest.Server {
	t.Helper()
	return sinktest.Start(t, asyncEnv(brokers, bootstrap.ModeAll, extra), opts...)
}

// asyncWorker is a worker-mode fx app (no gRPC listener).
type asyncWorker struct {
	app  *fx.App
	http *bootstrap.HTTPEndpoint
}

func asyncStartWorker(t testing.TB, env map[string]string, opts ...fx.Option) *asyncWorker {
	t.Helper()
	cfg, err := bootstrap.LoadConfig(env)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = bootstrap.NewLogger(cfg, asyncTestWriter{t})
	}
	w := &asyncWorker{}
	app, err := bootstrap.New(cfg, log, append(opts, fx.Populate(&w.http))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatalf("cannot start the worker: %v", err)
	}
	w.app = app
	t.Cleanup(func() { w.stop(t) })
	return w
}

func (w *asyncWorker) stop(t testing.TB) {
	if w.app == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.app.Stop(ctx); err != nil {
		t.Errorf("cannot stop the worker: %v", err)
	}
	w.app = nil
}

type asyncTestWriter struct{ t testing.TB }

func (w asyncTestWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// asyncWrite sends a RETURN_AFTER_ACCEPTED Write and returns the response or
// the whole-request error.
func asyncWrite(ctx context.Context, c sinkv1.SinkClient, ops ...*sinkv1.WriteOperation) (*sinkv1.WriteResponse, error) {
	return c.Write(ctx, &sinkv1.WriteRequest{Operations: ops, Completion: returnAccepted})
}

// asyncMustAccept sends an async Write and fails unless every operation was accepted.
func asyncMustAccept(t testing.TB, c sinkv1.SinkClient, ops ...*sinkv1.WriteOperation) []string {
	t.Helper()
	resp, err := asyncWrite(ctx(t), c, ops...)
	if err != nil {
		t.Fatalf("async Write: %v", err)
	}
	return acceptedIDs(t, resp.GetResults())
}

type resultWithID interface {
	GetStatus() sinkv1.OperationStatus
	GetMutationId() string
	GetError() *sinkv1.OperationError
}

func acceptedIDs[R resultWithID](t testing.TB, results []R) []string {
	t.Helper()
	ids := make([]string, len(results))
	for i, r := range results {
		if r.GetStatus() != accepted || r.GetMutationId() == "" {
			t.Fatalf("operation %d: status %v, mutation id %q, error %v; want ACCEPTED with an id", i, r.GetStatus(), r.GetMutationId(), r.GetError())
		}
		ids[i] = r.GetMutationId()
	}
	return ids
}

func asyncDelete(t testing.TB, c sinkv1.SinkClient, addrs ...*sinkv1.RecordAddress) []string {
	t.Helper()
	ops := make([]*sinkv1.DeleteOperation, len(addrs))
	for i, a := range addrs {
		ops[i] = &sinkv1.DeleteOperation{Address: a}
	}
	resp, err := c.Delete(ctx(t), &sinkv1.DeleteRequest{Operations: ops, Completion: returnAccepted})
	if err != nil {
		t.Fatalf("async Delete: %v", err)
	}
	return acceptedIDs(t, resp.GetResults())
}

// eventually polls check until it reports done or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for {
		ok, state := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(wait)
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// readState returns "absent" or the record's JSON document, normalized.
func readState(ctx context.Context, c sinkv1.SinkClient, a *sinkv1.RecordAddress) (string, error) {
	resp, err := c.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: a}}})
	if err != nil {
		return "", err
	}
	r := resp.GetResults()[0]
	switch r.GetStatus() {
	case notFound:
		return "absent", nil
	case found:
		return normJSON(r.GetDocument().GetData()), nil
	default:
		return "", fmt.Errorf("read status %v: %v", r.GetStatus(), r.GetError())
	}
}

func normJSON(b []byte) string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "invalid JSON: " + string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}

// eventuallyState waits until the record reads as want ("absent" or JSON).
func eventuallyState(t testing.TB, c sinkv1.SinkClient, a *sinkv1.RecordAddress, want string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%s/%s/%s to be %s", a.GetNamespace(), a.GetDataset(), a.GetKey(), want), func() (bool, string) {
		got, err := readState(ctx(t), c, a)
		if err != nil {
			return false, err.Error()
		}
		return got == want || jsonEqual(got, want), got
	})
}

// retryableFailure reports whether an async Write outcome is a retryable
// failure: a whole-request UNAVAILABLE/DEADLINE_EXCEEDED, or every operation
// FAILED with a retryable UNAVAILABLE error.
func retryableFailure(resp *sinkv1.WriteResponse, err error) (bool, string) {
	if err != nil {
		c := status.Code(err)
		return c == codes.Unavailable || c == codes.DeadlineExceeded, err.Error()
	}
	for _, r := range resp.GetResults() {
		e := r.GetError()
		if r.GetStatus() != failedStatus || e == nil || !e.GetRetryable() || e.GetCode() != uint32(codes.Unavailable) {
			return false, fmt.Sprintf("status %v error %v", r.GetStatus(), e)
		}
	}
	return true, ""
}
