package bootstrap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sinkgrpc "github.com/sink-io/sink/adapters/grpc"
	"github.com/sink-io/sink/adapters/opshttp"
	sinkprom "github.com/sink-io/sink/adapters/prometheus"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/ports"
)

// HTTPDisabled as SINK_HTTP_ADDRESS disables the HTTP operations endpoint
// (an empty value means the default, like for every setting).
const HTTPDisabled = "off"

// ObservabilityConfig configures health checking and metrics. The HTTP
// endpoint's address is Config.HTTPAddress (SINK_HTTP_ADDRESS).
type ObservabilityConfig struct {
	HealthInterval     time.Duration `env:"SINK_HEALTH_INTERVAL" envDefault:"2s" desc:"How often the dependencies (storage, and Kafka where configured) are checked; readiness (gRPC health, /readyz) follows their answers."`
	HealthTimeout      time.Duration `env:"SINK_HEALTH_TIMEOUT" envDefault:"1s" desc:"How long one dependency check may take before the dependency counts as down."`
	MetricsMaxDatasets int           `env:"SINK_METRICS_MAX_DATASETS" envDefault:"100" desc:"Distinct store/namespace/dataset label sets kept in metrics; operations on further datasets are counted under \"_other\" (clients choose these names, so this bounds the number of series)."`
}

// validateObservability reports the problems of the observability settings.
func (c Config) validateObservability(unparsed map[string]bool) error {
	var errs []error
	o := c.Observability
	if c.HTTPAddress != HTTPDisabled {
		if _, _, err := net.SplitHostPort(c.HTTPAddress); err != nil {
			errs = append(errs, fmt.Errorf("SINK_HTTP_ADDRESS %q is not a host:port address (or %q to disable the endpoint): %v", c.HTTPAddress, HTTPDisabled, err))
		}
	}
	if o.HealthInterval <= 0 && !unparsed["SINK_HEALTH_INTERVAL"] {
		errs = append(errs, fmt.Errorf("SINK_HEALTH_INTERVAL must be positive, got %s", o.HealthInterval))
	}
	if o.HealthTimeout <= 0 && !unparsed["SINK_HEALTH_TIMEOUT"] {
		errs = append(errs, fmt.Errorf("SINK_HEALTH_TIMEOUT must be positive, got %s", o.HealthTimeout))
	}
	if o.MetricsMaxDatasets <= 0 && !unparsed["SINK_METRICS_MAX_DATASETS"] {
		errs = append(errs, fmt.Errorf("SINK_METRICS_MAX_DATASETS must be positive, got %d", o.MetricsMaxDatasets))
	}
	return errors.Join(errs...)
}

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

// HTTPEndpoint exposes the address the HTTP operations endpoint listens
// on, once started (nil when SINK_HTTP_ADDRESS=off).
type HTTPEndpoint struct{ endpoint }

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
	Lifecycle fx.Lifecycle
	Config    Config
	Log       *slog.Logger
	Monitor   *application.HealthMonitor
	Metrics   *sinkprom.Metrics
	Endpoint  *HTTPEndpoint
	Routes    []opshttp.Route `group:"http_routes"`
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
//     application and the gRPC interceptor report to (ports.Observer,
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
					return sinkprom.New(sinkprom.Options{Store: cfg.Store, MaxDatasets: cfg.Observability.MetricsMaxDatasets})
				},
				func(m *sinkprom.Metrics) ports.Observer { return m },
				func(m *sinkprom.Metrics, log *slog.Logger) GRPCObservability {
					return GRPCObservability{Options: []grpc.ServerOption{grpc.ChainUnaryInterceptor(sinkgrpc.UnaryInterceptor(m, log))}}
				},
				func(p healthMonitorParams) (*application.HealthMonitor, error) {
					deps := slices.Clone(p.Dependencies)
					slices.SortFunc(deps, func(a, b application.Dependency) int { return cmp.Compare(a.Name, b.Name) })
					return application.NewHealthMonitor(deps, application.HealthConfig{
						Interval: p.Config.Observability.HealthInterval,
						Timeout:  p.Config.Observability.HealthTimeout,
					}, p.Log.With("component", "health"))
				},
				func() *HTTPEndpoint { return &HTTPEndpoint{} },
			),
			HealthCheck("storage", func(s ports.Storage) ports.HealthChecker { return ports.HealthCheckFunc(s.Ping) }),
			fx.Invoke(serveOpsHTTP),
		),
		// Outside the module: root invokes run after every module's, so this
		// hook starts last and stops first.
		fx.Invoke(runReadiness),
	)
}

// serveOpsHTTP opens the HTTP operations endpoint in OnStart and stops it
// in OnStop, after the roles' listeners.
func serveOpsHTTP(p httpParams) {
	if p.Config.HTTPAddress == HTTPDisabled {
		p.Log.Info("the HTTP operations endpoint is disabled (SINK_HTTP_ADDRESS=off): no /livez, /readyz or /metrics")
		return
	}
	srv := &http.Server{
		Handler:           opshttp.NewHandler(p.Monitor, p.Metrics.Handler(), p.Routes...),
		ReadHeaderTimeout: 5 * time.Second,
	}
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			lis, err := net.Listen("tcp", p.Config.HTTPAddress)
			if err != nil {
				return fmt.Errorf("cannot listen on SINK_HTTP_ADDRESS %q: %w", p.Config.HTTPAddress, err)
			}
			p.Endpoint.set(lis.Addr())
			go func() {
				if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
					p.Log.Error("the HTTP operations endpoint stopped", "error", err)
				}
			}()
			p.Log.Info("serving the HTTP operations endpoint", "address", lis.Addr().String(),
				"paths", []string{opshttp.PathLive, opshttp.PathReady, opshttp.PathMetrics})
			return nil
		},
		OnStop: func(ctx context.Context) error {
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
				return fmt.Errorf("cannot stop the HTTP operations endpoint: %w", err)
			}
			return nil
		},
	})
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
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if s.Ready {
				st = healthpb.HealthCheckResponse_SERVING
			}
			p.Health.SetServingStatus("", st)
			p.Health.SetServingStatus(sinkgrpc.ServiceName, st)
		}
	})
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			p.Monitor.Start(ctx)
			return nil
		},
		OnStop: func(context.Context) error {
			p.Monitor.Drain()
			p.Monitor.Stop()
			return nil
		},
	})
}
