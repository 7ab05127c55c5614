package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/heapfloor"
)

// envSoak is the soak's duration (make soak sets it, and SINK_FAULTS=1).
const envSoak = "SINK_SOAK"

// soakCycle is the order of the soak's faults, repeated until its time is
// up; every other round of the cycle runs under synchronous load.
var soakCycle = []string{"worker-sigkill", "worker-freeze", "broker-restart", "db-pause"}

// memSample is one reading of a process's runtime metrics.
type memSample struct {
	at         time.Duration // since the soak started
	heap       float64       // go_memstats_heap_inuse_bytes
	goroutines float64       // go_goroutines
}

// TestSoak runs the fault cycle (worker kill, worker freeze, broker
// restart, database pause) in a loop for SINK_SOAK, alternating
// asynchronous and synchronous load, on the container cluster of the fault
// suite. Every trial must account for every acknowledged mutation (none
// lost, none twice, none out of order), the workers must write no dead
// letter at all (the load never fails for good), and the server's heap
// and goroutines, sampled after every trial, must show no growth trend
// (the slopes are reported).
func TestSoak(t *testing.T) {
	d, _ := time.ParseDuration(os.Getenv(envSoak))
	if d <= 0 {
		t.Skip("the soak runs with " + envSoak + "=<duration> (make soak)")
	}
	e := suiteEngine(t)
	rng := suiteRand(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now()
	c := warmCluster(t, ctx, e)
	defer c.close()
	byName := map[string]fault{}
	for _, f := range faults() {
		byName[f.name] = f
	}
	start := time.Now()
	server := []memSample{sample(c.server.httpPort, 0)}
	var results []trialResult
	for i := 0; time.Since(start) < d; i++ {
		f := byName[soakCycle[i%len(soakCycle)]]
		f.sync = (i/len(soakCycle))%2 == 1
		f.name = fmt.Sprintf("soak-%d-%s", i, f.name)
		load := "async"
		if f.sync {
			load = "sync"
		}
		t.Run(f.name+"-"+load, func(t *testing.T) {
			r := runTrial(t, ctx, c, f, i+1, rng)
			results = append(results, r)
			if r.counts.Lost > 0 || r.counts.OutOfOrder > 0 || r.counts.Unasked > 0 || r.wrong > 0 || r.counts.Twice > 0 {
				t.Errorf("%d lost, %d twice, %d out of order, %d never sent, %d wrong answers", r.counts.Lost, r.counts.Twice, r.counts.OutOfOrder, r.counts.Unasked, r.wrong)
			}
		})
		if s := sample(c.server.httpPort, time.Since(start)); s.heap > 0 {
			server = append(server, s)
		}
	}
	var total counts
	var recoveries []time.Duration
	for _, r := range results {
		total.Accepted += r.counts.Accepted
		total.Applied += r.counts.Applied
		total.Lost += r.counts.Lost
		total.Twice += r.counts.Twice
		total.OutOfOrder += r.counts.OutOfOrder
		total.DeadApplied += r.counts.DeadApplied
		recoveries = append(recoveries, r.recovery)
	}
	dead := 0
	for _, w := range c.workers {
		dead += len(deadLetterLine.FindAllString(w.logs(1000000), -1))
	}
	if dead > 0 {
		t.Errorf("the workers wrote %d dead letters; the load never fails for good, so there must be none", dead)
	}
	heapSlope, gorSlope := slope(server, func(s memSample) float64 { return s.heap }), slope(server, func(s memSample) float64 { return s.goroutines })
	slices.Sort(recoveries)
	var b strings.Builder
	fmt.Fprintf(&b, "| Soak | Trials | Accepted | Applied | Lost | Applied twice | Out of order | Dead letters | Recovery median / max | Server heap in use first → last (slope) | Server goroutines first → last (slope) |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n")
	first, last := server[0], server[len(server)-1]
	med, mx := time.Duration(0), time.Duration(0)
	if len(recoveries) > 0 {
		med, mx = recoveries[len(recoveries)/2], recoveries[len(recoveries)-1]
	}
	fmt.Fprintf(&b, "| %s, cycle %s, async and sync load alternating | %d | %d | %d | %d | %d | %d | %d | %s / %s | %.1f → %.1f MiB (%+.2f MiB/h) | %.0f → %.0f (%+.1f/h) |\n",
		d, strings.Join(soakCycle, ", "), len(results), total.Accepted, total.Applied, total.Lost, total.Twice, total.OutOfOrder, dead,
		med.Round(100*time.Millisecond), mx.Round(100*time.Millisecond),
		first.heap/(1<<20), last.heap/(1<<20), heapSlope*3600/(1<<20), first.goroutines, last.goroutines, gorSlope*3600)
	fmt.Fprintf(&b, "\nRan on %s, %d cores; database: %s; %d server samples; took %s.\n", cpuModel(), runtime.NumCPU(), c.dbKind, len(server), time.Since(t0).Round(time.Second))
	fmt.Fprintf(&b, "Workers that exited on their own and were started again before the next trial (as restart: unless-stopped does): %d", len(c.exited))
	if len(c.exited) > 0 {
		fmt.Fprintf(&b, ": %s", strings.Join(c.exited, "; "))
	}
	b.WriteString(".\n")
	fmt.Println(b.String())
	if p := os.Getenv(envReport); p != "" {
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Errorf("cannot write %s: %v", p, err)
		}
	}
	// No growth trend: the last quarter of the samples against the first
	// (medians), with room for the collector's cycles: the heap in use
	// swings between the live heap and twice that, or the heap floor
	// (heapfloor.Default) while that is more.
	if len(server) >= 8 {
		q := len(server) / 4
		early, late := median(server[:q], func(s memSample) float64 { return s.heap }), median(server[len(server)-q:], func(s memSample) float64 { return s.heap })
		if late > 2*early+16<<20+heapfloor.Default {
			t.Errorf("the server's heap grew from %.1f MiB to %.1f MiB (medians of the first and last quarter of the samples)", early/(1<<20), late/(1<<20))
		}
		ge, gl := median(server[:q], func(s memSample) float64 { return s.goroutines }), median(server[len(server)-q:], func(s memSample) float64 { return s.goroutines })
		if gl > 2*ge+50 {
			t.Errorf("the server's goroutines grew from %.0f to %.0f", ge, gl)
		}
	}
}

