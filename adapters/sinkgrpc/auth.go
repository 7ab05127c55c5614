package sinkgrpc

import (
	"context"
	"crypto/x509"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

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
//
// It checks every call twice, both cheaply (a SHA-256 and map lookups): the
// tap handle (TapHandle) refuses calls from the request headers, before gRPC
// reads the request body, so that unauthenticated clients cannot make the
// server buffer requests; the interceptors then authenticate again and are
// the authority for the principal.
type Authentication struct {
	auth     ports.Authenticator
	log      *slog.Logger
	refusals *refusalLog
}

// NewAuthentication returns the authentication interceptors' owner.
func NewAuthentication(a ports.Authenticator, log *slog.Logger) *Authentication {
	if log == nil {
		log = slog.Default()
	}
	return &Authentication{auth: a, log: log, refusals: newRefusalLog(log, refusalLogBurst, refusalLogWindow)}
}

// ServerOptions returns the tap handle and the unary and stream
// interceptors. grpc-go admits one tap handle per server.
func (a *Authentication) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(a.TapHandle),
		grpc.ChainUnaryInterceptor(a.Unary),
		grpc.ChainStreamInterceptor(a.Stream),
	}
}

// TapHandle refuses, from the request headers alone and before the request
// body is read, every call (except health checks) that carries no usable
// credentials (no bearer token and no verified client certificate), a
// malformed authorization header, an invalid token or a certificate of no
// principal. It runs on the connection's reader goroutine: it does no I/O
// but the rate-bounded log line.
func (a *Authentication) TapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	if unauthenticatedMethod(info.FullMethodName) {
		return ctx, nil
	}
	creds, problem := credentialsFrom(info.Header, ctx)
	if problem == "" {
		if _, err := a.auth.Authenticate(ctx, creds); err != nil {
			problem = domain.AsError(err).Message
		}
	}
	if problem != "" {
		a.refusals.refused(info.FullMethodName, peerAddr(ctx), problem)
		return nil, status.Error(codes.Unauthenticated, validMessage(problem))
	}
	return ctx, nil
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
	md, _ := metadata.FromIncomingContext(ctx)
	creds, problem := credentialsFrom(md, ctx)
	if problem != "" {
		a.refusals.refused(method, peerAddr(ctx), problem)
		return nil, status.Error(codes.Unauthenticated, validMessage(problem))
	}
	p, err := a.auth.Authenticate(ctx, creds)
	if err != nil {
		e := domain.AsError(err)
		a.refusals.refused(method, peerAddr(ctx), e.Message)
		return nil, StatusError(e)
	}
	a.log.Debug("authenticated a call", "method", method, "principal", p.Name)
	return domain.WithPrincipal(ctx, p), nil
}

// credentialsFrom extracts the bearer token of the headers md and the
// verified client certificate's identities of the connection in ctx.
// problem is set for a malformed header.
func credentialsFrom(md metadata.MD, ctx context.Context) (c ports.Credentials, problem string) {
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
	c.CertificateIdentities = certificateIdentities(ctx)
	return c, ""
}

// certificateIdentities returns the typed identities of the client
// certificate that the TLS handshake verified (none without mutual TLS).
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

// Identity type prefixes of ports.Credentials.CertificateIdentities, in
// precedence order; the authorization file (adapters/auth) uses the same.
const (
	IdentityURI   = "uri:"
	IdentityDNS   = "dns:"
	IdentityEmail = "email:"
	IdentityCN    = "cn:"
)

// CertificateNames lists a certificate's typed identities in precedence
// order: its URI subject alternative names ("uri:spiffe://…"), DNS SANs
// ("dns:billing.internal"), e-mail SANs ("email:ops@example.org"), then its
// subject common name ("cn:svc-7"). The type keeps a common name from ever
// matching an identity declared as a DNS name, and the other way round.
func CertificateNames(cert *x509.Certificate) []string {
	var ids []string
	for _, u := range cert.URIs {
		ids = append(ids, IdentityURI+u.String())
	}
	for _, d := range cert.DNSNames {
		ids = append(ids, IdentityDNS+d)
	}
	for _, e := range cert.EmailAddresses {
		ids = append(ids, IdentityEmail+e)
	}
	if cert.Subject.CommonName != "" {
		ids = append(ids, IdentityCN+cert.Subject.CommonName)
	}
	return ids
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// Refused calls are logged at most refusalLogBurst times per
// refusalLogWindow; the next line reports how many were not logged.
const (
	refusalLogBurst  = 10
	refusalLogWindow = 10 * time.Second
	maxReasonBytes   = 300
)

// refusalLog logs refused calls at a bounded rate, so that a flood of
// unauthenticated calls cannot flood the log. It never logs credentials:
// reasons are the authenticator's messages, which never quote a token.
type refusalLog struct {
	log    *slog.Logger
	burst  int
	window time.Duration
	now    func() time.Time

	mu         sync.Mutex
	start      time.Time
	logged     int
	suppressed int
}

func newRefusalLog(log *slog.Logger, burst int, window time.Duration) *refusalLog {
	return &refusalLog{log: log, burst: burst, window: window, now: time.Now}
}

func (r *refusalLog) refused(method, peer, reason string) {
	r.mu.Lock()
	now := r.now()
	if now.Sub(r.start) >= r.window {
		r.start, r.logged = now, 0
	}
	if r.logged >= r.burst {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	r.logged++
	suppressed := r.suppressed
	r.suppressed = 0
	r.mu.Unlock()
	attrs := []any{"method", clip(method), "peer", peer, "reason", clip(reason)}
	if suppressed > 0 {
		attrs = append(attrs, "not_logged_before", suppressed)
	}
	r.log.Info("refused a call", attrs...)
}

// clip bounds a client-influenced string for the log and makes it valid
// UTF-8.
func clip(s string) string {
	if len(s) > maxReasonBytes {
		s = s[:maxReasonBytes] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
