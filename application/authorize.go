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
// perform the operation on the (normalized) address. It returns a
// per-operation CodePermissionDenied error naming the principal, the right
// and the dataset, never a secret.
func (s *Service) authorize(ctx context.Context, index int, kind domain.MutationKind, a domain.Address) *domain.Error {
	p, ok := domain.PrincipalFrom(ctx)
	if !ok {
		if s.requirePrincipal {
			return domain.Errorf(domain.CodeUnauthenticated, "operations[%d]: the request carries no credentials", index)
		}
		return nil
	}
	right := domain.RightFor(kind)
	if p.Allows(a.DatasetRef(), right) {
		return nil
	}
	what := "read"
	if kind != 0 {
		what = kind.String()
	}
	return domain.Errorf(domain.CodePermissionDenied, "operations[%d] (%s): principal %q has no %s right on %s",
		index, what, p.Name, right, a.DatasetRef())
}