// sample reads the runtime metrics of the process whose HTTP endpoint is
// published at port (zero values when it does not answer).
func sample(port int, at time.Duration) memSample {
	s := memSample{at: at}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "go_memstats_heap_inuse_bytes":
			s.heap = v
		case "go_goroutines":
			s.goroutines = v
		}
	}
	return s
}

// slope is the least-squares slope of v over the samples' times, per
// second.
func slope(samples []memSample, v func(memSample) float64) float64 {
	n := float64(len(samples))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for _, s := range samples {
		x, y := s.at.Seconds(), v(s)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

func median(samples []memSample, v func(memSample) float64) float64 {
	vs := make([]float64, len(samples))
	for i, s := range samples {
		vs[i] = v(s)
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

func TestSlopeAndMedian(t *testing.T) {
	var s []memSample
	for i := range 10 {
		s = append(s, memSample{at: time.Duration(i) * time.Minute, heap: float64(100 + 60*i), goroutines: 7})
	}
	if got := slope(s, func(m memSample) float64 { return m.heap }); got < 0.999 || got > 1.001 {
		t.Fatalf("slope %v per second, want 1 (60 per minute)", got)
	}
	if got := slope(s, func(m memSample) float64 { return m.goroutines }); got != 0 {
		t.Fatalf("slope of a constant %v", got)
	}
	if got := median(s[:3], func(m memSample) float64 { return m.heap }); got != 160 {
		t.Fatalf("median %v, want 160", got)
	}
}
