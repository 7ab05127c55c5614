package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"go.uber.org/fx"

	"github.com/sink-io/sink/client/cli"
)

// Server is the server role: the gRPC API over storage.
func Server() fx.Option {
	return fx.Options(StorageModule(), ProfilesModule(), ApplicationModule(), GRPCModule())
}

// Worker is the worker role: applies queued mutations, opens no gRPC
// listener (only the HTTP health endpoint).
func Worker() fx.Option {
	return fx.Options(StorageModule(), ProfilesModule(), ApplicationModule(), KafkaModule(), WorkerModule(), WorkerHealthModule())
}

// All is the server and the worker in one process, sharing one storage
// client and one Kafka client.
func All() fx.Option {
	return fx.Options(StorageModule(), ProfilesModule(), ApplicationModule(), KafkaModule(), GRPCModule(), WorkerModule(), WorkerHealthModule())
}

// Role returns the modules of the configured mode. The server role gets
// the mutation queue (RETURN_AFTER_ACCEPTED) when Kafka is configured.
func Role(cfg Config) (fx.Option, error) {
	switch cfg.Mode {
	case ModeServer:
		if cfg.Kafka.Enabled() {
			return fx.Options(Server(), KafkaModule()), nil
		}
		return Server(), nil
	case ModeWorker, ModeAll:
		if !cfg.Kafka.Enabled() || cfg.Kafka.GroupID == "" {
			return nil, fmt.Errorf("SINK_MODE=%s needs the Kafka mutation queue: set SINK_KAFKA_BROKERS, SINK_KAFKA_TOPIC and SINK_KAFKA_GROUP_ID", cfg.Mode)
		}
		if cfg.Mode == ModeWorker {
			return Worker(), nil
		}
		return All(), nil
	default:
		return nil, fmt.Errorf("unknown SINK_MODE %q", cfg.Mode)
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
		case "dead-letter":
			return DeadLetterMain(args[1:], os.Stdout, os.Stderr)
		case "read", "put", "merge", "delete":
			return cli.Main(args)
		case "health":
			return cli.Health(args[1:], cli.IO{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
		case "hash-token":
			return HashTokenMain(args[1:], os.Stdin, os.Stdout, os.Stderr)
		case "profiles":
			return ProfilesMain(args[1:], os.Stdout, os.Stderr)
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
  dead-letter    list or replay dead-lettered mutations (sink dead-letter help)
  read           read a record from a running Sink (sink read --help)
  put            write a document (sink put --help)
  merge          merge an intent into a record (sink merge --help)
  delete         delete a record (sink delete --help)
  health         exit 0 when a role's /readyz answers 200: a container health check (sink health --help)
  hash-token     hash a bearer token for SINK_AUTH_TOKEN_FILE (sink hash-token --help)
  profiles       check a merge profiles file or try a merge without a server (sink profiles help)
  help           show this help
`
