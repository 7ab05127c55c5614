package opshttp

import (
	"fmt"
	"io"
	"net/http"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strconv"
	"strings"
	"time"
)

// PathProfiles is where ProfilingRoutes serve the Go runtime's profiles.
const PathProfiles = "/debug/pprof/"

// Bounds of a CPU profile's or trace's duration (the seconds parameter).
const (
	defaultProfileSeconds = 30
	maxProfileSeconds     = 300
)

// ProfilingRoutes returns the routes that serve the Go runtime's profiles
// under PathProfiles, in the formats go tool pprof and go tool trace read:
//   - GET /debug/pprof/: the index, which names every profile;
//   - GET /debug/pprof/profile?seconds=N: a CPU profile of N seconds
//     (default 30, at most 300);
//   - GET /debug/pprof/trace?seconds=N: an execution trace of N seconds;
//   - GET /debug/pprof/NAME: the named profile (heap, allocs, goroutine,
//     threadcreate; mutex and block stay empty, as Sink does not turn
//     their sampling on); debug=1 or 2 for text.
//
// They are written here on runtime/pprof rather than taken from
// net/http/pprof, whose import also serves them on http.DefaultServeMux:
// a binary built from Sink's modules that serves DefaultServeMux would
// publish them without asking.
func ProfilingRoutes() []Route {
	return []Route{
		{Pattern: "GET " + PathProfiles + "{$}", Handler: http.HandlerFunc(profileIndex)},
		{Pattern: "GET " + PathProfiles + "profile", Handler: http.HandlerFunc(cpuProfile)},
		{Pattern: "GET " + PathProfiles + "trace", Handler: http.HandlerFunc(executionTrace)},
		{Pattern: "GET " + PathProfiles + "{name}", Handler: http.HandlerFunc(namedProfile)},
	}
}

func profileIndex(w http.ResponseWriter, _ *http.Request) {
	ps := pprof.Profiles()
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name() < ps[j].Name() })
	var b strings.Builder
	b.WriteString("Go runtime profiles (go tool pprof http://HOST" + PathProfiles + "NAME):\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "%s\t%d\n", p.Name(), p.Count())
	}
	b.WriteString("profile\tCPU profile, ?seconds=N (default 30)\ntrace\texecution trace (go tool trace), ?seconds=N (default 30)\n")
	text(w, http.StatusOK, b.String())
}

func namedProfile(w http.ResponseWriter, r *http.Request) {
	p := pprof.Lookup(r.PathValue("name"))
	if p == nil {
		text(w, http.StatusNotFound, "unknown profile; the index lists them\n")
		return
	}
	debug, _ := strconv.Atoi(r.FormValue("debug"))
	if debug > 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="`+p.Name()+`"`)
	}
	_ = p.WriteTo(w, debug)
}

func cpuProfile(w http.ResponseWriter, r *http.Request) {
	record(w, r, "profile", pprof.StartCPUProfile, pprof.StopCPUProfile)
}

func executionTrace(w http.ResponseWriter, r *http.Request) {
	record(w, r, "trace", trace.Start, trace.Stop)
}

// record serves what start writes to the response until the duration the
// request asks for has passed (or the client went away) and stop is
// called: a CPU profile or an execution trace, of which one runs at a
// time (409 when another is running). The response's headers go out as
// soon as recording started.
func record(w http.ResponseWriter, r *http.Request, name string, start func(io.Writer) error, stop func()) {
	d, ok := profileDuration(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	if err := start(w); err != nil { // (nothing written yet)
		w.Header().Del("Content-Disposition")
		text(w, http.StatusConflict, "cannot start the "+name+": "+err.Error()+"\n")
		return
	}
	// Send the headers now: the client learns that recording started.
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	waitFor(r, d)
	stop()
}

// profileDuration returns the seconds parameter as a duration, or answers
// 400 for a bad one.
func profileDuration(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	s := defaultProfileSeconds
	if v := r.FormValue("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxProfileSeconds {
			text(w, http.StatusBadRequest, fmt.Sprintf("seconds must be a whole number from 1 to %d\n", maxProfileSeconds))
			return 0, false
		}
		s = n
	}
	return time.Duration(s) * time.Second, true
}

// waitFor waits d, or until the client goes away.
func waitFor(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}
