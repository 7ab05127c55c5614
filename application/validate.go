package application

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// normalizeAddress fills in the served store and checks every address field.
func (s *Service) normalizeAddress(ref opRef, a *domain.Address) *domain.Error {
	switch {
	case a.Store == "":
		a.Store = s.cfg.Store
	case s.stores != nil:
		if _, ok := s.stores.byName[a.Store]; !ok {
			return invalid(ref, "address.store", "store %s is not served by this Sink; it serves %s (an empty store means %q)", s.quoteName(a.Store), s.stores.quoted(), s.cfg.Store)
		}
	case a.Store != s.cfg.Store:
		return invalid(ref, "address.store", "store %s is not served by this Sink; it serves %q", s.quoteName(a.Store), s.cfg.Store)
	}
	if err := s.checkName(ref, "address.namespace", a.Namespace); err != nil {
		return err
	}
	if err := s.checkName(ref, "address.dataset", a.Dataset); err != nil {
		return err
	}
	k := a.Key
	switch k.Kind {
	case domain.KeyString:
		v := k.StringValue()
		switch {
		case v == "":
			return invalid(ref, "address.key.string", "must not be empty")
		case len(v) > s.cfg.Limits.MaxKeyBytes:
			return invalid(ref, "address.key.string", "is %d bytes; the limit is %d", len(v), s.cfg.Limits.MaxKeyBytes)
		case !utf8.ValidString(v):
			return invalid(ref, "address.key.string", "must be valid UTF-8")
		}
	case domain.KeyBytes:
		switch n := k.Size(); {
		case n == 0:
			return invalid(ref, "address.key.bytes", "must not be empty")
		case n > s.cfg.Limits.MaxKeyBytes:
			return invalid(ref, "address.key.bytes", "is %d bytes; the limit is %d", n, s.cfg.Limits.MaxKeyBytes)
		}
	case domain.KeyObjectID:
		if n := k.Size(); n != domain.ObjectIDLength {
			return invalid(ref, "address.key.object_id", "must be exactly %d bytes, got %d", domain.ObjectIDLength, n)
		}
	case domain.KeyInt64:
	default:
		return invalid(ref, "address.key", "must be set (string, int64, bytes or object_id)")
	}
	return nil
}

// quoteName quotes a client-chosen name for an error message, or only
// gives its length when it is longer than any valid name.
func (s *Service) quoteName(v string) string {
	if len(v) > s.cfg.Limits.MaxNameLength {
		return "of " + strconv.Itoa(len(v)) + " bytes"
	}
	return strconv.Quote(v)
}

func (s *Service) checkName(ref opRef, field, v string) *domain.Error {
	switch {
	case v == "":
		return invalid(ref, field, "must not be empty")
	case len(v) > s.cfg.Limits.MaxNameLength:
		return invalid(ref, field, "is %d bytes; the limit is %d", len(v), s.cfg.Limits.MaxNameLength)
	case !utf8.ValidString(v):
		return invalid(ref, field, "must be valid UTF-8")
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return invalid(ref, field, "must not contain control characters")
	}
	return nil
}

func (s *Service) checkDocument(ref opRef, field string, d domain.Document) *domain.Error {
	switch {
	case d.ContentType == "":
		return invalid(ref, field+".content_type", "must not be empty")
	case len(d.ContentType) > domain.MaxContentTypeLength:
		// Too long to quote.
		return invalid(ref, field+".content_type", "is %d bytes; the limit is %d", len(d.ContentType), domain.MaxContentTypeLength)
	case len(d.Data) > s.cfg.Limits.MaxDocumentBytes:
		return invalid(ref, field+".data", "is %d bytes; the limit is %d", len(d.Data), s.cfg.Limits.MaxDocumentBytes)
	}
	if _, err := domain.MediaType(d.ContentType); err != nil {
		return invalid(ref, field+".content_type", "%q %v", d.ContentType, err)
	}
	if err := domain.CheckDocument(d, s.cfg.Limits.MaxNestingDepth); err != nil {
		return invalid(ref, field+".data", "%v (content type %q)", err, d.ContentType)
	}
	return nil
}

