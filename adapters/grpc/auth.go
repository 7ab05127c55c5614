package sinkgrpc

import (
	"context"
	"crypto/x509"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// unauthenticatedMethods may be called without credentials: the standard
// health service, so that probes need no token.
func unauthenticatedMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/")
}

// Authentication authenticates every call (except health checks) with the
// authenticator: the bearer token of the "authorization" metadata or the
// verified client certificate. Unauthenticated calls are refused whole with
// UNAUTHENTICATED; authenticated ones carry their principal in the context
// (domain.WithPrincipal), which the application authorizes per operation.
// Nothing secret is logged or returned.
type Authentication struct {
	auth ports.Authenticator
	log  *slog.Logger
}

// NewAuthentication returns the authentication interceptors' owner.
func NewAuthentication(a ports.Authenticator, log *slog.Logger) *Authentication {
	if log == nil {
		log = slog.Default()
	}
	return &Authentication{auth: a, log: log}
}

// ServerOptions returns the unary and stream interceptors.
func (a *Authentication) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.Unary), grpc.ChainStreamInterceptor(a.Stream)}
}

// Unary is the unary server interceptor.
func (a *Authentication) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if unauthenticatedMethod(info.FullMethod) {
		return handler(ctx, req)
	}
	ctx, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream is the stream server interceptor (server reflection).
func (a *Authentication) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if unauthenticatedMethod(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx, err := a.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, withContext(ss, ctx))
}

func (a *Authentication) authenticate(ctx context.Context, method string) (context.Context, error) {
	creds, problem := credentialsFrom(ctx)
	if problem != "" {
		a.log.Info("refused a call", "method", method, "peer", peerAddr(ctx), "reason", problem)
		return nil, status.Error(codes.Unauthenticated, problem)
	}
	p, err := a.auth.Authenticate(ctx, creds)
	if err != nil {
		e := domain.AsError(err)
		a.log.Info("refused a call", "method", method, "peer", peerAddr(ctx), "reason", e.Message)
		return nil, status.Error(grpcCode(e.Code), e.Message)
	}
	a.log.Debug("authenticated a call", "method", method, "principal", p.Name)
	return domain.WithPrincipal(ctx, p), nil
}

// credentialsFrom extracts the bearer token and the verified client
// certificate's identities. problem is set for a malformed header.
func credentialsFrom(ctx context.Context) (c ports.Credentials, problem string) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		values := md.Get("authorization")
		switch {
		case len(values) > 1:
			return c, "send one authorization header, not several"
		case len(values) == 1:
			scheme, token, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
			token = strings.TrimSpace(token)
			if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
				return c, `the authorization header must be "Bearer <token>"`
			}
			c.BearerToken = token
		}
	}
	c.CertificateIdentities = certificateIdentities(ctx)
	return c, ""
}

// certificateIdentities returns the names of the client certificate that
// the TLS handshake verified (none without mutual TLS).
func certificateIdentities(ctx context.Context) []string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return CertificateNames(info.State.VerifiedChains[0][0])
}

// CertificateNames lists a certificate's identities: the subject common name,
// then the DNS, URI and e-mail subject alternative names.
func CertificateNames(cert *x509.Certificate) []string {
	var ids []string
	if cert.Subject.CommonName != "" {
		ids = append(ids, cert.Subject.CommonName)
	}
	ids = append(ids, cert.DNSNames...)
	for _, u := range cert.URIs {
		ids = append(ids, u.String())
	}
	return append(ids, cert.EmailAddresses...)
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
