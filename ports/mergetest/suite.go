// Package mergetest is the conformance suite every ports.MergeProfile runs,
// like storagetest for storage: determinism, inputs never mutated, absent
// records, content types declared vs accepted, per-operation
// invalid-argument errors and cancellation. A profile declares sample
// merges in Features; the suite derives the rest.
package mergetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Case is one sample merge.
type Case struct {
	Name string
	// Current is the stored document; nil for an absent record.
	Current *domain.Document
	Intent  domain.Document
	// Accept is the store's content types (empty: any).
	Accept []string
}

// Features describes the profile under test.
type Features struct {
	// Valid lists merges the profile must apply. At least one must have a
	// nil Current (an absent record).
	Valid []Case
	// Invalid lists merges the profile must reject with a
	// CodeInvalidArgument *domain.Error.
	Invalid []Case
	// Address is used for every case (zero: a fixed test address).
	Address domain.Address
}

// Run runs the suite against p.
func Run(t *testing.T, p ports.MergeProfile, f Features) {
	t.Helper()
	if f.Address == (domain.Address{}) {
		f.Address = domain.Address{Store: "test", Namespace: "ns", Dataset: "ds", Key: domain.StringKey("k")}
	}
	h := &harness{p: p, f: f}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Declaration", h.testDeclaration},
		{"Deterministic", h.testDeterministic},
		{"InputsNotMutated", h.testInputsNotMutated},
		{"ConcurrentCallsAgree", h.testConcurrent},
		{"AbsentRecord", h.testAbsent},
		{"ResultContentTypeDeclaredAndAccepted", h.testResultTypes},
		{"InvalidIntentsAreInvalidArgument", h.testInvalid},
		{"UndecodableInputsAreInvalidArgument", h.testGarbage},
		{"CancellationRespected", h.testCanceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

type harness struct {
	p ports.MergeProfile
	f Features
}

func (h *harness) input(c Case) ports.MergeInput {
	return ports.MergeInput{Address: h.f.Address, Current: c.Current, Intent: c.Intent, Accept: c.Accept}
}

func clone(c Case) Case {
	out := c
	if c.Current != nil {
		cur := domain.Document{ContentType: c.Current.ContentType, Data: bytes.Clone(c.Current.Data)}
		out.Current = &cur
	}
	out.Intent = domain.Document{ContentType: c.Intent.ContentType, Data: bytes.Clone(c.Intent.Data)}
	out.Accept = slices.Clone(c.Accept)
	return out
}

func (h *harness) merge(ctx context.Context, c Case) (domain.Document, error) {
	return h.p.Merge(ctx, h.input(clone(c)))
}

func (h *harness) mustMerge(t *testing.T, c Case) domain.Document {
	t.Helper()
	doc, err := h.merge(context.Background(), c)
	if err != nil {
		t.Fatalf("%s: merge failed: %v", c.Name, err)
	}
	return doc
}

func (h *harness) declared(ct string) bool {
	for _, d := range h.p.ContentTypes() {
		if domain.IsMediaType(ct, d) {
			return true
		}
	}
	return false
}

func (h *harness) testDeclaration(t *testing.T) {
	if h.p.Name() == "" || !utf8.ValidString(h.p.Name()) {
		t.Fatalf("profile name %q must be non-empty valid UTF-8", h.p.Name())
	}
	if len(h.p.ContentTypes()) == 0 {
		t.Fatal("the profile declares no content types")
	}
	for _, ct := range h.p.ContentTypes() {
		if _, err := domain.MediaType(ct); err != nil {
			t.Errorf("declared content type %q: %v", ct, err)
		}
	}
	if len(h.f.Valid) == 0 {
		t.Fatal("Features.Valid is empty: the suite needs sample merges")
	}
	absent := false
	for _, c := range h.f.Valid {
		absent = absent || c.Current == nil
	}
	if !absent {
		t.Fatal("Features.Valid has no merge into an absent record (Current nil)")
	}
}

func (h *harness) testDeterministic(t *testing.T) {
	for _, c := range h.f.Valid {
		first := h.mustMerge(t, c)
		for i := 0; i < 3; i++ {
			again := h.mustMerge(t, c)
			if again.ContentType != first.ContentType || !bytes.Equal(again.Data, first.Data) {
				t.Fatalf("%s: run %d gave %s %x, the first run %s %x", c.Name, i+2, again.ContentType, again.Data, first.ContentType, first.Data)
			}
		}
	}
}

func (h *harness) testInputsNotMutated(t *testing.T) {
	for _, c := range append(slices.Clone(h.f.Valid), h.f.Invalid...) {
		in := clone(c)
		want := clone(c)
		doc, _ := h.p.Merge(context.Background(), h.input(in))
		if !sameCase(in, want) {
			t.Fatalf("%s: Merge changed its inputs", c.Name)
		}
		// The result must not share memory with the inputs: writing to
		// it must leave them alone.
		for i := range doc.Data {
			doc.Data[i] ^= 0xff
		}
		if !sameCase(in, want) {
			t.Fatalf("%s: the result shares memory with the inputs", c.Name)
		}
	}
}

func sameCase(a, b Case) bool {
	if (a.Current == nil) != (b.Current == nil) {
		return false
	}
	if a.Current != nil && (a.Current.ContentType != b.Current.ContentType || !bytes.Equal(a.Current.Data, b.Current.Data)) {
		return false
	}
	return a.Intent.ContentType == b.Intent.ContentType && bytes.Equal(a.Intent.Data, b.Intent.Data) && slices.Equal(a.Accept, b.Accept)
}

func (h *harness) testConcurrent(t *testing.T) {
	c := h.f.Valid[0]
	want := h.mustMerge(t, c)
	shared := h.input(clone(c)) // the same input values, used by every goroutine
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				got, err := h.p.Merge(context.Background(), shared)
				if err != nil || got.ContentType != want.ContentType || !bytes.Equal(got.Data, want.Data) {
					errs <- "concurrent merge disagreed with a sequential one"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("%s: %s", c.Name, e)
	}
}

// testAbsent: a merge into an absent record creates a document, and when
// the store accepts only some types, the result is one of them (or the
// merge fails with invalid-argument, saying it cannot produce one).
func (h *harness) testAbsent(t *testing.T) {
	for _, c := range h.f.Valid {
		if c.Current != nil {
			continue
		}
		doc := h.mustMerge(t, c)
		if len(doc.Data) == 0 && doc.ContentType == "" {
			t.Fatalf("%s: merge into an absent record returned an empty document", c.Name)
		}
		for _, only := range h.p.ContentTypes() {
			cc := clone(c)
			cc.Accept = []string{only}
			got, err := h.merge(context.Background(), cc)
			if err != nil {
				checkInvalid(t, c.Name+" (store accepts only "+only+")", err)
				continue
			}
			if !domain.IsMediaType(got.ContentType, only) {
				t.Fatalf("%s: the store accepts only %s, the profile created %q", c.Name, only, got.ContentType)
			}
		}
		cc := clone(c)
		cc.Accept = []string{"application/x-sink-conformance-nothing"}
		if _, err := h.merge(context.Background(), cc); err == nil {
			t.Fatalf("%s: the store accepts no type the profile can produce, yet the merge succeeded", c.Name)
		} else {
			checkInvalid(t, c.Name+" (store accepts nothing the profile produces)", err)
		}
	}
}

func (h *harness) testResultTypes(t *testing.T) {
	for _, c := range h.f.Valid {
		doc := h.mustMerge(t, c)
		if !h.declared(doc.ContentType) {
			t.Fatalf("%s: result content type %q is not among the declared %v", c.Name, doc.ContentType, h.p.ContentTypes())
		}
		if len(c.Accept) > 0 && !slices.ContainsFunc(c.Accept, func(a string) bool { return domain.IsMediaType(doc.ContentType, a) }) {
			t.Fatalf("%s: result content type %q is not among the accepted %v", c.Name, doc.ContentType, c.Accept)
		}
	}
}

func checkInvalid(t *testing.T, name string, err error) {
	t.Helper()
	var e *domain.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %v (%T) is not a *domain.Error", name, err, err)
	}
	if e.Code != domain.CodeInvalidArgument {
		t.Fatalf("%s: error code %v, want %v (%v)", name, e.Code, domain.CodeInvalidArgument, err)
	}
	if msg := err.Error(); msg == "" || !utf8.ValidString(msg) {
		t.Fatalf("%s: error message %q must be non-empty valid UTF-8", name, msg)
	}
}

func (h *harness) testInvalid(t *testing.T) {
	for _, c := range h.f.Invalid {
		_, err := h.merge(context.Background(), c)
		if err == nil {
			t.Fatalf("%s: merge succeeded, want an invalid-argument error", c.Name)
		}
		checkInvalid(t, c.Name, err)
	}
}

// testGarbage feeds undecodable intents and current documents of every
// declared content type.
func (h *harness) testGarbage(t *testing.T) {
	garbage := [][]byte{{0xff, 0x00, 0x01}, []byte("{\"unterminated"), {}}
	valid := h.f.Valid[0]
	for _, ct := range h.p.ContentTypes() {
		for _, g := range garbage {
			c := clone(valid)
			c.Name = "garbage intent of type " + ct
			c.Intent = domain.Document{ContentType: ct, Data: g}
			if _, err := h.merge(context.Background(), c); err == nil {
				t.Fatalf("%s (%x): merge succeeded", c.Name, g)
			} else {
				checkInvalid(t, c.Name, err)
			}
			c = clone(valid)
			c.Name = "garbage current document of type " + ct
			c.Current = &domain.Document{ContentType: ct, Data: g}
			if _, err := h.merge(context.Background(), c); err == nil {
				t.Fatalf("%s (%x): merge succeeded", c.Name, g)
			} else {
				checkInvalid(t, c.Name, err)
			}
		}
	}
}

// testCanceled: with a done context the profile returns promptly, with
// either the same result as without cancellation or the context's error.
func (h *harness) testCanceled(t *testing.T) {
	for _, c := range h.f.Valid {
		want := h.mustMerge(t, c)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		type result struct {
			doc domain.Document
			err error
		}
		done := make(chan result, 1)
		go func() {
			doc, err := h.merge(ctx, c)
			done <- result{doc, err}
		}()
		select {
		case r := <-done:
			if r.err != nil {
				if !errors.Is(r.err, context.Canceled) && domain.CodeOf(r.err) != domain.CodeCanceled {
					t.Fatalf("%s: canceled merge failed with %v, want the context's error", c.Name, r.err)
				}
			} else if r.doc.ContentType != want.ContentType || !bytes.Equal(r.doc.Data, want.Data) {
				t.Fatalf("%s: canceled merge returned a different result", c.Name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: merge with a canceled context did not return", c.Name)
		}
	}
}
