package application

import (
	"context"

	"github.com/sink-io/sink/domain"
)

// RequirePrincipal makes the service refuse requests whose context carries
// no authenticated principal (domain.WithPrincipal) with a whole-request
// CodeUnauthenticated error. Without it, requests without a principal are
// not authorized at all (authentication is disabled); a principal in the
// context is always enforced.
func RequirePrincipal() Option { return func(s *Service) { s.requirePrincipal = true } }

// checkCaller rejects a whole request that needs a principal and has none.
func (s *Service) checkCaller(ctx context.Context) *domain.Error {
	if _, ok := domain.PrincipalFrom(ctx); !ok && s.requirePrincipal {
		return domain.Errorf(domain.CodeUnauthenticated, "the request carries no credentials: send a bearer token or a client certificate")
	}
	return nil
}

// authorize checks, before any storage or queue call, that the caller may
// perform the operation (kind 0: a read) on the (normalized) address. It returns a
// per-operation CodePermissionDenied error naming the principal, the right
// and the dataset, never a secret.
func (s *Service) authorize(ctx context.Context, ref opRef, kind domain.MutationKind, a domain.Address) *domain.Error {
	p, ok := domain.PrincipalFrom(ctx)
	if !ok {
		if s.requirePrincipal {
			return opErrorf(ref, fieldAddress, domain.CodeUnauthenticated, "the request carries no credentials")
		}
		return nil
	}
	right := domain.RightFor(kind)
	if p.Allows(a.DatasetRef(), right) {
		return nil
	}
	return opErrorf(ref, fieldAddress, domain.CodePermissionDenied, "principal %q has no %s right on %s", p.Name, right, a.DatasetRef())
}
