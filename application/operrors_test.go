package application_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// failingProfile fails every merge with err.
type failingProfile struct {
	name string
	err  func(in ports.MergeInput) error
}

func (p failingProfile) Name() string           { return p.name }
func (p failingProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (p failingProfile) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	return domain.Document{}, p.err(in)
}

// bigProfile produces a document larger than any limit.
type bigProfile struct{}

func (bigProfile) Name() string           { return "big" }
func (bigProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (bigProfile) Merge(context.Context, ports.MergeInput) (domain.Document, error) {
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: make([]byte, 2048)}, nil
}

// expectPrefixed checks that e names the operation and the field exactly once.
func expectPrefixed(t *testing.T, what string, e *domain.Error, code domain.Code, prefix string) {
	t.Helper()
	if e == nil {
		t.Fatalf("%s: no error, want %s %q…", what, code, prefix)
	}
	if e.Code != code || !strings.HasPrefix(e.Error(), prefix) {
		t.Fatalf("%s: %s %q, want %s %q…", what, e.Code, e.Error(), code, prefix)
	}
	ref, _, _ := strings.Cut(prefix, "): ")
	if n := strings.Count(e.Error(), ref+"): "); n != 1 {
		t.Fatalf("%s: %q names the operation %d times, want once", what, e.Error(), n)
	}
}

func TestEveryOperationErrorNamesTheOperationAndTheField(t *testing.T) {
	rec := &recorder{Storage: memory.New()}
	rec.failWrite = func(_ int, op ports.WriteOp) error {
		if op.Address.Key.StringValue() == "down" {
			return domain.Errorf(domain.CodeUnavailable, "storage is unavailable")
		}
		return nil
	}
	profiles := []ports.MergeProfile{addProfile{}, bigProfile{},
		failingProfile{"internal", func(ports.MergeInput) error { return errors.New("boom") }},
		failingProfile{"invalid", func(ports.MergeInput) error {
			return domain.Errorf(domain.CodeInvalidArgument, "merge-patch: the intent is not valid JSON")
		}},
	}
	cfg := application.DefaultConfig()
	cfg.Limits.MaxDocumentBytes = 1024
	q := &fakeQueue{fail: func(m domain.Mutation) bool { return m.Address.Key.StringValue() == "down" }}
	s, err := application.NewService(cfg, rec, profiles, application.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res, _ := s.Write(ctx, []domain.Mutation{put("exists", 1)}, application.WaitUntilApplied); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	octet := put("octet", 1)
	octet.Document.ContentType = "application/octet-stream"
	if res, _ := s.Write(ctx, []domain.Mutation{octet}, application.WaitUntilApplied); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}

	// Reads say (read), not (operation).
	bad := addr("x")
	bad.Dataset = ""
	rr, err := s.Read(ctx, []domain.Address{addr("x"), bad})
	if err != nil {
		t.Fatal(err)
	}
	expectPrefixed(t, "read", rr[1].Err, domain.CodeInvalidArgument, "operations[1] (read): address.dataset: must not be empty")

	withProfile := func(k, profile string) domain.Mutation {
		m := merge(k, 1)
		m.Merge.Profile = profile
		return m
	}
	create := put("exists", 2)
	create.Mode = domain.PutCreate
	stale := put("exists", 3)
	stale.ExpectedRevision = domain.Revision("stale")
	res, err := s.Write(ctx, []domain.Mutation{
		withProfile("a", "invalid"),  // 0: profile rejects the intent
		withProfile("b", "internal"), // 1: profile fails
		merge("octet", 1),            // 2: current record of a content type the profile cannot merge
		withProfile("c", "big"),      // 3: merge result too large
		create,                       // 4: CREATE of an existing record
		stale,                        // 5: revision mismatch
		put("down", 1),               // 6: storage unavailable
		{Kind: domain.MutationDelete, Address: addr("d")}, // 7: wrong kind for Write
	}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		code   domain.Code
		prefix string
	}{
		{domain.CodeInvalidArgument, "operations[0] (merge): intent: merge-patch: the intent is not valid JSON"},
		{domain.CodeInvalidArgument, `operations[1] (merge): intent: merge profile "internal" rejected the intent: boom`},
		{domain.CodeInvalidArgument, `operations[2] (merge): address: `},
		{domain.CodeInvalidArgument, `operations[3] (merge): intent: merge profile "big" produced`},
		{domain.CodeAlreadyExists, "operations[4] (put): mode: "},
		{domain.CodeRevisionMismatch, "operations[5] (put): expected_revision: "},
		{domain.CodeUnavailable, "operations[6] (put): address: storage is unavailable"},
		{domain.CodeInvalidArgument, "operations[7] (delete): kind: must be one of put or merge, got delete"},
	} {
		expectPrefixed(t, fmt.Sprint("operation ", i), res[i].Err, c.code, c.prefix)
	}
	if !res[6].Err.Retryable || res[0].Err.Retryable {
		t.Fatalf("retryability changed: %+v %+v", res[6].Err, res[0].Err)
	}

	// Queue submission results.
	res, err = s.Write(ctx, []domain.Mutation{put("up", 1), put("down", 1)}, application.ReturnAfterAccepted)
	if err != nil {
		t.Fatal(err)
	}
	expectPrefixed(t, "submit", res[1].Err, domain.CodeUnavailable, "operations[1] (put): address: broker down")

	// Authorization.
	reader := domain.WithPrincipal(ctx, &domain.Principal{Name: "reader",
		Grants: []domain.Grant{{Store: "*", Namespace: "*", Dataset: "*", Rights: domain.RightRead}}})
	res, _ = s.Write(reader, []domain.Mutation{put("a", 1)}, application.WaitUntilApplied)
	expectPrefixed(t, "denied", res[0].Err, domain.CodePermissionDenied, `operations[0] (put): address: principal "reader" has no write right`)

	// Worker path: mutations are named by id; blocked and exhausted
	// mutations keep the prefix, once.
	w := newService(t, &recorder{Storage: memory.New(), failWrite: func(int, ports.WriteOp) error {
		return domain.Errorf(domain.CodeUnavailable, "db down")
	}}, func(c *application.Config) { c.Apply.MaxAttempts = 2 })
	m0, m1 := put("a", 1), put("a", 2)
	m0.ID, m1.ID = "m0", "m1"
	out := w.ApplyMutations(ctx, []domain.Mutation{m0, m1})
	expectPrefixed(t, "worker m0", domain.AsError(out[0].Err), domain.CodeUnavailable, "mutation m0 (put): address: retries exhausted after 2 attempts: db down")
	expectPrefixed(t, "worker m1", domain.AsError(out[1].Err), domain.CodeUnavailable, "mutation m1 (put): address: retries exhausted after 2 attempts: not attempted: mutation m0")
}

