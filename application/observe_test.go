package application_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// recordingObserver keeps every measurement.
type recordingObserver struct {
	ports.NopObserver
	mu        sync.Mutex
	outcomes  []ports.OperationOutcome
	calls     map[ports.StorageCall]int
	conflicts int
	retries   int
}

func (o *recordingObserver) Operations(out []ports.OperationOutcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes = append(o.outcomes, out...)
}

func (o *recordingObserver) StorageCall(call ports.StorageCall, n int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.calls == nil {
		o.calls = map[ports.StorageCall]int{}
	}
	o.calls[call] += n
}

func (o *recordingObserver) MergeConflict(string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.conflicts++
}

func (o *recordingObserver) ApplyRetry(time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retries++
}

func (o *recordingObserver) count(match func(ports.OperationOutcome) bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, x := range o.outcomes {
		if match(x) {
			n++
		}
	}
	return n
}

func TestOutcomesAreObservedPerOperation(t *testing.T) {
	obs := &recordingObserver{}
	s, err := application.NewService(application.DefaultConfig(), memory.New(), []ports.MergeProfile{addProfile{}},
		application.WithObserver(obs), application.WithLogger(slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bad := put("x", 1)
	bad.Address.Namespace = ""
	if _, err := s.Write(ctx, []domain.Mutation{put("a", 1), put("b", 2), merge("a", 3), bad}, application.WaitUntilApplied); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, []domain.Address{addr("a"), addr("missing")}); err != nil {
		t.Fatal(err)
	}
	del := domain.Mutation{Kind: domain.MutationDelete, Address: addr("b")}
	if _, err := s.Delete(ctx, []domain.Mutation{del}, application.WaitUntilApplied); err != nil {
		t.Fatal(err)
	}
	primary := domain.DatasetRef{Store: "primary", Namespace: "n", Dataset: "d"}
	wait := ports.CompletionWaitUntilApplied
	for _, c := range []struct {
		want ports.OperationOutcome
		n    int
	}{
		{ports.OperationOutcome{Dataset: primary, Kind: ports.OperationPut, Completion: wait, Status: ports.StatusApplied}, 2},
		{ports.OperationOutcome{Dataset: primary, Kind: ports.OperationMerge, Completion: wait, Status: ports.StatusApplied}, 1},
		// Operations that did not pass validation carry no dataset (their
		// names must not become labels).
		{ports.OperationOutcome{Kind: ports.OperationPut, Completion: wait, Status: ports.StatusFailed, HasError: true, Code: domain.CodeInvalidArgument}, 1},
		{ports.OperationOutcome{Dataset: primary, Kind: ports.OperationRead, Status: ports.StatusFound}, 1},
		{ports.OperationOutcome{Dataset: primary, Kind: ports.OperationRead, Status: ports.StatusNotFound}, 1},
		{ports.OperationOutcome{Dataset: primary, Kind: ports.OperationDelete, Completion: wait, Status: ports.StatusApplied}, 1},
	} {
		if got := obs.count(func(o ports.OperationOutcome) bool { return o == c.want }); got != c.n {
			t.Errorf("%+v: %d, want %d (all: %+v)", c.want, got, c.n, obs.outcomes)
		}
	}
	if len(obs.outcomes) != 7 {
		t.Fatalf("%d outcomes, want 7", len(obs.outcomes))
	}
	// Whole-request errors have no per-operation outcomes.
	if _, err := s.Write(ctx, nil, application.WaitUntilApplied); err == nil {
		t.Fatal("empty request accepted")
	}
	if len(obs.outcomes) != 7 {
		t.Fatalf("a whole-request error was observed per operation: %+v", obs.outcomes[7:])
	}
}

func TestWorkerOutcomesAreObserved(t *testing.T) {
	obs := &recordingObserver{}
	rec := &recorder{Storage: memory.New()}
	rec.failWrite = func(call int, op ports.WriteOp) error {
		if call == 0 && op.Address.Key.StringValue() == "flaky" {
			return domain.Errorf(domain.CodeUnavailable, "db hiccup")
		}
		return nil
	}
	cfg := application.DefaultConfig()
	cfg.Apply.BaseBackoff, cfg.Apply.MaxBackoff = time.Millisecond, 2*time.Millisecond
	s, err := application.NewService(cfg, rec, []ports.MergeProfile{addProfile{}}, application.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	bad := merge("m", 1)
	bad.Merge.Profile = "missing"
	s.ApplyMutations(context.Background(), []domain.Mutation{put("ok", 1), put("flaky", 2), bad})
	primary := domain.DatasetRef{Store: "primary", Namespace: "n", Dataset: "d"}
	applied := obs.count(func(o ports.OperationOutcome) bool {
		return o == ports.OperationOutcome{Source: ports.SourceWorker, Dataset: primary, Kind: ports.OperationPut, Status: ports.StatusApplied}
	})
	invalid := obs.count(func(o ports.OperationOutcome) bool {
		return o == ports.OperationOutcome{Source: ports.SourceWorker, Kind: ports.OperationMerge, Status: ports.StatusFailed, HasError: true, Code: domain.CodeInvalidArgument}
	})
	if applied != 2 || invalid != 1 || obs.retries != 1 {
		t.Fatalf("worker outcomes %+v, retries %d", obs.outcomes, obs.retries)
	}
}

// logLines decodes JSON log lines.
func logLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestOneLogLinePerFailureClass(t *testing.T) {
	var buf bytes.Buffer
	rec := &recorder{Storage: memory.New()}
	rec.failWrite = func(_ int, op ports.WriteOp) error {
		if strings.HasPrefix(op.Address.Key.StringValue(), "down") {
			return domain.Errorf(domain.CodeUnavailable, "storage is unavailable")
		}
		return nil
	}
	s, err := application.NewService(application.DefaultConfig(), rec, []ports.MergeProfile{addProfile{}},
		application.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	secret := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"card":"4111-SECRET"}`)}
	muts := []domain.Mutation{put("ok", 1)}
	for i := 0; i < 3; i++ {
		m := put("x", i)
		m.Address.Dataset = "" // invalid
		m.Document = secret
		muts = append(muts, m)
	}
	for _, k := range []string{"down-1", "down-2"} {
		m := put(k, 1)
		m.Document = secret
		muts = append(muts, m)
	}
	ctx := domain.ContextWithRequest(context.Background(), domain.RequestInfo{ID: "req-42", Method: "/sink.v1.Sink/Write"})
	if _, err := s.Write(ctx, muts, application.WaitUntilApplied); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "SECRET") {
		t.Fatalf("a document leaked into the log:\n%s", buf.String())
	}
	lines := logLines(t, buf.Bytes())
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want one per failure class:\n%s", len(lines), buf.String())
	}
	byCode := map[string]map[string]any{}
	for _, l := range lines {
		byCode[l["code"].(string)] = l
		if l["request_id"] != "req-42" || l["rpc"] != "/sink.v1.Sink/Write" || l["operations"] != float64(6) {
			t.Errorf("line without request context: %v", l)
		}
	}
	inv, unav := byCode["INVALID_ARGUMENT"], byCode["UNAVAILABLE"]
	if inv == nil || inv["msg"] != "3 operations failed: INVALID_ARGUMENT" || inv["count"] != float64(3) || inv["first_index"] != float64(1) ||
		inv["level"] != "INFO" || inv["first_kind"] != "put" || inv["first_field"] != "address.dataset" || inv["first_message"] != nil {
		t.Errorf("invalid-argument line: %v", inv)
	}
	if unav == nil || unav["msg"] != "2 operations failed: UNAVAILABLE" || unav["level"] != "WARN" || unav["retryable"] != true ||
		unav["namespace"] != "n" || unav["dataset"] != "d" || unav["store"] != "primary" || unav["first_index"] != float64(4) {
		t.Errorf("unavailable line: %v", unav)
	}

	buf.Reset()
	if _, err := s.Write(ctx, []domain.Mutation{put("fine", 1)}, application.WaitUntilApplied); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("a request without failures was logged: %s", buf.String())
	}
}
