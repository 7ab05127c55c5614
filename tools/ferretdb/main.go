// Command ferretdb runs an embedded FerretDB (v1, SQLite or PostgreSQL
// backend) for tests.
//
// It exists because `go install github.com/FerretDB/FerretDB/cmd/ferretdb@v1.24.2`
// builds a binary that panics at start ("Invalid build/version/version.txt"),
// while the embeddable `ferretdb` package works. It lives in its own module so
// that FerretDB and its dependencies stay out of the main go.mod.
//
// Usage:
//
//	ferretdb -listen 127.0.0.1:0 -data /tmp/dir
//	SINK_FERRETDB_POSTGRESQL_URL=postgres://user:pw@127.0.0.1:5432/db ferretdb -listen 127.0.0.1:0 -backend postgresql
//
// The SQLite backend (the default) keeps its files in -data. The PostgreSQL
// backend stores into the database that -postgresql-url, or the environment
// variable SINK_FERRETDB_POSTGRESQL_URL when the flag is empty, names (the
// variable keeps the password out of the process list); -data is then not
// needed. FerretDB's PostgreSQL backend pushes every supported top-level
// equality of a filter down to SQL (so a filter {_id: X, f: {$exists:
// false}} runs the same SQL as {_id: X} and hands FerretDB's Go filter one
// candidate row rather than the whole collection), its SQLite backend only
// a filter of exactly {_id: X}.
//
// Once the server accepts connections it prints exactly one line to stdout:
//
//	READY mongodb://127.0.0.1:PORT/
//
// (with the actual port when -listen uses port 0). Logs go to stderr. It exits
// cleanly on SIGTERM or SIGINT.
//
// FerretDB itself listens on a loopback port of its own; the -listen address
// is a front that passes write commands through one at a time (see
// gate.go: FerretDB v1's conditional writes are not atomic, MongoDB's are).
// -write-gate=false exposes FerretDB as it is. Telemetry is disabled by the embedded package and
// nothing here reaches the network besides the listener.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ferretdb:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:27017", "TCP address to listen on (port 0 picks a free port)")
	backend := flag.String("backend", "sqlite", "FerretDB backend: sqlite or postgresql")
	data := flag.String("data", "", "directory for SQLite data files (required with -backend sqlite)")
	pgURL := flag.String("postgresql-url", "", "PostgreSQL URL for -backend postgresql (default: $"+envPostgreSQLURL+")")
	logLevel := flag.String("log-level", "warn", "log level: debug, info, warn, error")
	gated := flag.Bool("write-gate", true, "pass write commands through one at a time, so that a conditional write is atomic as on MongoDB (see gate.go)")
	flag.Parse()

	cfg := ferretdb.Config{Handler: *backend}
	switch *backend {
	case "sqlite":
		if *data == "" {
			return errors.New("-data is required with -backend sqlite")
		}
		dir, err := filepath.Abs(*data)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// SQLite URL must be a directory URI ending with a slash.
		cfg.SQLiteURL = "file:" + dir + "/"
	case "postgresql":
		u := *pgURL
		if u == "" {
			u = os.Getenv(envPostgreSQLURL)
		}
		if err := checkPostgreSQLURL(u); err != nil {
			return err
		}
		cfg.PostgreSQLURL = u
	default:
		return fmt.Errorf("bad -backend %q: sqlite or postgresql", *backend)
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("bad -log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ferretListen := *listen
	var front net.Listener
	var err error
	if *gated {
		if front, err = net.Listen("tcp", *listen); err != nil {
			return err
		}
		defer front.Close()
		ferretListen = "127.0.0.1:0"
	}
	cfg.Listener = ferretdb.ListenerConfig{TCP: ferretListen}
	cfg.Logger = logger
	f, err := ferretdb.New(&cfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	// The listener is bound inside ferretdb.New; MongoDBURI reports the real port.
	uri := f.MongoDBURI()
	addr := *listen
	if host, err := hostOf(uri); err == nil {
		addr = host
	}

	// Wait until a TCP connection is accepted before announcing readiness.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			<-done
			return fmt.Errorf("server did not accept connections on %s: %w", addr, err)
		}
		select {
		case err := <-done:
			return fmt.Errorf("server stopped before it was ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	if front != nil {
		go func() {
			if err := serveGated(front, addr, new(sync.Mutex)); err != nil {
				fmt.Fprintln(os.Stderr, "ferretdb: write gate:", err)
				stop()
			}
		}()
		uri = "mongodb://" + front.Addr().String() + "/"
	}

	fmt.Printf("READY %s\n", uri)

	return <-done
}

// envPostgreSQLURL names the PostgreSQL URL when -postgresql-url is empty.
const envPostgreSQLURL = "SINK_FERRETDB_POSTGRESQL_URL"

// checkPostgreSQLURL checks that u is a postgres:// or postgresql:// URL
// with a host. Its errors never hold u, which may carry a password.
func checkPostgreSQLURL(u string) error {
	if u == "" {
		return errors.New("-backend postgresql needs -postgresql-url or $" + envPostgreSQLURL)
	}
	p, err := url.Parse(u)
	if err != nil {
		return errors.New("the PostgreSQL URL does not parse as a URL (are special characters of the password percent-encoded?)")
	}
	if p.Scheme != "postgres" && p.Scheme != "postgresql" || p.Host == "" {
		return errors.New("the PostgreSQL URL must be postgres://[user[:password]@]host[:port]/database")
	}
	return nil
}

func hostOf(uri string) (string, error) {
	const prefix = "mongodb://"
	if len(uri) <= len(prefix) || uri[:len(prefix)] != prefix {
		return "", errors.New("unexpected URI")
	}
	rest := uri[len(prefix):]
	for i, c := range rest {
		if c == '/' || c == '?' {
			return rest[:i], nil
		}
	}
	return rest, nil
}
