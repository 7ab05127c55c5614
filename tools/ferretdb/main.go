// Command ferretdb runs an embedded FerretDB (v1, SQLite backend) for tests.
//
// It exists because `go install github.com/FerretDB/FerretDB/cmd/ferretdb@v1.24.2`
// builds a binary that panics at start ("Invalid build/version/version.txt"),
// while the embeddable `ferretdb` package works. It lives in its own module so
// that FerretDB and its dependencies stay out of the main go.mod.
//
// Usage:
//
//	ferretdb -listen 127.0.0.1:0 -data /tmp/dir
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
	data := flag.String("data", "", "directory for SQLite data files (required)")
	logLevel := flag.String("log-level", "warn", "log level: debug, info, warn, error")
	gated := flag.Bool("write-gate", true, "pass write commands through one at a time, so that a conditional write is atomic as on MongoDB (see gate.go)")
	flag.Parse()

	if *data == "" {
		return errors.New("-data is required")
	}
	dir, err := filepath.Abs(*data)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("bad -log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ferretListen := *listen
	var front net.Listener
	if *gated {
		if front, err = net.Listen("tcp", *listen); err != nil {
			return err
		}
		defer front.Close()
		ferretListen = "127.0.0.1:0"
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: ferretListen},
		Logger:   logger,
		Handler:  "sqlite",
		// SQLite URL must be a directory URI ending with a slash.
		SQLiteURL: "file:" + dir + "/",
	})
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
