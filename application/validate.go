package application

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// opRef names an operation in error messages: its position in the client's
// request, or, on the worker path, the queued mutation's id.
type opRef string

func opIndex(i int) opRef        { return opRef(fmt.Sprintf("operations[%d]", i)) }
func opMutation(id string) opRef { return opRef("mutation " + id) }

// invalid returns a per-operation invalid-argument error naming the operation.
func invalid(ref opRef, kind domain.MutationKind, field, format string, args ...any) *domain.Error {
	what := "operation"
	if kind != 0 {
		what = kind.String()
	}
	return domain.Errorf(domain.CodeInvalidArgument, "%s (%s): %s: %s", ref, what, field, fmt.Sprintf(format, args...))
}

// normalizeAddress fills in the served store and checks every address field.
func (s *Service) normalizeAddress(ref opRef, kind domain.MutationKind, a *domain.Address) *domain.Error {
	if a.Store == "" {
		a.Store = s.cfg.Store
	} else if a.Store != s.cfg.Store {
		return invalid(ref, kind, "address.store", "store %q is not served by this Sink; it serves %q", a.Store, s.cfg.Store)
	}
	if err := s.checkName(ref, kind, "address.namespace", a.Namespace); err != nil {
		return err
	}
	if err := s.checkName(ref, kind, "address.dataset", a.Dataset); err != nil {
		return err
	}
	k := a.Key
	switch k.Kind {
	case domain.KeyString:
		v := k.StringValue()
		switch {
		case v == "":
			return invalid(ref, kind, "address.key.string", "must not be empty")
		case len(v) > s.cfg.Limits.MaxKeyBytes:
			return invalid(ref, kind, "address.key.string", "is %d bytes; the limit is %d", len(v), s.cfg.Limits.MaxKeyBytes)
		case !utf8.ValidString(v):
			return invalid(ref, kind, "address.key.string", "must be valid UTF-8")
		}
	case domain.KeyBytes:
		switch n := k.Size(); {
		case n == 0:
			return invalid(ref, kind, "address.key.bytes", "must not be empty")
		case n > s.cfg.Limits.MaxKeyBytes:
			return invalid(ref, kind, "address.key.bytes", "is %d bytes; the limit is %d", n, s.cfg.Limits.MaxKeyBytes)
		}
	case domain.KeyObjectID:
		if n := k.Size(); n != domain.ObjectIDLength {
			return invalid(ref, kind, "address.key.object_id", "must be exactly %d bytes, got %d", domain.ObjectIDLength, n)
		}
	case domain.KeyInt64:
	default:
		return invalid(ref, kind, "address.key", "must be set (string, int64, bytes or object_id)")
	}
	return nil
}

func (s *Service) checkName(ref opRef, kind domain.MutationKind, field, v string) *domain.Error {
	switch {
	case v == "":
		return invalid(ref, kind, field, "must not be empty")
	case len(v) > s.cfg.Limits.MaxNameLength:
		return invalid(ref, kind, field, "is %d bytes; the limit is %d", len(v), s.cfg.Limits.MaxNameLength)
	case !utf8.ValidString(v):
		return invalid(ref, kind, field, "must be valid UTF-8")
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return invalid(ref, kind, field, "must not contain control characters")
	}
	return nil
}

func (s *Service) checkDocument(ref opRef, kind domain.MutationKind, field string, d domain.Document) *domain.Error {
	switch {
	case d.ContentType == "":
		return invalid(ref, kind, field+".content_type", "must not be empty")
	case !validContentType(d.ContentType):
		return invalid(ref, kind, field+".content_type", "%q is not a media type like application/json", d.ContentType)
	case len(d.Data) > s.cfg.Limits.MaxDocumentBytes:
		return invalid(ref, kind, field+".data", "is %d bytes; the limit is %d", len(d.Data), s.cfg.Limits.MaxDocumentBytes)
	}
	return nil
}

func validContentType(ct string) bool {
	typ, sub, ok := strings.Cut(ct, "/")
	if !ok || typ == "" || sub == "" || len(ct) > 255 {
		return false
	}
	return !strings.ContainsFunc(ct, func(r rune) bool { return r <= ' ' || r >= 0x7f })
}

// validateMutation checks one mutation completely (including what storage
// can hold) and normalizes its address. It performs no I/O.
func (s *Service) validateMutation(ref opRef, m *domain.Mutation) *domain.Error {
	if err := s.normalizeAddress(ref, m.Kind, &m.Address); err != nil {
		return err
	}
	op := ports.WriteOp{Kind: ports.WriteDelete, Address: m.Address}
	switch m.Kind {
	case domain.MutationPut:
		if err := s.checkDocument(ref, m.Kind, "document", m.Document); err != nil {
			return err
		}
		switch m.Mode {
		case domain.PutUpsert, domain.PutReplace:
		case domain.PutCreate:
			if !m.ExpectedRevision.IsZero() {
				return invalid(ref, m.Kind, "expected_revision", "cannot be combined with mode CREATE: a record that must not exist has no revision")
			}
		default:
			return invalid(ref, m.Kind, "mode", "unknown put mode %d", m.Mode)
		}
		op = ports.WriteOp{Kind: ports.WritePut, Address: m.Address, Document: m.Document}
	case domain.MutationMerge:
		if m.Merge.Profile == "" {
			return invalid(ref, m.Kind, "profile", "must name a merge profile (known: %s)", s.profileNames())
		}
		p, ok := s.profiles[m.Merge.Profile]
		if !ok {
			return invalid(ref, m.Kind, "profile", "unknown merge profile %q (known: %s)", m.Merge.Profile, s.profileNames())
		}
		if err := s.checkDocument(ref, m.Kind, "intent", m.Merge.Intent); err != nil {
			return err
		}
		if !accepts(p, m.Merge.Intent.ContentType) {
			return invalid(ref, m.Kind, "intent.content_type", "merge profile %q does not accept %q (accepts %s)", p.Name(), m.Merge.Intent.ContentType, strings.Join(p.ContentTypes(), ", "))
		}
		if !m.ExpectedRevision.IsZero() {
			return invalid(ref, m.Kind, "expected_revision", "is not supported on merges: a merge always applies to the latest revision")
		}
	case domain.MutationDelete:
	default:
		return invalid(ref, m.Kind, "kind", "unknown operation kind %d", m.Kind)
	}
	if err := s.storage.Validate(op); err != nil {
		e := domain.AsError(err)
		if e.Code != domain.CodeInvalidArgument {
			return e
		}
		return invalid(ref, m.Kind, fmt.Sprintf("store %q", s.cfg.Store), "%s", e.Message)
	}
	return nil
}

func accepts(p ports.MergeProfile, contentType string) bool {
	for _, ct := range p.ContentTypes() {
		if ct == contentType {
			return true
		}
	}
	return false
}
