package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// health runs `sink health`: one GET of a Sink role's HTTP operations
// endpoint (/readyz by default), exit 0 when it answers 200 and
// ExitUnavailable otherwise. It is the container health check of images
// that have no shell and no HTTP client (deploy/compose.yaml), for the
// server and the worker alike.
func health(args []string, stdio IO) int {
	fs := newFlags("sink health")
	url := fs.String("url", "http://localhost:8081/readyz", "URL to GET: a Sink role's /readyz, /livez or (workers) /healthz")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the request")
	h := help{name: "health", forms: []string{"[--url URL] [--timeout D]"}, flags: []*flag.FlagSet{fs},
		summary:  "GET a Sink role's HTTP operations endpoint once and print the first line of the answer:\nthe container health check of images that have no shell and no HTTP client.",
		examples: "  sink health\n  sink health --url http://worker:8081/healthz --timeout 2s\n",
		exits:    fmt.Sprintf("Exit codes: 0 when the URL answers 200 OK, 2 usage, %d otherwise.", ExitUnavailable)}
	if code, done := parseFlags(fs, args, h, stdio); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stdio, h.name, "unexpected argument %q", fs.Arg(0))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return usageError(stdio, h.name, "cannot build the request: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fail(stdio, h.name, ExitUnavailable, "%v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	line, _, _ := strings.Cut(strings.ToValidUTF8(string(body), string(utf8.RuneError)), "\n")
	if resp.StatusCode != http.StatusOK {
		return fail(stdio, h.name, ExitUnavailable, "%s: %s %s", *url, resp.Status, line)
	}
	fmt.Fprintln(stdio.Stdout, line)
	return ExitOK
}
