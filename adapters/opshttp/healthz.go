package opshttp

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/sink-io/sink/ports"
)

// PathHealthz is the worker's health route.
const PathHealthz = "/healthz"

// Worker is what /healthz reports of a queue worker.
type Worker interface {
	// Running reports whether the worker consumes.
	Running() bool
	// Health returns why the worker is unhealthy (nil when healthy).
	Health() error
	// Counters returns the worker's counters by name.
	Counters() map[string]int64
}

// HealthzTimeout bounds the storage ping of one /healthz request.
const HealthzTimeout = 2 * time.Second

// Healthz returns the worker's GET /healthz route: 200 while the worker
// runs, is healthy and storage answers a ping within HealthzTimeout, 503
// otherwise; the JSON body names the status of each, plus the worker's
// counters.
func Healthz(w Worker, storage ports.HealthChecker) Route {
	return Route{Pattern: "GET " + PathHealthz, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body := map[string]any{"status": "SERVING", "worker": "running", "storage": "ok"}
		code := http.StatusOK
		if !w.Running() {
			body["worker"], body["status"], code = "stopped", "NOT_SERVING", http.StatusServiceUnavailable
		} else if err := w.Health(); err != nil {
			body["worker"], body["status"], code = err.Error(), "NOT_SERVING", http.StatusServiceUnavailable
		}
		ctx, cancel := context.WithTimeout(r.Context(), HealthzTimeout)
		defer cancel()
		if err := storage.Check(ctx); err != nil {
			body["storage"], body["status"], code = err.Error(), "NOT_SERVING", http.StatusServiceUnavailable
		}
		for k, v := range w.Counters() {
			body[k] = v
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(code)
		_ = json.NewEncoder(rw).Encode(body)
	})}
}
