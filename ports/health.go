package ports

import "context"

// HealthChecker is a dependency whose answer decides whether the process is
// ready to serve (storage, the mutation queue). The health monitor calls
// Check periodically with a deadline.
type HealthChecker interface {
	// Check returns nil when the dependency answers, otherwise an error
	// saying why not. It must return by ctx's deadline.
	Check(ctx context.Context) error
}

// HealthCheckFunc adapts a function, like Storage.Ping, to HealthChecker.
type HealthCheckFunc func(ctx context.Context) error

// Check implements HealthChecker.
func (f HealthCheckFunc) Check(ctx context.Context) error { return f(ctx) }
