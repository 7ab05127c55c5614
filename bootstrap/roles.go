package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/fx"
)

// Server is the server role: the gRPC API over storage.
func Server() fx.Option {
	return fx.Options(StorageModule(), ProfilesModule(), ApplicationModule(), GRPCModule())
}

// Role returns the modules of the configured mode.
func Role(cfg Config) (fx.Option, error) {
	switch cfg.Mode {
	case ModeServer:
		return Server(), nil
	default:
		return nil, fmt.Errorf("SINK_MODE=%s needs the Kafka mutation queue: set SINK_KAFKA_BROKERS, SINK_KAFKA_TOPIC and SINK_KAFKA_GROUP_ID", cfg.Mode)
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
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	select {
	case s := <-sig:
		log.Info("shutting down", "signal", s.String(), "timeout", cfg.ShutdownTimeout.String())
	case <-app.Done():
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancelStop()
	if err := app.Stop(stopCtx); err != nil {
		return fmt.Errorf("cannot stop Sink cleanly: %w", err)
	}
	log.Info("stopped")
	return nil
}

// Main is the entry point of the sink binary and of custom binaries: it
// runs the subcommand named by args (none: the configured role) and returns
// the process exit code.
func Main(args []string, extra ...fx.Option) int {
	if len(args) > 0 {
		switch args[0] {
		case "-h", "--help", "help":
			fmt.Fprint(os.Stdout, usage)
			return 0
		case "config-table":
			fmt.Fprint(os.Stdout, ConfigTable())
			return 0
		default:
			fmt.Fprintf(os.Stderr, "sink: unknown command %q\n\n%s", args[0], usage)
			return 2
		}
	}
	if err := Run(os.Stderr, extra...); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			fmt.Fprintln(os.Stderr, "sink:", err)
			return 2
		}
		fmt.Fprintln(os.Stderr, "sink:", err)
		return 1
	}
	return 0
}

const usage = `Usage: sink [command]

Without a command, sink runs the role named by SINK_MODE (server, worker or all),
configured from SINK_* environment variables (see the README), until SIGINT or SIGTERM.

Commands:
  config-table   print the configuration reference (Markdown)
  help           show this help
`
