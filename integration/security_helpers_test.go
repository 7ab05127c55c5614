package integration_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/adapters/auth"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/internal/testkit/testcerts"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// dialTLS connects to addr over TLS trusting ca, presenting client when set.
func dialTLS(t testing.TB, addr string, ca *testcerts.CA, client *testcerts.Pair) sinkv1.SinkClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if client != nil {
		cfg.Certificates = []tls.Certificate{client.TLS}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return sinkv1.NewSinkClient(conn)
}

// withToken returns a context that sends the bearer token.
func withToken(t testing.TB, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+token)
}

// expectCode checks a whole-call gRPC error code and returns the status.
func expectCode(t testing.TB, what string, err error, want codes.Code) *status.Status {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != want {
		t.Fatalf("%s: %v (%v), want %v", what, st.Code(), err, want)
	}
	return st
}

// principalSpec is one principal of a test authorization file.
type principalSpec struct {
	name   string
	token  string
	certs  []string
	grants string // JSON array of grants
}

// writeAuthFile writes (or atomically replaces) an authorization file.
func writeAuthFile(t testing.TB, path string, ps ...principalSpec) {
	t.Helper()
	var parts []string
	for _, p := range ps {
		entry := fmt.Sprintf(`{"name":%q,"grants":%s`, p.name, p.grants)
		if p.token != "" {
			entry += fmt.Sprintf(`,"token_hashes":[%q]`, auth.HashToken(p.token))
		}
		if len(p.certs) > 0 {
			entry += fmt.Sprintf(`,"certificate_identities":["%s"]`, strings.Join(p.certs, `","`))
		}
		parts = append(parts, entry+"}")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(`{"principals":[`+strings.Join(parts, ",\n")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newAuthFile(t testing.TB, ps ...principalSpec) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "auth.json")
	writeAuthFile(t, path, ps...)
	return path
}

// logCapture collects the server's logs (debug level) for secret checks.
type logCapture struct{ testkit.LockedBuffer }

// option replaces the server's logger.
func (c *logCapture) option() fx.Option {
	l := slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return fx.Decorate(func(*slog.Logger) *slog.Logger { return l })
}
