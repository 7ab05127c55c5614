package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Health runs `sink health`: one GET of a Sink role's HTTP operations
// endpoint (/readyz by default), exit 0 when it answers 200 and
// ExitUnavailable otherwise. It is the container health check of images
// that have no shell and no HTTP client (deploy/compose.yaml), for the
// server and the worker alike.
func Health(args []string, stdio IO) int {
	fs := flag.NewFlagSet("sink health", flag.ContinueOnError)
	fs.SetOutput(stdio.Stderr)
	url := fs.String("url", "http://localhost:8081/readyz", "URL to GET: a Sink role's /readyz, /livez or (workers) /healthz")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the request")
	fs.Usage = func() {
		fmt.Fprintf(stdio.Stderr, "Usage: sink health [--url URL] [--timeout D]\n\nExits 0 when the URL answers 200 OK, %d otherwise.\n\n", ExitUnavailable)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stdio.Stderr, "sink health: unexpected argument %q\n", fs.Arg(0))
		return ExitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "sink health: cannot build the request: %v\n", err)
		return ExitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "sink health: %v\n", err)
		return ExitUnavailable
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	line, _, _ := strings.Cut(strings.ToValidUTF8(string(body), string(utf8.RuneError)), "\n")
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stdio.Stderr, "sink health: %s: %s %s\n", *url, resp.Status, line)
		return ExitUnavailable
	}
	fmt.Fprintln(stdio.Stdout, line)
	return ExitOK
}