func TestContentTypesAreMediaTypes(t *testing.T) {
	s := newService(t, memory.New())
	ctx := context.Background()
	var muts []domain.Mutation
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON", "application/json;charset=utf-8"} {
		m := put(ct, 1)
		m.Document.ContentType = ct
		muts = append(muts, m)
		mg := merge("merge "+ct, 2)
		mg.Merge.Intent.ContentType = ct
		muts = append(muts, mg)
	}
	res, err := s.Write(ctx, muts, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("operation %d (%s): %v", i, muts[i].Kind, r.Err)
		}
	}
	// The client's content type is kept as sent, parameters included.
	rr, _ := s.Read(ctx, []domain.Address{addr("application/json; charset=utf-8"), addr("Application/JSON")})
	if rr[0].Record.Document.ContentType != "application/json; charset=utf-8" || rr[1].Record.Document.ContentType != "Application/JSON" {
		t.Fatalf("stored content types %q, %q", rr[0].Record.Document.ContentType, rr[1].Record.Document.ContentType)
	}
	// A merge into a record stored as "Application/JSON" is a JSON merge.
	if res, _ := s.Write(ctx, []domain.Mutation{merge("Application/JSON", 5)}, application.WaitUntilApplied); res[0].Err != nil {
		t.Fatalf("merge into Application/JSON: %v", res[0].Err)
	}

	for _, c := range []struct {
		ct, want string
	}{
		{"json", `operations[0] (put): document.content_type: "json" is not a media type like application/json`},
		{"application/json; charset", `operations[0] (put): document.content_type: "application/json; charset" is not a media type`},
		{"application/", `operations[0] (put): document.content_type: "application/" is not a media type`},
		{"application/json/x", `operations[0] (put): document.content_type: "application/json/x" is not a media type`},
		{strings.Repeat("a", 300) + "/json", `operations[0] (put): document.content_type: is 305 bytes; the limit is 255`},
	} {
		m := put("bad", 1)
		m.Document.ContentType = c.ct
		res, _ := s.Write(ctx, []domain.Mutation{m}, application.WaitUntilApplied)
		expectPrefixed(t, c.ct, res[0].Err, domain.CodeInvalidArgument, c.want)
	}
	m := merge("bad", 1)
	m.Merge.Intent.ContentType = "text/plain; charset=utf-8"
	res, _ = s.Write(ctx, []domain.Mutation{m}, application.WaitUntilApplied)
	expectPrefixed(t, "merge text/plain", res[0].Err, domain.CodeInvalidArgument,
		`operations[0] (merge): intent.content_type: merge profile "add" does not accept "text/plain; charset=utf-8" (accepts application/json)`)
}
