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

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// defaultHealthURL is what `sink health` checks without --url or --address
// (and without SINK_ADDRESS): the readiness of a role on this host.
const defaultHealthURL = "http://localhost:8081/readyz"

// health runs `sink health`: one check of a running Sink, exit 0 when it is
// ready and ExitUnavailable otherwise. Either a GET of a role's HTTP
// operations endpoint (--url, /readyz by default), which every role has
// (the worker has no gRPC API): the container health check of images that
// have no shell and no HTTP client (deploy/compose.yaml). Or, with
// --address (or SINK_ADDRESS, like every API command), the gRPC health
// service's Check of the Sink API at that address.
func health(args []string, stdio IO) int {
	fs := newFlags("sink health")
	url := fs.String("url", defaultHealthURL, "URL to GET: a Sink role's /readyz, /livez or (workers) /healthz")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the check")
	c := &command{name: "health", io: stdio}
	fs.StringVar(&c.address, "address", "", "check the gRPC health service of the Sink API at this host:port instead of --url (env SINK_ADDRESS)")
	fs.BoolVar(&c.tls, "tls", false, "with --address: connect with TLS (implied by --ca-file)")
	fs.StringVar(&c.caFile, "ca-file", "", "with --address: PEM CA certificates that verify the server")
	fs.StringVar(&c.serverName, "server-name", "", "with --address: name to verify the server certificate against")
	h := help{name: "health", forms: []string{"[--url URL | --address HOST:PORT] [--timeout D]"}, flags: []*flag.FlagSet{fs},
		summary: "Check once that a running Sink is ready and print its answer. By default GET a Sink role's HTTP\n" +
			"operations endpoint (--url; every role has one): the container health check of images that have\n" +
			"no shell and no HTTP client. With --address (or SINK_ADDRESS, as the API commands take it), ask the\n" +
			"gRPC health service of the Sink API at that address instead (the worker serves no gRPC API).",
		examples: "  sink health\n  sink health --url http://worker:8081/healthz --timeout 2s\n  sink health --address localhost:8080\n",
		exits:    fmt.Sprintf("Exit codes: 0 when the URL answers 200 OK or the API is SERVING, 2 usage, %d otherwise.", ExitUnavailable)}
	if code, done := parseFlags(fs, args, h, stdio); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stdio, h.name, "unexpected argument %q", fs.Arg(0))
	}
	if isSet(fs, "url") && isSet(fs, "address") {
		return usageError(stdio, h.name, "give --url (HTTP operations endpoint) or --address (gRPC API), not both")
	}
	if c.address == "" && !isSet(fs, "url") && stdio.Getenv != nil {
		c.address = stdio.Getenv("SINK_ADDRESS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if c.address != "" {
		return c.grpcHealth(ctx)
	}
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

// grpcHealth asks the gRPC health service at c.address about the Sink API.
func (c *command) grpcHealth(ctx context.Context) int {
	conn, err := c.dial()
	if err != nil {
		return usageError(c.io, c.name, "%v", err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "sink.v1.Sink"})
	if err != nil {
		st, _ := status.FromError(err)
		return c.fail(ExitUnavailable, "%s: %s", c.address, errorLine(st.Code(), "", st.Message()))
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return c.fail(ExitUnavailable, "%s: %s", c.address, s)
	}
	fmt.Fprintln(c.io.Stdout, healthpb.HealthCheckResponse_SERVING)
	return ExitOK
}
