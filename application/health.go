package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sink-io/sink/ports"
)

// Dependency is something the process needs to serve, checked by the
// health monitor.
type Dependency struct {
	// Name names the dependency in readiness reports and logs ("storage", "kafka").
	Name    string
	Checker ports.HealthChecker
}

// HealthConfig configures the health monitor (DefaultHealthConfig has the
// defaults; NewHealthMonitor rejects zero values).
type HealthConfig struct {
	// Interval between two rounds of checks.
	Interval time.Duration
	// Timeout of one check; a dependency that has not answered by then is
	// down.
	Timeout time.Duration
}

// Validate reports every problem at once.
func (c HealthConfig) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("health check interval must be positive, got %s", c.Interval))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("health check timeout must be positive, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

// DependencyStatus is the last answer of one dependency.
type DependencyStatus struct {
	Name string
	// Err is nil when the dependency answered.
	Err error
}

// HealthStatus is the readiness of the process.
type HealthStatus struct {
	// Ready is true when every dependency answered the last check and the
	// process is not shutting down.
	Ready bool
	// Reason says why the process is not ready ("" when it is).
	Reason       string
	Dependencies []DependencyStatus
}

// Report renders the status for humans, one line per dependency.
func (s HealthStatus) Report() string {
	var b strings.Builder
	if s.Ready {
		b.WriteString("ready\n")
	} else {
		b.WriteString("not ready: " + s.Reason + "\n")
	}
	for _, d := range s.Dependencies {
		if d.Err == nil {
			fmt.Fprintf(&b, "%s: ok\n", d.Name)
		} else {
			fmt.Fprintf(&b, "%s: %v\n", d.Name, d.Err)
		}
	}
	return b.String()
}

// Reasons of a not-ready status that no dependency caused.
const (
	ReasonStarting     = "starting: dependencies not checked yet"
	ReasonShuttingDown = "shutting down"
)

// HealthMonitor checks the dependencies periodically and keeps the
// process's readiness, which the driving adapters publish (gRPC health
// service, HTTP /readyz). It is safe for concurrent use.
type HealthMonitor struct {
	deps []Dependency
	cfg  HealthConfig
	log  *slog.Logger

	mu          sync.Mutex
	status      HealthStatus
	draining    bool
	subscribers []func(HealthStatus)
	stop        context.CancelFunc
	done        chan struct{}

	probeMu sync.Mutex // one round of checks at a time
}

// NewHealthMonitor returns a monitor of deps. Until the first check it
// reports not ready (ReasonStarting).
func NewHealthMonitor(deps []Dependency, cfg HealthConfig, log *slog.Logger) (*HealthMonitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cannot create the health monitor: %w", err)
	}
	seen := map[string]bool{}
	for _, d := range deps {
		if d.Name == "" || d.Checker == nil {
			return nil, fmt.Errorf("cannot create the health monitor: dependency %q has no name or no checker", d.Name)
		}
		if seen[d.Name] {
			return nil, fmt.Errorf("cannot create the health monitor: dependency %q is registered twice", d.Name)
		}
		seen[d.Name] = true
	}
	if log == nil {
		log = slog.Default()
	}
	return &HealthMonitor{
		deps:   append([]Dependency(nil), deps...),
		cfg:    cfg,
		log:    log,
		status: HealthStatus{Reason: ReasonStarting},
	}, nil
}

// Status returns the current readiness.
func (m *HealthMonitor) Status() HealthStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// Ready reports the readiness and a human-readable report (for HTTP).
func (m *HealthMonitor) Ready() (bool, string) {
	s := m.Status()
	return s.Ready, s.Report()
}

// Subscribe calls fn with the current status now and again whenever the
// readiness or its reason changes. fn must not block.
func (m *HealthMonitor) Subscribe(fn func(HealthStatus)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subscribers = append(m.subscribers, fn)
	fn(m.status)
}

// Start checks every dependency once (so that the readiness is known when
// Start returns) and then keeps checking every Interval until Stop.
func (m *HealthMonitor) Start(ctx context.Context) {
	m.Check(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil {
		return
	}
	loopCtx, stop := context.WithCancel(context.Background())
	m.stop, m.done = stop, make(chan struct{})
	go m.loop(loopCtx, m.done)
}

func (m *HealthMonitor) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Check(ctx)
		}
	}
}

// Stop ends the periodic checks and waits for a running check to end.
func (m *HealthMonitor) Stop() {
	m.mu.Lock()
	stop, done := m.stop, m.done
	m.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
}

// Drain marks the process as shutting down: from now on it is not ready,
// whatever the dependencies answer, so that clients and load balancers
// stop sending work while in-flight work drains.
func (m *HealthMonitor) Drain() {
	m.mu.Lock()
	m.draining = true
	m.mu.Unlock()
	m.publish(m.Status().Dependencies)
}

// Shutdown drains (see Drain) and then stops the periodic checks: the
// process turns not ready first thing on shutdown.
func (m *HealthMonitor) Shutdown() {
	m.Drain()
	m.Stop()
}

// Check runs one round of checks now, concurrently, each bounded by the
// timeout, and returns the resulting status.
func (m *HealthMonitor) Check(ctx context.Context) HealthStatus {
	m.probeMu.Lock()
	defer m.probeMu.Unlock()
	results := make([]DependencyStatus, len(m.deps))
	var wg sync.WaitGroup
	for i, d := range m.deps {
		results[i].Name = d.Name
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].Err = m.checkOne(ctx, d)
		}()
	}
	wg.Wait()
	return m.publish(results)
}

func (m *HealthMonitor) checkOne(ctx context.Context, d Dependency) (err error) {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("health check panicked: %v", r)
			}
		}()
		done <- d.Checker.Check(cctx)
	}()
	// A checker that ignores its deadline must not stall the monitor.
	select {
	case err = <-done:
	case <-cctx.Done():
		err = cctx.Err()
	}
	if err != nil && cctx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("did not answer within %s: %w", m.cfg.Timeout, err)
	}
	return err
}

// publish computes the status from the dependency results, stores it and
// notifies subscribers and the log when it changed.
func (m *HealthMonitor) publish(results []DependencyStatus) HealthStatus {
	next := HealthStatus{Ready: true, Dependencies: results}
	var down []string
	for _, r := range results {
		if r.Err != nil {
			down = append(down, r.Name+": "+r.Err.Error())
		}
	}
	m.mu.Lock()
	switch {
	case m.draining:
		next.Ready, next.Reason = false, ReasonShuttingDown
	case len(down) > 0:
		next.Ready, next.Reason = false, strings.Join(down, "; ")
	}
	prev := m.status
	m.status = next
	changed := prev.Ready != next.Ready || prev.Reason != next.Reason
	var subs []func(HealthStatus)
	if changed {
		subs = append(subs, m.subscribers...)
	}
	// Notify under the lock so that subscribers see changes in order.
	for _, fn := range subs {
		fn(next)
	}
	m.mu.Unlock()
	if changed {
		switch {
		case next.Ready:
			m.log.Info("ready: every dependency answers", "dependencies", len(results))
		case next.Reason == ReasonShuttingDown:
			m.log.Info("not ready: shutting down")
		case prev.Ready || prev.Reason == ReasonStarting || prev.Reason == ReasonShuttingDown:
			m.log.Warn("not ready: a dependency does not answer", "reason", next.Reason)
		default:
			m.log.Debug("still not ready", "reason", next.Reason)
		}
	}
	return next
}
