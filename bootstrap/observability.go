package bootstrap

import (
	"cmp"
	"log/slog"
	"slices"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/sink-io/sink/adapters/opshttp"
	"github.com/sink-io/sink/adapters/sinkgrpc"
	"github.com/sink-io/sink/adapters/sinkprom"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/bootstrap/envconfig"
	"github.com/sink-io/sink/ports"
)

// healthChecksGroup is the fx value group of the dependencies the health
// monitor checks.
const healthChecksGroup = `group:"health_checks"`

// HealthCheck registers a dependency that decides readiness: get returns
// its checker from a value the app provides. For example:
//
//	HealthCheck("kafka", func(cl *kgo.Client) ports.HealthChecker { return ports.HealthCheckFunc(cl.Ping) })
func HealthCheck[T any](name string, get func(T) ports.HealthChecker) fx.Option {
	return fx.Provide(fx.Annotate(
		func(v T) application.Dependency { return application.Dependency{Name: name, Checker: get(v)} },
		fx.ResultTags(healthChecksGroup),
	))
}

// httpRoutesGroup is the fx value group of extra routes on the HTTP
// operations endpoint.
const httpRoutesGroup = `group:"http_routes"`

// HTTPRoute is an extra route of the HTTP operations endpoint, provided to
// the value group with HTTPRoutes.
type HTTPRoute = opshttp.Route

// HTTPRoutes registers a constructor of an HTTPRoute.
func HTTPRoutes(constructor any) fx.Option {
	return fx.Provide(fx.Annotate(constructor, fx.ResultTags(httpRoutesGroup)))
}

// HTTPEndpoint is the HTTP operations endpoint: nil when
// SINK_HTTP_ADDRESS=off (its Addr is then nil too).
type HTTPEndpoint = opshttp.Server

// GRPCObservability holds the gRPC server options that make RPCs
// observable (request ids, metrics, failure logs). GRPCModule puts them
// before every other option, so that its interceptor is the outermost.
type GRPCObservability struct {
	Options []grpc.ServerOption
}

type healthMonitorParams struct {
	fx.In
	Config       Config
	Log          *slog.Logger
	Dependencies []application.Dependency `group:"health_checks"`
}

type httpParams struct {
	fx.In
	Config  Config
	Log     *slog.Logger
	Monitor *application.HealthMonitor
	Metrics *sinkprom.Metrics
	Routes  []opshttp.Route `group:"http_routes"`
}

type readinessParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Monitor   *application.HealthMonitor
	Metrics   *sinkprom.Metrics
	Health    *health.Server `optional:"true"`
}

// ObservabilityModule makes every role observable:
//   - metrics (*sinkprom.Metrics, one registry per process), which the
//     application, the worker and the gRPC interceptor report to
//     (application.Observer, ports.LagObserver, ports.DeadLetterObserver,
//     GRPCObservability);
//   - the health monitor, which checks storage and every dependency
//     registered with HealthCheck every SINK_HEALTH_INTERVAL and drives the
//     gRPC health service and /readyz;
//   - the HTTP operations endpoint on SINK_HTTP_ADDRESS: /livez, /readyz,
//     /metrics and the routes registered with HTTPRoutes.
//
// Lifecycle order: the HTTP endpoint opens before the roles' listeners and
// closes after them; readiness is checked first when everything else has
// started, and on stop the process turns not ready (gRPC NOT_SERVING,
// /readyz 503) before anything else stops, so that clients go elsewhere
// while in-flight work drains.
func ObservabilityModule() fx.Option {
	return fx.Options(
		fx.Module("observability",
			fx.Provide(
				func(cfg Config) *sinkprom.Metrics {
					return sinkprom.New(cfg.Metrics())
				},
				func(m *sinkprom.Metrics) application.Observer { return m },
				func(m *sinkprom.Metrics) ports.LagObserver { return m },
				func(m *sinkprom.Metrics) ports.DeadLetterObserver { return m },
				func(cfg Config, m *sinkprom.Metrics, log *slog.Logger) GRPCObservability {
					return GRPCObservability{Options: []grpc.ServerOption{grpc.ChainUnaryInterceptor(sinkgrpc.UnaryInterceptor(m, log, sinkgrpc.WithRequestIDResponse(cfg.RequestIDResponse()))),
						grpc.ChainStreamInterceptor(sinkgrpc.StreamInterceptor(m, log))}}
				},
				func(p healthMonitorParams) (*application.HealthMonitor, error) {
					deps := slices.Clone(p.Dependencies)
					slices.SortFunc(deps, func(a, b application.Dependency) int { return cmp.Compare(a.Name, b.Name) })
					return application.NewHealthMonitor(deps, p.Config.Health(), p.Log.With("component", "health"))
				},
				newOpsHTTP,
			),
			HealthCheck("storage", func(s ports.Storage) ports.HealthChecker { return ports.HealthCheckFunc(s.Ping) }),
			// The other stores a process serves, when it serves more than one.
			fx.Provide(fx.Annotate(func(e ExtraStores) []application.Dependency {
				if len(e) == 0 {
					return nil
				}
				return []application.Dependency{{Name: "other stores", Checker: ports.HealthCheckFunc(e.Ping)}}
			}, fx.ResultTags(`group:"health_checks,flatten"`))),
			// Opens on start, before the roles' listeners; stops after them.
			fx.Invoke(func(lc fx.Lifecycle, s *HTTPEndpoint) {
				if s != nil {
					lc.Append(fx.StartStopHook(s.Start, s.Stop))
				}
			}),
		),
		// Outside the module: root invokes run after every module's, so this
		// hook starts last and stops first.
		fx.Invoke(runReadiness),
	)
}

// newOpsHTTP returns the HTTP operations endpoint (nil when disabled).
func newOpsHTTP(p httpParams) *HTTPEndpoint {
	if p.Config.HTTPAddress == envconfig.HTTPDisabled {
		p.Log.Info("the HTTP operations endpoint is disabled (SINK_HTTP_ADDRESS=off): no /livez, /readyz or /metrics")
		return nil
	}
	routes := p.Routes
	if p.Config.Observability.Profiling {
		routes = append(slices.Clip(routes), opshttp.ProfilingRoutes()...)
		p.Log.Warn("the HTTP operations endpoint serves the Go runtime's profiles (SINK_PROFILING=true) under " + opshttp.PathProfiles + ": keep it private")
	}
	return opshttp.NewServer(opshttp.NewHandler(p.Monitor, p.Metrics.Handler(), routes...),
		opshttp.ServerConfig{Address: p.Config.HTTPAddress, Setting: "SINK_HTTP_ADDRESS", Logger: p.Log})
}

// runReadiness publishes the monitor's readiness to the gRPC health
// service and the metrics, starts the monitor once everything has started,
// and turns the process not ready first thing on stop.
func runReadiness(p readinessParams) {
	p.Monitor.Subscribe(func(s application.HealthStatus) {
		p.Metrics.SetReady(s.Ready)
		for _, d := range s.Dependencies {
			p.Metrics.SetDependencyUp(d.Name, d.Err == nil)
		}
		if p.Health != nil {
			sinkgrpc.SetServing(p.Health, s.Ready)
		}
	})
	p.Lifecycle.Append(fx.StartStopHook(p.Monitor.Start, p.Monitor.Shutdown))
}
