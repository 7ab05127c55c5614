package ports

import (
	"context"

	"github.com/sink-io/sink/domain"
)

// Credentials are what a caller presented to prove who it is. Driving
// adapters (gRPC) extract them; they never log them.
type Credentials struct {
	// BearerToken is the token of an "authorization: Bearer …" header
	// ("" when none was sent). It is a secret.
	BearerToken string
	// CertificateIdentities are the names of a client certificate the TLS
	// layer has verified: subject common name, DNS, URI and e-mail SANs.
	// Empty without mutual TLS.
	CertificateIdentities []string
}

// Authenticator turns credentials into a principal.
type Authenticator interface {
	// Authenticate returns the principal the credentials identify, or a
	// *domain.Error with CodeUnauthenticated (missing, unknown or wrong
	// credentials). Errors never contain the secret.
	Authenticate(ctx context.Context, c Credentials) (*domain.Principal, error)
}
