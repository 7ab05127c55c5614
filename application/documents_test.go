package application_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// brokenResultProfile produces a document that is not the JSON it claims.
type brokenResultProfile struct{}

func (brokenResultProfile) Name() string           { return "broken" }
func (brokenResultProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (brokenResultProfile) Merge(context.Context, ports.MergeInput) (domain.Document, error) {
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"a":`)}, nil
}

func documentService(t *testing.T, st ports.Storage) *application.Service {
	t.Helper()
	cfg := application.DefaultConfig()
	cfg.Limits.MaxNestingDepth = 3
	s, err := application.NewService(cfg, st, []ports.MergeProfile{mergepatch.New(), brokenResultProfile{}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func putDoc(k, contentType, data string) domain.Mutation {
	return domain.Mutation{Kind: domain.MutationPut, Address: addr(k), Document: domain.Document{ContentType: contentType, Data: []byte(data)}}
}

// bsonOf returns a BSON document {"a": {"a": … {} …}} nested depth levels
// below the top level.
func bsonOf(depth int) string {
	if depth == 0 {
		return "\x05\x00\x00\x00\x00"
	}
	inner := bsonOf(depth - 1)
	n := 4 + 1 + 2 + len(inner) + 1
	return string([]byte{byte(n), 0, 0, 0, 0x03, 'a', 0}) + inner + "\x00"
}

// Documents whose content type Sink understands (JSON, +json, BSON) are
// checked when they are written: a broken or too deep one gets a specific
// INVALID_ARGUMENT and is not stored. Other content types stay opaque.
func TestPutDocumentsAreCheckedAgainstTheirContentType(t *testing.T) {
	s := documentService(t, memory.New())
	ctx := context.Background()
	deepJSON := strings.Repeat(`{"a":`, 5) + "1" + strings.Repeat("}", 5)
	bad := map[string]struct {
		m    domain.Mutation
		want string
	}{
		"truncated JSON":  {putDoc("t", "application/json", `{"a":`), "operations[0] (put): document.data: is not valid JSON: it ends before the value is complete (byte 5 (line 1, column 6))"},
		"JSON with junk":  {putDoc("j", "application/json; charset=utf-8", `{"a":1}x`), "operations[0] (put): document.data: is not valid JSON: syntax error at byte 7"},
		"+json":           {putDoc("p", "application/problem+json", `{`), "operations[0] (put): document.data: is not valid JSON"},
		"JSON as BSON":    {putDoc("b", "application/bson", `{"a":1}`), "operations[0] (put): document.data: is not valid BSON: "},
		"too deep JSON":   {putDoc("dj", "application/json", deepJSON), "operations[0] (put): document.data: is not valid JSON: documents and arrays are nested more than 3 levels deep"},
		"too deep BSON":   {putDoc("db", "application/bson", bsonOf(4)), "operations[0] (put): document.data: is not valid BSON: element 0.0.0.0: documents and arrays are nested more than 3 levels deep"},
		"empty JSON":      {putDoc("e", "application/json", ""), "operations[0] (put): document.data: is not valid JSON: the document is empty"},
		"non-UTF-8 JSON":  {putDoc("u", "application/json", "\"\xff\""), "operations[0] (put): document.data: is not valid JSON: invalid UTF-8 at byte 1"},
		"truncated BSON":  {putDoc("tb", "application/bson", bsonOf(1)[:8]), "operations[0] (put): document.data: is not valid BSON: "},
		"bad merge":       {domain.Mutation{Kind: domain.MutationMerge, Address: addr("m"), Merge: domain.MergeIntent{Profile: "merge-patch", Intent: domain.Document{ContentType: "application/json", Data: []byte(`{"a":`)}}}, "operations[0] (merge): intent.data: is not valid JSON: it ends before the value is complete"},
		"too deep intent": {domain.Mutation{Kind: domain.MutationMerge, Address: addr("m"), Merge: domain.MergeIntent{Profile: "merge-patch", Intent: domain.Document{ContentType: "application/json", Data: []byte(deepJSON)}}}, "operations[0] (merge): intent.data: is not valid JSON: documents and arrays are nested more than 3 levels deep"},
	}
	for name, c := range bad {
		{
			res, err := s.Write(ctx, []domain.Mutation{c.m}, application.WaitUntilApplied)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if e := res[0].Err; e == nil || e.Code != domain.CodeInvalidArgument || !strings.HasPrefix(e.Error(), c.want) {
				t.Errorf("%s: %v %v, want INVALID_ARGUMENT %q…", name, res[0].Status, e, c.want)
			}
			r, err := s.Read(ctx, []domain.Address{c.m.Address})
			if err != nil || r[0].Status != application.StatusNotFound {
				t.Errorf("%s: stored anyway: %v %v", name, r[0].Status, err)
			}
		}
	}
	good := []domain.Mutation{
		putDoc("ok-json", "application/json", ` {"a": [1, {"b": "}]"}]} `),
		putDoc("ok-deep", "application/json", strings.Repeat(`[`, 4)+strings.Repeat(`]`, 4)), // 3 levels below the top
		putDoc("ok-bson", "application/bson", bsonOf(3)),
		putDoc("ok-ld", "application/ld+json", `{"@id":"x"}`),
		putDoc("opaque-text", "text/plain", `{"a":`),
		putDoc("opaque-bytes", "application/octet-stream", "\xff\x00{"),
		putDoc("opaque-jsonish", "application/jsonl", `{"a":1}`+"\n"+`{"a":2}`),
	}
	for _, m := range good {
		res, err := s.Write(ctx, []domain.Mutation{m}, application.WaitUntilApplied)
		if err != nil || res[0].Err != nil || res[0].Status != application.StatusApplied {
			t.Errorf("%s: %v %v %v", m.Address.Key.StringValue(), res[0].Status, res[0].Err, err)
		}
	}
}

// A stored document that is broken (written before documents were
// checked, or by another program) is blamed for a failing merge, not the
// intent; a merge profile's broken result is blamed on the profile.
func TestMergeErrorsNameTheBrokenDocument(t *testing.T) {
	st := memory.New()
	s := documentService(t, st)
	ctx := context.Background()
	stale := putDoc("stale", "application/json", `{"a":`)
	stale.Address.Store = application.DefaultConfig().Store
	if res := st.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: stale.Address, Document: stale.Document}}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	m := domain.Mutation{Kind: domain.MutationMerge, Address: addr("stale"), Merge: domain.MergeIntent{Profile: "merge-patch", Intent: domain.Document{ContentType: "application/json", Data: []byte(`{"b":1}`)}}}
	res, err := s.Write(ctx, []domain.Mutation{m}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	const want = `operations[0] (merge): address: the record's stored document (content type "application/json") is not valid JSON: it ends before the value is complete`
	if e := res[0].Err; e == nil || e.Code != domain.CodeInvalidArgument || !strings.HasPrefix(e.Error(), want) || strings.Contains(e.Error(), "intent") {
		t.Errorf("merge into a broken document: %v, want %q…", e, want)
	}

	m = domain.Mutation{Kind: domain.MutationMerge, Address: addr("fresh"), Merge: domain.MergeIntent{Profile: "broken", Intent: domain.Document{ContentType: "application/json", Data: []byte(`{}`)}}}
	res, err = s.Write(ctx, []domain.Mutation{m}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	const wantResult = `operations[0] (merge): intent: merge profile "broken" produced a document of content type "application/json" that is not valid JSON`
	if e := res[0].Err; e == nil || e.Code != domain.CodeInvalidArgument || !strings.HasPrefix(e.Error(), wantResult) {
		t.Errorf("a broken merge result: %v, want %q…", e, wantResult)
	}
	if r, _ := s.Read(ctx, []domain.Address{addr("fresh")}); r[0].Status != application.StatusNotFound {
		t.Errorf("the broken result was stored: %v", r[0].Status)
	}
}

func TestMaxNestingDepthIsValidated(t *testing.T) {
	for _, d := range []int{0, domain.MaxNestingLimit + 1} {
		cfg := application.DefaultConfig()
		cfg.Limits.MaxNestingDepth = d
		if _, err := application.NewService(cfg, memory.New(), nil); err == nil || !strings.Contains(err.Error(), "max nesting depth") {
			t.Errorf("depth %d: %v", d, err)
		}
	}
}

// A profile's error about the current document names the record, not the
// intent.
func TestProfileErrorsAboutTheCurrentDocumentNameTheRecord(t *testing.T) {
	cur := failingProfile{"cur", func(in ports.MergeInput) error {
		return domain.Errorf(domain.CodeInvalidArgument, "cur: current document: /a is not an object")
	}}
	intent := failingProfile{"int", func(in ports.MergeInput) error {
		return domain.Errorf(domain.CodeInvalidArgument, "int: intent: /a is not an object")
	}}
	s, err := application.NewService(application.DefaultConfig(), memory.New(), []ports.MergeProfile{cur, intent})
	if err != nil {
		t.Fatal(err)
	}
	for profile, want := range map[string]string{
		"cur": "operations[0] (merge): address: cur: current document: /a is not an object",
		"int": "operations[0] (merge): intent: int: intent: /a is not an object",
	} {
		m := domain.Mutation{Kind: domain.MutationMerge, Address: addr("p"), Merge: domain.MergeIntent{Profile: profile, Intent: domain.Document{ContentType: "application/json", Data: []byte(`{}`)}}}
		res, err := s.Write(context.Background(), []domain.Mutation{m}, application.WaitUntilApplied)
		if err != nil {
			t.Fatal(err)
		}
		if e := res[0].Err; e == nil || e.Error() != want {
			t.Errorf("%s: %v, want %q", profile, e, want)
		}
	}
}
