package bootstrap

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.uber.org/fx"

	"github.com/sink-io/sink/bootstrap/cli"
	"github.com/sink-io/sink/internal/heapfloor"
)

// Server is the server role: the gRPC API over storage.
func Server() fx.Option {
	return fx.Options(StorageModule(), ProfilesModule(), ApplicationModule(), GRPCModule())
}

// Worker is the worker role: applies queued mutations (no gRPC listener).
func Worker() fx.Option {
	return fx.Options(StorageModule(), ProfilesModule(), ApplicationModule(), KafkaModule(), WorkerModule(), WorkerHealthModule())
}

// All is the server and the worker in one process, sharing their clients.
func All() fx.Option {
	return fx.Options(StorageModule(), ProfilesModule(), ApplicationModule(), KafkaModule(), GRPCModule(), WorkerModule(), WorkerHealthModule())
}

// Role returns the modules of the configured mode. The server role gets
// the mutation queue (RETURN_AFTER_ACCEPTED) when Kafka is configured.
func Role(cfg Config) (fx.Option, error) {
	// The same check as LoadConfig's, for configurations built in code.
	if err := cfg.CheckMode(); err != nil {
		return nil, err
	}
	switch cfg.Mode {
	case ModeServer:
		if cfg.Kafka.Enabled() {
			return fx.Options(Server(), KafkaModule()), nil
		}
		return Server(), nil
	case ModeWorker:
		return Worker(), nil
	default: // ModeAll
		return All(), nil
	}
}

// New assembles the fx application for cfg; extra options (for example
// MergeProfile registrations or fx.Populate in tests) are added to it.
func New(cfg Config, log *slog.Logger, extra ...fx.Option) (*fx.App, error) {
	role, err := Role(cfg)
	if err != nil {
		return nil, err
	}
	opts := append([]fx.Option{
		ConfigModule(cfg, log),
		// Before the role: its HTTP endpoint opens first and closes last;
		// readiness is checked after everything started (observability.go).
		ObservabilityModule(),
		TracingModule(), // tracing.go
		role,
		fx.StartTimeout(cfg.ShutdownTimeout),
		fx.StopTimeout(cfg.ShutdownTimeout),
	}, extra...)
	app := fx.New(opts...)
	if err := app.Err(); err != nil {
		return nil, fmt.Errorf("cannot assemble Sink: %w", err)
	}
	return app, nil
}

// Run starts Sink from the environment and blocks until SIGINT or SIGTERM,
// then shuts down gracefully within SINK_SHUTDOWN_TIMEOUT.
func Run(stderr io.Writer, extra ...fx.Option) error {
	cfg, err := LoadConfig(nil)
	if err != nil {
		return err
	}
	defer heapfloor.Start(uint64(cfg.GCHeapFloor))() // process-wide: in Run, not New
	log := NewLogger(cfg, stderr)
	app, err := New(cfg, log, extra...)
	if err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return fmt.Errorf("cannot start Sink: %w", err)
	}
	// Wait returns on SIGINT/SIGTERM, or when a component asks for shutdown
	// (for example a worker whose consume loop died, with exit code 1).
	down := <-app.Wait()
	if down.Signal != nil {
		log.Info("shutting down", "signal", down.Signal.String(), "timeout", cfg.ShutdownTimeout.String())
	} else {
		log.Warn("shutting down at a component's request", "exit_code", down.ExitCode, "timeout", cfg.ShutdownTimeout.String())
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancelStop()
	if err := app.Stop(stopCtx); err != nil {
		return fmt.Errorf("cannot stop Sink cleanly: %w", err)
	}
	log.Info("stopped")
	if down.ExitCode != 0 {
		return fmt.Errorf("stopped because a component failed (exit code %d); see the log above", down.ExitCode)
	}
	return nil
}

// Main is the entry point of the sink binary and of custom binaries: it
// runs the subcommand named by args (bootstrap/cli; none: the configured
// role, with extra added to its fx application) and returns the process
// exit code.
func Main(args []string, extra ...fx.Option) int {
	return cli.Main(args, cli.StdIO(), func(stderr io.Writer) error { return Run(stderr, extra...) })
}
