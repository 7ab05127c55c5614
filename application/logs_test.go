package application_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// quotingProfile fails with a parser error that quotes the intent, like a
// JSON or BSON parser does.
type quotingProfile struct{}

func (quotingProfile) Name() string           { return "quoting" }
func (quotingProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (quotingProfile) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "cannot parse %s as an extended JSON date", in.Intent.Data)
}

// leakyReads fails reads of key "stored" with an error quoting the stored
// document, like a decoder meeting an invalid stored document.
type leakyReads struct{ ports.Storage }

func (s leakyReads) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	out := s.Storage.Read(ctx, addrs)
	for i, a := range addrs {
		if a.Key.StringValue() == "stored" {
			out[i] = ports.ReadResult{Err: domain.Errorf(domain.CodeInternal, `cannot decode the stored document: field "SECRET-field" has value {"$numberLong":"SECRET-9"}`)}
		}
	}
	return out
}

// Errors may quote client data (intents, content types, stored documents,
// names): the client gets them in full, the log gets the operation, its
// kind, the field and the code, never the message.
func TestFailureLogsNeverQuoteClientData(t *testing.T) {
	var buf bytes.Buffer
	s, err := application.NewService(application.DefaultConfig(), leakyReads{memory.New()},
		[]ports.MergeProfile{addProfile{}, quotingProfile{}}, application.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	intent := merge("a", 1)
	intent.Merge = domain.MergeIntent{Profile: "quoting", Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"a":{"$date":"SECRET-date"}}`)}}
	ct := put("b", 1)
	ct.Document.ContentType = "SECRET-type"
	store := put("c", 1)
	store.Address.Store = "SECRET-store"
	stored := merge("stored", 1)
	ctx := domain.ContextWithRequest(context.Background(), domain.RequestInfo{ID: "req-1", Method: "/sink.v1.Sink/Write"})
	res, err := s.Write(ctx, []domain.Mutation{intent, ct, store, stored}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"SECRET-date", "SECRET-type", "SECRET-store", "SECRET-field"} {
		if res[i].Err == nil || !strings.Contains(res[i].Err.Error(), want) {
			t.Fatalf("operation %d: the client must get the full message (with %q): %v", i, want, res[i].Err)
		}
	}
	if strings.Contains(buf.String(), "SECRET") {
		t.Fatalf("client data reached the log:\n%s", buf.String())
	}
	lines := logLines(t, buf.Bytes())
	byCode := map[string]map[string]any{}
	for _, l := range lines {
		byCode[l["code"].(string)] = l
	}
	inv, internal := byCode["INVALID_ARGUMENT"], byCode["INTERNAL"]
	if inv == nil || inv["count"] != float64(3) || inv["first_index"] != float64(0) || inv["first_kind"] != "merge" || inv["first_field"] != "intent" ||
		inv["namespace"] != "n" || inv["dataset"] != "d" {
		t.Errorf("invalid-argument line: %v", inv)
	}
	if internal == nil || internal["first_index"] != float64(3) || internal["first_kind"] != "merge" || internal["first_field"] != "address" {
		t.Errorf("internal line: %v", internal)
	}
}
