package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"google.golang.org/grpc/codes"
)

// With SINK_BENCH_PROFILE set to a directory, BenchmarkSingleOpLoadOutOfProcess
// (and BenchmarkOwedWorkOutOfProcess) also profiles each server under each
// case's load, after measuring it (so the profiles do not change the
// figures): CASE-sink.pprof, CASE-null.pprof (and CASE-floor.pprof; for
// go tool pprof), and CASE-classes.txt, where each
// server's processor time per request is split into classes
// (profileClasses), scaled by the time per request the case measured.
// The sink process then runs with SINK_PROFILING=true. Only runs of more
// than one request are profiled (-benchtime Nx runs each case once with
// one request first).

// profileSeconds is how long each server is profiled per case.
const profileSeconds = 5

// profileDir returns SINK_BENCH_PROFILE ("": no profiles).
func profileDir() string { return os.Getenv("SINK_BENCH_PROFILE") }

// profileClass is a class of processor time: a sample belongs to the
// class of the first frame, from the leaf, that one of the classes
// matches (so a frame no class names, such as domain's helpers, counts
// for its caller's class), except that the collector, stack growth and system calls take
// every sample with one of their frames anywhere on its stack (their
// time is theirs whoever called them).
type profileClass struct {
	name string
	// anywhere: the class takes a sample with a matching frame anywhere
	// on its stack.
	anywhere bool
	prefixes []string
}

// profileClasses are the classes of docs/benchmarks.md's tables, in the
// order they are matched (the whole-stack ones first).
var profileClasses = []profileClass{
	{"collector (marking, assists, sweeping)", true, []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.sweepone", "runtime.gcStart", "runtime.gcMarkDone", "runtime.gcMarkTermination", "runtime.markroot", "runtime.gcDrain", "runtime.wbBufFlush", "runtime.bulkBarrierPreWrite"}},
	{"stack growth", true, []string{"runtime.newstack", "runtime.morestack", "runtime.copystack", "runtime.shrinkstack"}},
	{"system calls", true, []string{"internal/runtime/syscall/", "syscall.Syscall", "syscall.RawSyscall", "runtime.futex", "runtime.netpoll", "runtime.usleep"}},
	{"HPACK header coding", false, []string{"golang.org/x/net/http2/hpack."}},
	{"codec (vtprotobuf)", false, []string{"github.com/sink-io/sink/proto/"}},
	{"document check", false, []string{"github.com/sink-io/sink/domain.Check", "github.com/sink-io/sink/domain.scanJSON", "github.com/sink-io/sink/domain.checkBSON"}},
	{"merge patch", false, []string{"github.com/sink-io/sink/adapters/mergepatch."}},
	{"metrics", false, []string{"github.com/sink-io/sink/adapters/sinkprom.", "github.com/prometheus/"}},
	{"memory store", false, []string{"github.com/sink-io/sink/adapters/memory."}},
	{"application", false, []string{"github.com/sink-io/sink/application."}},
	{"Sink's gRPC adapter and interceptor", false, []string{"github.com/sink-io/sink/adapters/sinkgrpc.", "github.com/sink-io/sink/bootstrap."}},
	{"the owed-work floor's handler", false, []string{"github.com/sink-io/sink/internal/testkit/worksink."}},
	{"allocation (outside the collector)", false, []string{"runtime.mallocgc", "runtime.newobject", "runtime.makeslice", "runtime.growslice", "runtime.makemap", "runtime.newarray", "runtime.(*mcache)", "runtime.(*mcentral)", "runtime.(*mheap)", "runtime.memclrNoHeapPointers"}},
	{"scheduler", false, []string{"runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.goready", "runtime.ready", "runtime.mcall", "runtime.gopark", "runtime.goexit", "runtime.Gosched"}},
	{"grpc-go transport", false, []string{"google.golang.org/grpc", "golang.org/x/net/http2"}},
}

// otherClass takes what no class matches.
const otherClass = "other"

// classify splits the processor time of prof into profileClasses, as
// fractions of its total.
func classify(prof *profile.Profile) map[string]float64 {
	cpu := -1
	for i, st := range prof.SampleType {
		if st.Type == "cpu" {
			cpu = i
		}
	}
	out := map[string]float64{}
	var total float64
	for _, s := range prof.Sample {
		if cpu < 0 {
			break
		}
		v := float64(s.Value[cpu])
		total += v
		out[sampleClass(s)] += v
	}
	for k := range out {
		out[k] /= total
	}
	return out
}

// sampleClass returns the class of a sample (see profileClass).
func sampleClass(s *profile.Sample) string {
	var frames []string // leaf first
	for _, loc := range s.Location {
		for _, l := range loc.Line { // (inlined frames first, as the leaf's callees)
			if l.Function != nil {
				frames = append(frames, l.Function.Name)
			}
		}
	}
	for _, c := range profileClasses {
		if !c.anywhere {
			break
		}
		for _, f := range frames {
			if c.matches(f) {
				return c.name
			}
		}
	}
	for _, f := range frames {
		for _, c := range profileClasses {
			if !c.anywhere && c.matches(f) {
				return c.name
			}
		}
	}
	return otherClass
}

func (c profileClass) matches(fn string) bool {
	for _, p := range c.prefixes {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// profileUnderLoad takes a CPU profile of srv while clients goroutines
// send it requests of c, until the profile is done, and writes it to
// path.
func profileUnderLoad(b *testing.B, srv pinnedServer, c singleOpCase, clients int, path string) *profile.Profile {
	b.Helper()
	type result struct {
		raw []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), (profileSeconds+30)*time.Second)
		defer cancel()
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", srv.httpAddr, profileSeconds)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			done <- result{err: err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s: %.200s", url, resp.Status, raw)
		}
		done <- result{raw, err}
	}()
	for i := 0; ; i++ {
		select {
		case r := <-done:
			if r.err != nil {
				b.Fatal(r.err)
			}
			if err := os.WriteFile(path, r.raw, 0o644); err != nil {
				b.Fatal(err)
			}
			prof, err := profile.Parse(bytes.NewReader(r.raw))
			if err != nil {
				b.Fatalf("%s: %v", path, err)
			}
			return prof
		default:
			runLoad(b, clients, 50*clients, func(i int) (codes.Code, error) { return codes.OK, c.call(srv.client, i) })
		}
	}
}

