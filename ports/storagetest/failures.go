package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Validation, a context that has ended, and calls that fail as a whole
// (ports.Storage's contract).

// promptly bounds a call that must not wait for anything (its context has
// ended); generous, so that a loaded machine does not fail it.
const promptly = 10 * time.Second

// unlistedType is a content type no storage lists.
const unlistedType = "application/x-storagetest-unlisted"

// expectInvalid checks that err is a *domain.Error with CodeInvalidArgument.
func expectInvalid(t *testing.T, what string, err error) {
	t.Helper()
	var e *domain.Error
	if !errors.As(err, &e) || e.Code != domain.CodeInvalidArgument {
		t.Fatalf("%s: %v (code %s), want a *domain.Error with %s", what, err, domain.CodeOf(err), domain.CodeInvalidArgument)
	}
}

// listed reports whether content type ct is one of types (media types
// compared without parameters, ignoring case).
func listed(types []string, ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	for _, l := range types {
		if lt, _, err := mime.ParseMediaType(l); err == nil && strings.EqualFold(lt, mt) {
			return true
		}
	}
	return false
}

func testValidate(t *testing.T, h *harness) {
	type bad struct {
		what string
		op   ports.WriteOp
	}
	var invalid []bad
	for _, ns := range h.f.InvalidNamespaces {
		a := domain.Address{Store: h.fx.Store, Namespace: ns, Dataset: "records", Key: domain.StringKey("v")}
		invalid = append(invalid,
			bad{fmt.Sprintf("put in namespace %q", ns), put(a, h.doc(a, 1), none)},
			bad{fmt.Sprintf("delete in namespace %q", ns), del(a, none)})
	}
	for _, ds := range h.f.InvalidDatasets {
		a := h.addr(ds, domain.StringKey("v"))
		invalid = append(invalid,
			bad{fmt.Sprintf("put in dataset %q", ds), put(a, h.doc(a, 1), none)},
			bad{fmt.Sprintf("delete in dataset %q", ds), del(a, none)})
	}
	a := h.key("validate-doc")
	types := h.s.ContentTypes()
	if len(types) > 0 {
		d := h.doc(a, 1)
		if !listed(types, d.ContentType) {
			t.Fatalf("NewDocument makes content type %q, which the storage does not list in ContentTypes %q", d.ContentType, types)
		}
		d.ContentType = unlistedType
		invalid = append(invalid, bad{fmt.Sprintf("content type %q, not in ContentTypes %q", unlistedType, types), put(a, d, none)})
	} else {
		// No list: the storage holds any content type.
		d := h.doc(a, 1)
		d.ContentType = unlistedType
		h.writeOK(put(a, d, none))
		if r := h.read(a)[0]; !r.Found || r.Record.Document.ContentType != unlistedType || !bytes.Equal(r.Record.Document.Data, d.Data) {
			t.Fatalf("a document of content type %q did not round-trip although ContentTypes is empty: %+v", unlistedType, r)
		}
		h.writeOK(del(a, none))
	}
	if h.f.MaxDocumentBytes > 0 {
		invalid = append(invalid, bad{fmt.Sprintf("document with a payload of MaxDocumentBytes (%d)", h.f.MaxDocumentBytes),
			put(a, h.fx.NewDocument(t, a, 1, make([]byte, h.f.MaxDocumentBytes)), none)})
	}
	if h.fx.InvalidDocuments != nil {
		for i, d := range h.fx.InvalidDocuments(t, a) {
			invalid = append(invalid, bad{fmt.Sprintf("InvalidDocuments[%d]", i), put(a, d, none)})
		}
	}
	if len(invalid) == 0 {
		t.Log("the storage declares nothing it rejects; only checked that Validate accepts what it holds")
		return
	}
	for _, b := range invalid {
		expectInvalid(t, "Validate of "+b.what, h.s.Validate(b.op))
	}
	// In one call with valid operations, each invalid one fails on its own
	// and the others go ahead.
	var ops []ports.WriteOp
	var good []domain.Address
	for i, b := range invalid {
		g := h.key(fmt.Sprintf("validate-ok-%d", i))
		good = append(good, g)
		ops = append(ops, put(g, h.doc(g, i), none), b.op)
	}
	res := h.s.Write(h.ctx, ops)
	if len(res) != len(ops) {
		t.Fatalf("Write returned %d results for %d operations", len(res), len(ops))
	}
	for i, b := range invalid {
		if r := res[2*i]; r.Err != nil || r.Revision.IsZero() {
			t.Fatalf("valid put %d next to %s: %+v", i, b.what, r)
		}
		expectInvalid(t, "Write of "+b.what, res[2*i+1].Err)
	}
	// Nothing was written for them. Read rejects an address the storage
	// cannot hold in its own result too.
	addrs := append([]domain.Address{a}, good...)
	for _, b := range invalid {
		if b.op.Address != a {
			addrs = append(addrs, b.op.Address)
		}
	}
	for i, r := range h.s.Read(h.ctx, addrs) {
		switch {
		case i == 0:
			if r.Err != nil || r.Found {
				t.Fatalf("read of %v after only invalid writes: %+v, want not found", addrs[i], r)
			}
		case i <= len(good):
			if r.Err != nil || !r.Found || h.fx.Counter(t, r.Record.Document) != i-1 {
				t.Fatalf("read of %v, written next to invalid operations: %+v", addrs[i], r)
			}
		default:
			expectInvalid(t, fmt.Sprintf("Read of %v", addrs[i]), r.Err)
			if r.Found {
				t.Fatalf("read of %v reported found", addrs[i])
			}
		}
	}
}

