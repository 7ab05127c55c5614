package opshttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

type fakeReadiness struct{ down atomic.Bool }

func (f *fakeReadiness) Ready() (bool, string) {
	if f.down.Load() {
		return false, "not ready: storage: connection refused\n"
	}
	return true, "ready\nstorage: ok\n"
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func TestLivenessAndReadinessAreSeparate(t *testing.T) {
	r := &fakeReadiness{}
	h := NewHandler(r, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics") }),
		Route{Pattern: "GET /healthz", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "extra") })})
	if code, body := get(t, h, PathReady); code != http.StatusOK || !strings.Contains(body, "storage: ok") {
		t.Fatalf("ready: %d %q", code, body)
	}
	r.down.Store(true)
	if code, body := get(t, h, PathReady); code != http.StatusServiceUnavailable || !strings.Contains(body, "storage: connection refused") {
		t.Fatalf("not ready: %d %q", code, body)
	}
	if code, body := get(t, h, PathLive); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("liveness must not depend on readiness: %d %q", code, body)
	}
	if code, body := get(t, h, PathMetrics); code != http.StatusOK || body != "metrics" {
		t.Fatalf("metrics: %d %q", code, body)
	}
	if code, body := get(t, h, "/healthz"); code != http.StatusOK || body != "extra" {
		t.Fatalf("extra route: %d %q", code, body)
	}
	if code, _ := get(t, h, "/other"); code != http.StatusNotFound {
		t.Fatalf("unknown path: %d", code)
	}
	if code, _ := get(t, NewHandler(r, nil), PathMetrics); code != http.StatusNotFound {
		t.Fatalf("metrics disabled: %d", code)
	}
}

// The profiling routes serve the index, the named profiles, a CPU profile
// and a trace; without them the paths are unknown, and they never appear
// on http.DefaultServeMux.
func TestProfilingRoutes(t *testing.T) {
	r := &fakeReadiness{}
	if code, _ := get(t, NewHandler(r, nil), PathProfiles); code != http.StatusNotFound {
		t.Fatalf("profiles without ProfilingRoutes: %d", code)
	}
	if code, _ := get(t, http.DefaultServeMux, PathProfiles); code != http.StatusNotFound {
		t.Fatalf("http.DefaultServeMux serves %s: %d", PathProfiles, code)
	}
	h := NewHandler(r, nil, ProfilingRoutes()...)
	if code, body := get(t, h, PathProfiles); code != http.StatusOK || !strings.Contains(body, "heap") || !strings.Contains(body, "goroutine") {
		t.Fatalf("index: %d %.200q", code, body)
	}
	if code, body := get(t, h, PathProfiles+"goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "TestProfilingRoutes") {
		t.Fatalf("goroutine profile: %d %.200q", code, body)
	}
	// Profiles in go tool pprof's format are gzip-compressed protobuf.
	for _, p := range []string{"heap", "allocs", "profile?seconds=1"} {
		if code, body := get(t, h, PathProfiles+p); code != http.StatusOK || !strings.HasPrefix(body, "\x1f\x8b") {
			t.Fatalf("%s: %d %.40q", p, code, body)
		}
	}
	if code, body := get(t, h, PathProfiles+"trace?seconds=1"); code != http.StatusOK || !strings.HasPrefix(body, "go 1.") {
		t.Fatalf("trace: %d %.40q", code, body)
	}
	for _, p := range []string{"nosuchprofile", "profile?seconds=0", "profile?seconds=301", "trace?seconds=x"} {
		if code, _ := get(t, h, PathProfiles+p); code != http.StatusNotFound && code != http.StatusBadRequest {
			t.Fatalf("%s: %d, want 404 or 400", p, code)
		}
	}
}

// One CPU profile runs at a time: a second one is refused with 409 while
// the first runs.
func TestProfilingRoutesRunOneCPUProfileAtATime(t *testing.T) {
	srv := httptest.NewServer(NewHandler(&fakeReadiness{}, nil, ProfilingRoutes()...))
	defer srv.Close()
	first, err := http.Get(srv.URL + PathProfiles + "profile?seconds=3")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	// The headers arrive once the first profile has started; its body
	// comes when it ends.
	second, err := http.Get(srv.URL + PathProfiles + "profile?seconds=1")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Body.Close()
	if second.StatusCode != http.StatusConflict {
		t.Fatalf("a second CPU profile while one runs: %d, want 409", second.StatusCode)
	}
	body, _ := io.ReadAll(first.Body)
	if first.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "\x1f\x8b") {
		t.Fatalf("the first profile: %d %.40q", first.StatusCode, body)
	}
}
