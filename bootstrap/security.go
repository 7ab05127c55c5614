package bootstrap

import (
	"fmt"
	"log/slog"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sink-io/sink/adapters/auth"
	"github.com/sink-io/sink/adapters/sinkgrpc"
)

// GRPCServerOptions are the gRPC server options of the security settings:
// TLS credentials, then the authentication interceptors. (Rate limits are
// applied by the application, see ApplicationModule.)
type GRPCServerOptions struct {
	Options []grpc.ServerOption
}

// securityProviders provides GRPCServerOptions; it belongs to GRPCModule.
// TLS material is re-read when its files change (auth.ServerTLS); with
// SINK_AUTH_TOKEN_FILE the file is watched while the app runs (polling and
// SIGHUP, auth.Watcher).
func securityProviders() fx.Option {
	return fx.Provide(func(lc fx.Lifecycle, cfg Config, log *slog.Logger) (GRPCServerOptions, error) {
		var out GRPCServerOptions
		if cfg.TLS.Enabled() {
			st, err := auth.NewServerTLS(cfg.TLS.Server(), log)
			if err != nil {
				return out, fmt.Errorf("cannot configure TLS: %w", err)
			}
			out.Options = append(out.Options, grpc.Creds(credentials.NewTLS(st.Config())))
		}
		if cfg.Auth.Enabled() {
			a, err := auth.Load(cfg.Auth.TokenFile, log)
			if err != nil {
				return out, fmt.Errorf("cannot load SINK_AUTH_TOKEN_FILE: %w", err)
			}
			w := auth.NewWatcher(a, cfg.Auth.ReloadInterval)
			lc.Append(fx.StartStopHook(w.Start, w.Stop))
			out.Options = append(out.Options, sinkgrpc.NewAuthentication(a, log).ServerOptions()...)
		} else if !cfg.TLS.Enabled() {
			log.Warn("the gRPC API serves plaintext without authentication (SINK_TLS_CERT_FILE and SINK_AUTH_TOKEN_FILE are not set); expose it only to trusted networks")
		}
		// Rate limits are not an interceptor: the application asks the
		// limiter after validation and authorization (ApplicationModule).
		return out, nil
	})
}
