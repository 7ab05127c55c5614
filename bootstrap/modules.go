// Package bootstrap assembles Sink processes with fx. It is the only package
// that imports fx: modules here call the plain constructors of the other
// packages, and roles (server, worker, all) are compositions of modules.
//
// Custom binaries build on the same modules, for example to register their
// own merge profiles:
//
//	os.Exit(bootstrap.Main(os.Args[1:], bootstrap.MergeProfile(NewMyProfile)))
package bootstrap

import (
	"io"
	"log/slog"
	"strings"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"google.golang.org/grpc/health"

	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/adapters/sinkgrpc"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/ports"
)

// mergeProfilesGroup is the fx value group merge profiles are provided to.
const mergeProfilesGroup = `group:"merge_profiles"`

// MergeProfile registers a merge profile constructor (a func returning a
// type that implements ports.MergeProfile, plus optional error) with the
// application. Custom binaries pass it to Main or New.
func MergeProfile(constructor any) fx.Option {
	return fx.Provide(fx.Annotate(constructor, fx.As(new(ports.MergeProfile)), fx.ResultTags(mergeProfilesGroup)))
}

// NewLogger returns the process logger for the configured format and level.
func NewLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(cfg.LogLevel)))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// ConfigModule supplies the configuration and the logger.
func ConfigModule(cfg Config, log *slog.Logger) fx.Option {
	return fx.Options(
		fx.Module("config", fx.Supply(cfg, log)),
		fx.WithLogger(func() fxevent.Logger {
			if cfg.LogLevel == "debug" {
				return &fxevent.SlogLogger{Logger: log}
			}
			return fxevent.NopLogger
		}),
	)
}

// StorageModule provides the ports.Storage: MongoDB when SINK_MONGODB_URI is
// set, PostgreSQL when SINK_POSTGRES_URL is set (configuration refuses
// both), otherwise the in-memory store (with a warning that nothing
// persists).
func StorageModule() fx.Option {
	// One *mongo.Client per process (see mongodb.go), also provided as is;
	// one PostgreSQL pool per process (postgres.go).
	return fx.Module("storage",
		fx.Provide(newMongoConn, mongoClient, newPgConn, newStorages),
	)
}

// ProfilesModule registers the built-in merge profiles and those of
// SINK_MERGE_PROFILES_FILE (declarative.go).
func ProfilesModule() fx.Option {
	return fx.Module("profiles", MergeProfile(func(cfg Config) mergepatch.Profile {
		return mergepatch.New(mergepatch.WithMaxDepth(cfg.MaxNestingDepth))
	}), declarativeProfiles())
}

type serviceParams struct {
	fx.In
	Config   Config
	Log      *slog.Logger
	Storage  ports.Storage
	Extra    ExtraStores          `optional:"true"` // the other stores served
	Profiles []ports.MergeProfile `group:"merge_profiles"`
	Queue    ports.MutationQueue  `optional:"true"`
	Observer application.Observer `optional:"true"` // ObservabilityModule
}

// ApplicationModule provides the application service.
func ApplicationModule() fx.Option {
	return fx.Module("application",
		fx.Provide(func(p serviceParams) (*application.Service, error) {
			opts := []application.Option{application.WithLogger(p.Log), application.WithFingerprintPolicy(application.FingerprintPolicy(p.Config.MergeFingerprintPolicy))}
			if p.Observer != nil {
				opts = append(opts, application.WithObserver(p.Observer))
			}
			if p.Queue != nil {
				opts = append(opts, application.WithQueue(p.Queue))
			}
			if p.Config.Auth.Enabled() {
				opts = append(opts, application.RequirePrincipal())
			}
			if rl := p.Config.RateLimits(); rl.Enabled() {
				opts = append(opts, application.WithAdmission(sinkgrpc.NewRateLimiter(p.Config.Store, rl)))
			}
			if len(p.Extra) > 0 {
				opts = append(opts, application.WithStores(p.Extra))
			}
			return application.NewService(p.Config.Application(), p.Storage, p.Profiles, opts...)
		}),
	)
}

// GRPCModule serves the Sink API, health and reflection with the limits of
// GRPCConfig. The listener opens in OnStart (so start-up fails clearly when
// the address is taken); OnStop drains in-flight RPCs and then closes what
// is left (grpcserver.go).
func GRPCModule() fx.Option {
	return fx.Module("grpc",
		securityProviders(),
		fx.Provide(
			func() *health.Server { return health.NewServer() },
			func(svc *application.Service) *sinkgrpc.Server { return sinkgrpc.NewServer(svc) },
			newGRPCListener, // grpcserver.go
		),
		// The listener opens on start; on stop it drains (sinkgrpc.Listener.Stop).
		fx.Invoke(func(lc fx.Lifecycle, l *sinkgrpc.Listener) { lc.Append(fx.StartStopHook(l.Start, l.Stop)) }),
	)
}