// failureOps returns a write of every kind on a, b and a record in another
// dataset (a exists with revision r, the others do not).
func (h *harness) failureOps(a, b domain.Address, r domain.Revision) []ports.WriteOp {
	c := h.addr("other", domain.StringKey("c"))
	return []ports.WriteOp{
		put(a, h.doc(a, 2), none),
		put(b, h.doc(b, 1), absent),
		put(a, h.doc(a, 3), exists),
		put(a, h.doc(a, 4), rev(r)),
		marked(put(a, h.doc(a, 5), rev(r)), mark(at(testLog, 0, 1), 4, "m1")),
		marked(put(b, h.doc(b, 2), none), mark(at(testLog, 0, 2), 4, "m2")),
		put(c, h.doc(c, 1), none),
		del(a, rev(r)),
		del(b, none),
	}
}

// nothingWritten checks that a still has counter 1 and revision r and that
// b and the other dataset's record do not exist.
func (h *harness) nothingWritten(a, b domain.Address, r domain.Revision) {
	h.t.Helper()
	h.unchanged(a, 1, r)
	for _, x := range []domain.Address{b, h.addr("other", domain.StringKey("c"))} {
		if h.read(x)[0].Found {
			h.t.Fatalf("a call that failed as a whole created %v", x)
		}
	}
}

func testCanceledContext(t *testing.T, h *harness) {
	a, b := h.key("canceled-a"), h.key("canceled-b")
	r := h.writeOK(put(a, h.doc(a, 1), none))
	ops := h.failureOps(a, b, r.Revision)
	canceled, cancel := context.WithCancel(h.ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(h.ctx, time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		what string
		ctx  context.Context
	}{{"a canceled context", canceled}, {"a context past its deadline", expired}} {
		want := c.ctx.Err()
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, want) {
				t.Fatalf("%s with %s: %v, want an error matching %v", what, c.what, err, want)
			}
			if want == context.Canceled && domain.CodeOf(err) != domain.CodeCanceled {
				t.Fatalf("%s with %s: code %s, want %s", what, c.what, domain.CodeOf(err), domain.CodeCanceled)
			}
		}
		start := time.Now()
		res := h.s.Write(c.ctx, ops)
		if len(res) != len(ops) {
			t.Fatalf("Write returned %d results for %d operations", len(res), len(ops))
		}
		for i, w := range res {
			check(fmt.Sprintf("write %d", i), w.Err)
			var e *domain.Error
			if !errors.As(w.Err, &e) {
				t.Fatalf("write %d with %s: %T is not a *domain.Error", i, c.what, w.Err)
			}
		}
		addrs := []domain.Address{a, b, h.addr("other", domain.StringKey("c"))}
		rr := h.s.Read(c.ctx, addrs)
		if len(rr) != len(addrs) {
			t.Fatalf("Read returned %d results for %d addresses", len(rr), len(addrs))
		}
		for i, x := range rr {
			check(fmt.Sprintf("read %d", i), x.Err)
			if x.Found {
				t.Fatalf("read %d with %s reported found", i, c.what)
			}
		}
		if el := time.Since(start); el > promptly {
			t.Fatalf("a write and a read with %s took %s, want them to return at once", c.what, el)
		}
	}
	h.nothingWritten(a, b, r.Revision)
}

