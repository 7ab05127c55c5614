package bootstrap

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/auth"
	"github.com/sink-io/sink/bootstrap/envconfig"
	"github.com/sink-io/sink/internal/testkit/testcerts"
)

// messages is a slog handler that passes the messages it receives on.
type messages chan string

func (m messages) Enabled(context.Context, slog.Level) bool { return true }
func (m messages) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m messages) WithGroup(string) slog.Handler            { return m }
func (m messages) Handle(_ context.Context, r slog.Record) error {
	select {
	case m <- r.Message:
	default:
	}
	return nil
}

// securityProviders turns the TLS files into gRPC credentials, the
// authorization file into the authentication interceptors, and watches
// the file while the app runs.
func TestSecurityProvidersCompose(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	srv := ca.Server(t, "server")
	authFile := filepath.Join(t.TempDir(), "auth.json")
	authJSON := func(token string) []byte {
		return []byte(`{"principals":[{"name":"a","token_hashes":["` + auth.HashToken(token) + `"],"grants":[{"rights":["read"]}]}]}`)
	}
	if err := os.WriteFile(authFile, authJSON("token-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := envconfig.Load(map[string]string{
		"SINK_TLS_CERT_FILE": srv.CertFile, "SINK_TLS_KEY_FILE": srv.KeyFile, "SINK_TLS_CLIENT_CA_FILE": ca.CertFile,
		"SINK_AUTH_TOKEN_FILE": authFile, "SINK_AUTH_RELOAD_INTERVAL": "10ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := make(messages, 100)
	var out GRPCServerOptions
	app := fx.New(fx.NopLogger, fx.Supply(cfg, slog.New(logs)), securityProviders(), fx.Populate(&out))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	// TLS credentials, then the tap handle and the two interceptors.
	if len(out.Options) != 4 {
		t.Fatalf("%d server options", len(out.Options))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(authFile, authJSON("token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The watcher started with the app picks up the new version.
	loads := 0
	for loads < 2 {
		select {
		case m := <-logs:
			if strings.HasPrefix(m, "loaded the authorization file") {
				loads++
			}
		case <-ctx.Done():
			t.Fatal("the authorization file was not reloaded while the app ran")
		}
	}
	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
