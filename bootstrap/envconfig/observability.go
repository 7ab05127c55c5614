package envconfig

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sink-io/sink/adapters/sinkgrpc"
	"github.com/sink-io/sink/adapters/sinkprom"
	"github.com/sink-io/sink/application"
)

// HTTPDisabled as SINK_HTTP_ADDRESS disables the HTTP operations endpoint
// (an empty value means the default, like for every setting).
const HTTPDisabled = "off"

// ObservabilityConfig configures health checking and metrics. The HTTP
// endpoint's address is Config.HTTPAddress (SINK_HTTP_ADDRESS). The
// defaults are application.DefaultHealthConfig() and
// sinkprom.DefaultOptions().
type ObservabilityConfig struct {
	HealthInterval     time.Duration `env:"SINK_HEALTH_INTERVAL" desc:"How often the dependencies (storage, and Kafka where configured) are checked; readiness (gRPC health, /readyz) follows their answers."`
	HealthTimeout      time.Duration `env:"SINK_HEALTH_TIMEOUT" desc:"How long one dependency check may take before the dependency counts as down."`
	MetricsMaxDatasets int           `env:"SINK_METRICS_MAX_DATASETS" desc:"Distinct store/namespace/dataset label sets kept in metrics; operations on further datasets are counted under \"_other\" (clients choose these names, so this bounds the number of series)."`
	RequestIDHeader    string        `env:"SINK_REQUEST_ID_HEADER" envDefault:"failures" desc:"Which responses of unary RPCs (Read, Write, Delete, Count, the health check) return the request id in the x-request-id response header: failures (an error status, or an operation that failed: the requests the logs name) or always. Streams (Scan, Watch) always return it. Every log line about a request has its id either way; a client that sends its own x-request-id finds its calls in the logs by it."`
	Profiling          bool          `env:"SINK_PROFILING" envDefault:"false" desc:"Serve the Go runtime's profiles under /debug/pprof/ on the HTTP operations endpoint (CPU, heap, allocation and goroutine profiles for go tool pprof; execution traces for go tool trace). Off by default: they show the process's internals to whoever reaches the endpoint, and a CPU profile or trace costs processor time while it runs."`
}

// healthNames and metricsNames map the words of
// application.HealthConfig.Validate and sinkprom.Options.Validate to
// variables.
var (
	healthNames = []rename{
		{"health check interval", "SINK_HEALTH_INTERVAL"},
		{"health check timeout", "SINK_HEALTH_TIMEOUT"},
	}
	metricsNames = []rename{{"MaxDatasets", "SINK_METRICS_MAX_DATASETS"}}
)

// Health returns the health monitor's configuration.
func (c Config) Health() application.HealthConfig {
	return application.HealthConfig{Interval: c.Observability.HealthInterval, Timeout: c.Observability.HealthTimeout}
}

// Metrics returns the metrics' options.
func (c Config) Metrics() sinkprom.Options {
	return sinkprom.Options{Store: c.Store, MaxDatasets: c.Observability.MetricsMaxDatasets}
}

// RequestIDResponse returns which unary responses return the request id
// (SINK_REQUEST_ID_HEADER).
func (c Config) RequestIDResponse() sinkgrpc.RequestIDResponse {
	if c.Observability.RequestIDHeader == "always" {
		return sinkgrpc.RequestIDAlways
	}
	return sinkgrpc.RequestIDOnFailure
}

// validateObservability reports the problems of the observability
// settings that only the environment has (the HTTP address, and profiles
// without an endpoint to serve them); the ranges
// are checked by Health().Validate and Metrics().Validate.
func (c Config) validateObservability() error {
	var errs []error
	if c.HTTPAddress != HTTPDisabled {
		if _, _, err := net.SplitHostPort(c.HTTPAddress); err != nil {
			errs = append(errs, fmt.Errorf("SINK_HTTP_ADDRESS %q is not a host:port address (or %q to disable the endpoint): %v", c.HTTPAddress, HTTPDisabled, err))
		}
	} else if c.Observability.Profiling {
		errs = append(errs, fmt.Errorf("SINK_PROFILING=true needs the HTTP operations endpoint, which SINK_HTTP_ADDRESS=%s disables", HTTPDisabled))
	}
	switch c.Observability.RequestIDHeader {
	case "failures", "always":
	default:
		errs = append(errs, fmt.Errorf("SINK_REQUEST_ID_HEADER must be failures or always, got %q", c.Observability.RequestIDHeader))
	}
	return errors.Join(errs...)
}