// profiled is a server profileCase profiles: its name in the file names
// and the table (sink, floor, null) and its processor time per request.
type profiled struct {
	name   string
	srv    pinnedServer
	micros float64
}

// profileCase profiles each of servers under c's load (see profileDir)
// and writes their profiles (DIR/CASE-NAME.pprof) and the classes of
// their time per request, scaled by the processor time per request
// measured of each (DIR/CASE-classes.txt, one column per server).
func profileCase(b *testing.B, dir string, c singleOpCase, clients int, servers ...profiled) {
	b.Helper()
	base := filepath.Join(dir, c.name)
	classes := make([]map[string]float64, len(servers))
	names := make([]string, len(servers))
	for i, p := range servers {
		classes[i] = classify(profileUnderLoad(b, p.srv, c, clients, base+"-"+p.name+".pprof"))
		names[i] = p.name
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%s: processor time per request by class, µs (%s)\n", c.name, strings.Join(names, " / "))
	row := func(name string, v func(i int) float64) {
		fmt.Fprintf(&out, "%-40s", name)
		for i := range servers {
			if i > 0 {
				out.WriteString(" /")
			}
			fmt.Fprintf(&out, " %7.2f", v(i))
		}
		out.WriteString("\n")
	}
	for _, name := range append(classNames(), otherClass) {
		row(name, func(i int) float64 { return classes[i][name] * servers[i].micros })
	}
	row("total (measured)", func(i int) float64 { return servers[i].micros })
	if err := os.WriteFile(base+"-classes.txt", []byte(out.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Log("\n" + out.String())
}

func classNames() []string {
	names := make([]string, len(profileClasses))
	for i, c := range profileClasses {
		names[i] = c.name
	}
	return names
}

// TestProfileClasses checks the classification on hand-made stacks.
func TestProfileClasses(t *testing.T) {
	fn := func(names ...string) []*profile.Location { // leaf first
		locs := make([]*profile.Location, len(names))
		for i, n := range names {
			locs[i] = &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: n}}}}
		}
		return locs
	}
	for _, c := range []struct {
		stack []string
		want  string
	}{
		{[]string{"runtime.memmove", "runtime.copystack", "runtime.newstack", "github.com/sink-io/sink/application.(*Service).waveWrites"}, "stack growth"},
		{[]string{"runtime.scanobject", "runtime.gcDrainN", "runtime.gcAssistAlloc", "runtime.mallocgc", "github.com/sink-io/sink/application.mutateSlices"}, "collector (marking, assists, sweeping)"},
		{[]string{"runtime.memclrNoHeapPointers", "runtime.mallocgc", "github.com/sink-io/sink/application.mutateSlices"}, "allocation (outside the collector)"},
		{[]string{"aeshashbody", "runtime.mapaccess1_faststr", "github.com/sink-io/sink/adapters/memory.(*Store).apply", "github.com/sink-io/sink/application.(*Service).applyWave"}, "memory store"},
		{[]string{"github.com/sink-io/sink/domain.specialJSONStringBits", "github.com/sink-io/sink/domain.scanJSON", "github.com/sink-io/sink/domain.CheckDocument", "github.com/sink-io/sink/application.(*Service).checkDocument"}, "document check"},
		{[]string{"internal/runtime/syscall/linux.Syscall6", "syscall.write", "google.golang.org/grpc/internal/transport.(*bufWriter).Flush"}, "system calls"},
		{[]string{"runtime.mapaccess1", "golang.org/x/net/http2/hpack.(*headerFieldTable).search", "google.golang.org/grpc/internal/transport.(*loopyWriter).writeHeader"}, "HPACK header coding"},
		{[]string{"unknown.leaf"}, otherClass},
	} {
		if got := sampleClass(&profile.Sample{Location: fn(c.stack...)}); got != c.want {
			t.Errorf("%v: class %q, want %q", c.stack, got, c.want)
		}
	}
}
