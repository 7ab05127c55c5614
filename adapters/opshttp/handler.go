// Package opshttp is the HTTP operations endpoint of every Sink process:
// liveness (/livez), readiness (/readyz), metrics (/metrics) and, when
// enabled, the Go runtime's profiles (/debug/pprof/). It is the health
// endpoint of the worker, which has no gRPC listener.
package opshttp

import (
	"net/http"
)

// Readiness reports whether the process is ready to serve, with a
// human-readable report (the application's health monitor implements it).
type Readiness interface {
	Ready() (ready bool, report string)
}

// Paths served by the handler.
const (
	PathLive    = "/livez"
	PathReady   = "/readyz"
	PathMetrics = "/metrics"
)

// Route is an extra route of the endpoint, e.g. {"GET /healthz", h}.
type Route struct {
	// Pattern is an http.ServeMux pattern.
	Pattern string
	Handler http.Handler
}

// NewHandler returns the handler of the operations endpoint:
//   - GET /livez: 200 "ok" while the process runs (it never checks
//     dependencies: restarting the process cannot fix them);
//   - GET /readyz: 200 with the report when ready, 503 with the reason
//     otherwise (a dependency does not answer, starting, shutting down);
//   - GET /metrics: metrics (404 when metrics is nil);
//   - the extra routes (ProfilingRoutes among them when profiles are on).
func NewHandler(ready Readiness, metrics http.Handler, routes ...Route) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathLive, func(w http.ResponseWriter, _ *http.Request) {
		text(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET "+PathReady, func(w http.ResponseWriter, _ *http.Request) {
		ok, report := ready.Ready()
		if !ok {
			text(w, http.StatusServiceUnavailable, report)
			return
		}
		text(w, http.StatusOK, report)
	})
	if metrics != nil {
		mux.Handle("GET "+PathMetrics, metrics)
	}
	for _, r := range routes {
		mux.Handle(r.Pattern, r.Handler)
	}
	return mux
}

func text(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