func testWholeCallFailure(t *testing.T, h *harness) {
	if h.fx.Broken == nil {
		t.Skip("the fixtures cannot make the storage fail a whole call (Fixtures.Broken is nil)")
	}
	a, b := h.key("broken-a"), h.key("broken-b")
	r := h.writeOK(put(a, h.doc(a, 1), none))
	broken := h.fx.Broken(t, h.s)
	ops := h.failureOps(a, b, r.Revision)
	// Validate does no I/O: it still answers.
	for i, op := range ops {
		if err := broken.Validate(op); err != nil {
			t.Fatalf("Validate of operation %d on a broken storage: %v", i, err)
		}
	}
	// condition codes are answers about a record; a call that never
	// reached the records cannot give them.
	condition := map[domain.Code]bool{
		domain.CodeAlreadyExists: true, domain.CodeNotFound: true, domain.CodeRevisionMismatch: true,
		domain.CodeAlreadyApplied: true, domain.CodeSuperseded: true,
	}
	same := func(what string, errs []error) {
		t.Helper()
		for i, err := range errs {
			var e *domain.Error
			if !errors.As(err, &e) {
				t.Fatalf("%s %d on a broken storage: %v (%T), want a *domain.Error", what, i, err, err)
			}
			if condition[e.Code] || e.Code == domain.CodeInvalidArgument {
				t.Fatalf("%s %d on a broken storage: %v (code %s), want a failure of the call", what, i, err, e.Code)
			}
			if c0 := domain.CodeOf(errs[0]); e.Code != c0 {
				t.Fatalf("%s %d on a broken storage: code %s, but %s 0 has %s: a whole-call failure is the same in every result", what, i, e.Code, what, c0)
			}
		}
	}
	res := broken.Write(h.ctx, ops)
	if len(res) != len(ops) {
		t.Fatalf("Write returned %d results for %d operations", len(res), len(ops))
	}
	errs := make([]error, len(res))
	for i, w := range res {
		if w.Err == nil {
			t.Fatalf("write %d on a broken storage succeeded: %+v", i, w)
		}
		errs[i] = w.Err
	}
	same("write", errs)
	addrs := []domain.Address{a, b, h.addr("other", domain.StringKey("c"))}
	rr := broken.Read(h.ctx, addrs)
	if len(rr) != len(addrs) {
		t.Fatalf("Read returned %d results for %d addresses", len(rr), len(addrs))
	}
	errs = make([]error, len(rr))
	for i, x := range rr {
		if x.Err == nil || x.Found {
			t.Fatalf("read %d on a broken storage: %+v, want an error", i, x)
		}
		errs[i] = x.Err
	}
	same("read", errs)
	if err := broken.Ping(h.ctx); err == nil {
		t.Fatal("Ping of a broken storage succeeded")
	}
	h.nothingWritten(a, b, r.Revision)
}

// Unreachable returns a storage over s whose every Read, Write and Ping
// fails as a whole with a retryable CodeUnavailable, as when s's database
// cannot be reached; Validate and ContentTypes are s's. It is for fixtures
// of storages that cannot fail by themselves (Fixtures.Broken).
func Unreachable(s ports.Storage) ports.Storage { return unreachable{s} }

type unreachable struct{ ports.Storage }

var errUnreachable = domain.Errorf(domain.CodeUnavailable, "the storage cannot be reached (storagetest.Unreachable)")

func (unreachable) Read(_ context.Context, addrs []domain.Address) []ports.ReadResult {
	out := make([]ports.ReadResult, len(addrs))
	for i := range out {
		out[i].Err = errUnreachable
	}
	return out
}

func (unreachable) Write(_ context.Context, ops []ports.WriteOp) []ports.WriteResult {
	out := make([]ports.WriteResult, len(ops))
	for i := range out {
		out[i].Err = errUnreachable
	}
	return out
}

func (unreachable) Ping(context.Context) error { return errUnreachable }