// validateMutation checks one mutation completely (including what storage
// can hold) and normalizes its address. It performs no I/O.
//
// It is the worker's check of a queued mutation, whose ID its record's
// applied mark will hold: at most domain.MaxMutationIDBytes.
func (s *Service) validateMutation(ref opRef, m *domain.Mutation) *domain.Error {
	if n := len(m.ID); n > domain.MaxMutationIDBytes {
		return invalid(ref, "id", "is %d bytes; the limit is %d", n, domain.MaxMutationIDBytes)
	}
	if err := s.normalizeAddress(ref, &m.Address); err != nil {
		return err
	}
	return s.checkMutation(ref, m)
}

// checkIdempotencyKey checks a client's idempotency key: 1 to
// domain.MaxMutationIDBytes bytes of printable ASCII without spaces (so
// that it can be logged, stored and compared as it is).
func checkIdempotencyKey(ref opRef, key string) *domain.Error {
	switch {
	case key == "":
		return invalid(ref, fieldIdempotencyKey, "must not be empty when given")
	case len(key) > domain.MaxMutationIDBytes:
		return invalid(ref, fieldIdempotencyKey, "is %d bytes; the limit is %d", len(key), domain.MaxMutationIDBytes)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' {
			return invalid(ref, fieldIdempotencyKey, "byte %d is not printable ASCII (spaces and control characters are not allowed either)", i)
		}
	}
	return nil
}

// checkMutation checks a mutation whose address is normalized.
func (s *Service) checkMutation(ref opRef, m *domain.Mutation) *domain.Error {
	if m.Keyed {
		if err := checkIdempotencyKey(ref, m.ID); err != nil {
			return err
		}
	}
	op := ports.WriteOp{Kind: ports.WriteDelete, Address: m.Address}
	switch m.Kind {
	case domain.MutationPut:
		if err := s.checkDocument(ref, "document", m.Document); err != nil {
			return err
		}
		switch m.Mode {
		case domain.PutUpsert, domain.PutReplace:
		case domain.PutCreate:
			if !m.ExpectedRevision.IsZero() {
				return invalid(ref, "expected_revision", "cannot be combined with mode CREATE: a record that must not exist has no revision")
			}
		default:
			return invalid(ref, "mode", "unknown put mode %d", m.Mode)
		}
		op = ports.WriteOp{Kind: ports.WritePut, Address: m.Address, Document: m.Document}
	case domain.MutationMerge:
		if m.Merge.Profile == "" {
			return invalid(ref, "profile", "must name a merge profile (known: %s)", s.profileNames())
		}
		p, ok := s.profiles[m.Merge.Profile]
		if !ok {
			return invalid(ref, "profile", "unknown merge profile %s (known: %s)", s.quoteName(m.Merge.Profile), s.profileNames())
		}
		if err := s.checkDocument(ref, "intent", m.Merge.Intent); err != nil {
			return err
		}
		if !s.accepts(p, m.Merge.Intent.ContentType) {
			return invalid(ref, "intent.content_type", "merge profile %q does not accept %q (accepts %s)", p.Name(), m.Merge.Intent.ContentType, strings.Join(p.ContentTypes(), ", "))
		}
		if !m.ExpectedRevision.IsZero() {
			return invalid(ref, "expected_revision", "is not supported on merges: a merge always applies to the latest revision")
		}
	case domain.MutationDelete:
	default:
		return invalid(ref, "kind", "unknown operation kind %d", m.Kind)
	}
	if err := s.storage.Validate(op); err != nil {
		return s.storageRejected(ref, op.Address.Store, err)
	}
	return nil
}

// storageRejected names the operation in an error of storage.Validate
// (of store's adapter).
func (s *Service) storageRejected(ref opRef, store string, err error) *domain.Error {
	return opError(ref, "store "+strconv.Quote(store), err)
}

// accepts reports whether the profile declares the media type of
// contentType (whatever its case and parameters).
func (s *Service) accepts(p ports.MergeProfile, contentType string) bool {
	for _, want := range s.mediaTypes[p.Name()] {
		if domain.IsMediaType(contentType, want) {
			return true
		}
	}
	return false
}
