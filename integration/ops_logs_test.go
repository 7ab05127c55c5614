package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/adapters/auth"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// opsLogBuffer collects the JSON log of a Sink process.
type opsLogBuffer struct{ testkit.LockedBuffer }

// lines returns the decoded log lines that satisfy keep.
func (b *opsLogBuffer) lines(t *testing.T, keep func(map[string]any) bool) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// SINK_REQUEST_ID_HEADER decides which unary responses carry the
// x-request-id header: by default those that report a failure (a success
// is logged nowhere, so its id would name nothing), with always every one.
func TestOpsRequestIDHeaderSetting(t *testing.T) {
	for _, setting := range []string{"", "always"} {
		s := sinktest.Start(t, map[string]string{"SINK_REQUEST_ID_HEADER": setting})
		var header metadata.MD
		resp, err := s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
			putOp(addr("ns", "ds", "k"), `{"a":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil)}}, grpc.Header(&header))
		if err != nil {
			t.Fatalf("%q: Write: %v", setting, err)
		}
		expectApplied(t, "k", resp.Results[0])
		if got, want := len(header.Get("x-request-id")), map[string]int{"": 0, "always": 1}[setting]; got != want {
			t.Fatalf("SINK_REQUEST_ID_HEADER=%q: a success came with %d x-request-id headers (%v), want %d", setting, got, header, want)
		}
		header = nil
		resp, err = s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
			putOp(addr("ns", "ds", "k"), `{"a":1}`, sinkv1.PutMode_PUT_MODE_CREATE, nil)}}, grpc.Header(&header))
		if err != nil || resp.Results[0].GetError() == nil {
			t.Fatalf("%q: CREATE of an existing record: %v %v", setting, resp, err)
		}
		if got := header.Get("x-request-id"); len(got) != 1 || len(got[0]) != 32 {
			t.Fatalf("SINK_REQUEST_ID_HEADER=%q: a failed operation came with x-request-id %q, want a generated id", setting, got)
		}
	}
}

// One log line per failed operation class of a request, carrying the
// request id (the client's, echoed in the x-request-id response header),
// the RPC, the dataset and the first message — and never a document or a
// token.
func TestOpsLogsOneLinePerFailureClass(t *testing.T) {
	const token = "sink_ops-test-token-Zm9vYmFyYmF6cXV4"
	const secretDoc = `{"card":"4111-DOCUMENT-SECRET"}`
	file := auth.File{Principals: []auth.FilePrincipal{{
		Name:        "shop-app",
		TokenHashes: []string{auth.HashToken(token)},
		Grants:      []auth.FileGrant{{Namespace: "shop", Rights: []string{"read", "write", "delete"}}},
	}}}
	b, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &opsLogBuffer{}
	s := sinktest.Start(t, map[string]string{"SINK_AUTH_TOKEN_FILE": path, "SINK_LOG_FORMAT": "json"},
		fx.Decorate(func(*slog.Logger) *slog.Logger { return slog.New(slog.NewJSONHandler(logs, nil)) }),
		bootstrap.MergeProfile(func() quotingProfile { return quotingProfile{} }))

	const reqID = "ops-log-request-1"
	callCtx := metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+token, "x-request-id", reqID)
	var header metadata.MD
	resp, err := s.Client.Write(callCtx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
		putOp(addr("shop", "orders", "ok-1"), secretDoc, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		putOp(addr("shop", "", "bad-1"), secretDoc, sinkv1.PutMode_PUT_MODE_UPSERT, nil),      // INVALID_ARGUMENT
		putOp(addr("shop", "orders", "ok-1"), secretDoc, sinkv1.PutMode_PUT_MODE_CREATE, nil), // ALREADY_EXISTS
		putOp(addr("shop", "", "bad-2"), secretDoc, sinkv1.PutMode_PUT_MODE_UPSERT, nil),      // INVALID_ARGUMENT
		putOp(addr("hr", "salaries", "x"), secretDoc, sinkv1.PutMode_PUT_MODE_UPSERT, nil),    // PERMISSION_DENIED
		putOp(addr("shop", "", "bad-3"), secretDoc, sinkv1.PutMode_PUT_MODE_UPSERT, nil),      // INVALID_ARGUMENT
	}}, grpc.Header(&header))
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if got := header.Get("x-request-id"); len(got) != 1 || got[0] != reqID {
		t.Fatalf("x-request-id response header %v, want %q", got, reqID)
	}
	expectApplied(t, "ok-1", resp.Results[0])

	failures := logs.lines(t, func(m map[string]any) bool { return m["request_id"] == reqID })
	if len(failures) != 3 {
		t.Fatalf("%d log lines for the request, want one per failure class (3):\n%s", len(failures), logs.String())
	}
	byCode := map[string]map[string]any{}
	for _, l := range failures {
		byCode[l["code"].(string)] = l
		if l["rpc"] != "/sink.v1.Sink/Write" || l["first_kind"] != "put" || l["first_message"] != nil {
			t.Errorf("line without RPC or kind, or with a message: %v", l)
		}
	}
	// An invalid address is not logged; valid ones (also denied) are.
	for code, want := range map[string]struct {
		msg, store, namespace, dataset, field string
		first                                 float64
	}{
		"INVALID_ARGUMENT":  {"3 operations failed: INVALID_ARGUMENT", "", "", "", "address.dataset", 1},
		"ALREADY_EXISTS":    {"1 operation failed: ALREADY_EXISTS", "primary", "shop", "orders", "mode", 2},
		"PERMISSION_DENIED": {"1 operation failed: PERMISSION_DENIED", "primary", "hr", "salaries", "address", 4},
	} {
		l := byCode[code]
		if l == nil || l["msg"] != want.msg || logString(l["store"]) != want.store || logString(l["namespace"]) != want.namespace || logString(l["dataset"]) != want.dataset ||
			l["first_index"] != want.first || l["first_field"] != want.field {
			t.Errorf("%s line: %v, want %+v", code, l, want)
		}
	}

	// Errors that quote client data reach the client in full, never the log.
	const secretReq = "ops-log-request-2"
	secretCtx := metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+token, "x-request-id", secretReq)
	badType := putOp(addr("shop", "orders", "t"), `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil)
	badType.GetPut().Document.ContentType = "application/CLIENT-SECRET-1;;"
	elsewhere := addr("shop", "orders", "e")
	elsewhere.Store = "CLIENT-SECRET-2"
	resp, err = s.Client.Write(secretCtx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
		mergeOp(addr("shop", "orders", "q"), "quoting", `{"a":{"$date":"CLIENT-SECRET-0"}}`),
		badType,
		putOp(elsewhere, `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.Results {
		if want := fmt.Sprintf("CLIENT-SECRET-%d", i); r.GetError() == nil || !strings.Contains(r.GetError().GetMessage(), want) {
			t.Fatalf("operation %d: the client must get the whole message (with %s): %v", i, want, r.GetError())
		}
	}
	l := logs.lines(t, func(m map[string]any) bool { return m["request_id"] == secretReq })
	if len(l) != 1 || l[0]["first_kind"] != "merge" || l[0]["first_field"] != "intent" || l[0]["count"] != float64(3) || l[0]["dataset"] != "orders" {
		t.Fatalf("log of the request: %v", l)
	}

	// A whole-request failure is logged once, with a generated request id
	// that the client also gets.
	var header2 metadata.MD
	_, err = s.Client.Write(metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+token),
		&sinkv1.WriteRequest{}, grpc.Header(&header2))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty request: %v", err)
	}
	gen := header2.Get("x-request-id")
	if len(gen) != 1 || len(gen[0]) != 32 {
		t.Fatalf("generated x-request-id header %v", gen)
	}
	if l := logs.lines(t, func(m map[string]any) bool { return m["request_id"] == gen[0] }); len(l) != 1 || l[0]["code"] != "InvalidArgument" {
		t.Fatalf("whole-request failure log: %v\n%s", l, logs.String())
	}
	// A wrong token is refused; neither it nor the document is logged.
	_, err = s.Client.Write(metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+token+"-wrong"),
		&sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{putOp(addr("shop", "orders", "x"), secretDoc, sinkv1.PutMode_PUT_MODE_UPSERT, nil)}})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: %v", err)
	}

	all := logs.String()
	for _, secret := range []string{"DOCUMENT-SECRET", token, "Zm9vYmFyYmF6cXV4", "CLIENT-SECRET"} {
		if strings.Contains(all, secret) {
			t.Errorf("the log contains %q:\n%s", secret, all)
		}
	}
}

func logString(v any) string { s, _ := v.(string); return s }

// quotingProfile fails like a parser that quotes its input.
type quotingProfile struct{}

func (quotingProfile) Name() string           { return "quoting" }
func (quotingProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (quotingProfile) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "cannot parse %s: invalid date", in.Intent.Data)
}
