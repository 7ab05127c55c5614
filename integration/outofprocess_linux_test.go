package integration_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// BenchmarkSingleOpOutOfProcess: the single-operation cases of
// BenchmarkSingleOp measured from outside, as a load generator on another
// machine would measure them: Sink (the sink binary, memory storage) and
// the null server (integration/cmd/nullsink) run as processes of their
// own, both on the last processor, and this process, the client, runs on
// the first. So the client's work, the same for both servers, does not
// take processor time from the server under test, and each server has a
// processor to itself, as in the measurement the contention issue started
// from. It needs Linux, taskset and two processors. SINK_BENCH_ENV
// (NAME=value entries) configures the sink process, as in the other
// benchmarks.
func BenchmarkSingleOpOutOfProcess(b *testing.B) {
	sink, null := startPinnedServers(b)
	singleOps(b, sink.client, null.client)
}

// pinnedServer is a server process started by startPinnedServers.
type pinnedServer struct {
	client opClient
	pid    int
	// httpAddr serves the process's metrics (the sink process's
	// operations endpoint, the null server's metrics port).
	httpAddr string
}

// startPinnedServers starts the sink binary (configured by SINK_BENCH_ENV;
// SINK_BENCH_BINARY names a build to use instead of building ./cmd/sink,
// e.g. of an earlier commit, for before/after comparisons) and the null
// server as processes on the last processor, pins this
// process to the first (see pinSelf) and returns a client of each. It
// skips the benchmark without taskset or a second processor.
func startPinnedServers(b *testing.B, buildFlags ...string) (sink, null pinnedServer) {
	b.Helper()
	server := pinnedPrefix(b)
	env := strings.Fields(os.Getenv("SINK_BENCH_ENV"))
	if profileDir() != "" {
		env = append(env, "SINK_PROFILING=true")
	}
	bin := os.Getenv("SINK_BENCH_BINARY")
	if bin == "" || len(buildFlags) > 0 {
		bin = buildBinaryWith(b, "./cmd/sink", "sink", buildFlags...)
	}
	p := startProcessOf(b, append(server, bin), env...)
	sink = pinnedServer{client: dialOpClient(b, p.grpcAddr), pid: p.cmd.Process.Pid, httpAddr: p.httpAddr}
	null = startPinnedRef(b, server, "nullsink", buildFlags...)
	pinSelf(b, 0)
	return sink, null
}

// pinnedPrefix is the command prefix that runs a server on the last
// processor. It skips the benchmark without taskset or a second
// processor.
func pinnedPrefix(b *testing.B) []string {
	b.Helper()
	if _, err := exec.LookPath("taskset"); err != nil || runtime.NumCPU() < 2 {
		b.Skip("needs taskset and two processors")
	}
	return []string{"taskset", "-c", strconv.Itoa(runtime.NumCPU() - 1)}
}

// loadMeasure is what measureLoad measured of one server: its rate, and
// per request its processor time, its allocations and its write system
// calls (how often its connections' output was flushed).
type loadMeasure struct {
	rate, cpuMicros, allocs, bytes, writes float64
}

// loadTotals are the totals of one or more measureLoad rounds of one
// server: n requests of ops operations each.
type loadTotals struct {
	n, ops        int
	elapsed, cpu  time.Duration
	writes        int64
	allocs, bytes float64
}

// measure returns the measure of the totals.
func (t loadTotals) measure() loadMeasure {
	n := float64(t.n)
	return loadMeasure{
		rate:      n * float64(t.ops) / t.elapsed.Seconds(), // operations
		cpuMicros: float64(t.cpu.Microseconds()) / n,
		writes:    float64(t.writes) / n,
		allocs:    t.allocs / n,
		bytes:     t.bytes / n,
	}
}

// measureLoad sends n requests of c to srv from clients goroutines and
// adds what it measured to t.
func measureLoad(b *testing.B, t *loadTotals, srv pinnedServer, c singleOpCase, clients, n int) {
	b.Helper()
	cpu, writes := processCPU(b, srv.pid), processWrites(b, srv.pid)
	allocs, bytes := heapAllocations(b, srv.httpAddr)
	r := runLoad(b, clients, n, func(i int) (codes.Code, error) { return codes.OK, c.call(srv.client, i) })
	allocsAfter, bytesAfter := heapAllocations(b, srv.httpAddr)
	t.n, t.ops = t.n+n, c.ops
	t.elapsed += r.elapsed
	t.cpu += processCPU(b, srv.pid) - cpu
	t.writes += processWrites(b, srv.pid) - writes
	t.allocs += allocsAfter - allocs
	t.bytes += bytesAfter - bytes
}

// measureRounds is how many rounds measureAlternating splits each
// server's requests into.
const measureRounds = 8

// measureAlternating sends n requests of c to each of servers, in
// measureRounds rounds that take the servers in turn (the first server
// first in each round), and returns what it measured of each. Alternating
// within one run keeps the ratios of the servers' figures steady on a
// machine whose speed drifts (a virtual machine's neighbours): measured
// one after the other, a server's processor time per request moved by up
// to a fifth between runs of the same build, and its ratio to the other's
// with it.
func measureAlternating(b *testing.B, c singleOpCase, clients, n int, servers ...pinnedServer) []loadMeasure {
	b.Helper()
	totals := make([]loadTotals, len(servers))
	for r := range measureRounds {
		// The rounds' sizes add up to n; each has room for every client.
		m := max(n*(r+1)/measureRounds-n*r/measureRounds, clients)
		for i, srv := range servers {
			measureLoad(b, &totals[i], srv, c, clients, m)
		}
	}
	out := make([]loadMeasure, len(servers))
	for i, t := range totals {
		out[i] = t.measure()
	}
	return out
}

// loadClients is how many clients send a case's requests at once: 16,
// and 4 for batches (16 batches of 500 would exceed Sink's default bound
// of operations in flight, SINK_MAX_INFLIGHT_OPERATIONS = 4096, which
// refuses the excess).
func loadClients(c singleOpCase) int {
	if c.ops > 1 {
		return 4
	}
	return 16
}

// BenchmarkSingleOpLoadOutOfProcess: the single-operation cases, a single
// delete, the health check and 500-operation batch puts and reads under
// load, 16 clients at a time (4 for the batches), laid out as BenchmarkSingleOpOutOfProcess
// (each server on the last processor, the clients on the first). The
// client may be what limits the rate here, so besides the rates it reports
// each server process's processor time per request (from /proc): the rate
// a saturated server would reach is inversely proportional to it, so
// "cpu-vs-null" (the null server's time per request over Sink's) is
// Sink's throughput ratio to the gRPC floor, as a load generator on
// another machine would measure it. Each server's allocations per request
// come from its Go runtime metrics (srv-allocs/op and srv-B/op for Sink,
// null-allocs/op and null-B/op for the null server; "op" is a request,
// of 500 operations in the batch cases), and its write system calls per
// request from /proc (srv-writes/op, null-writes/op: how often it flushed
// its connections, which grow when a response's frames go out in more
// than one write). The two servers take turns in rounds within each run
// (measureAlternating), Sink first; -count repeats the runs.
// SINK_BENCH_PROFILE=DIR also profiles both servers under each case's
// load, after measuring it, and splits their time into classes
// (profileCase).
func BenchmarkSingleOpLoadOutOfProcess(b *testing.B) {
	sink, null := startPinnedServers(b)
	eachLoadCase(b, []pinnedServer{sink, null}, func(b *testing.B, c singleOpCase, clients int, m []loadMeasure) {
		s, f := m[0], m[1]
		reportServer(b, "", s)
		reportServer(b, "null-", f)
		b.ReportMetric(s.rate/f.rate, "vs-null")
		b.ReportMetric(f.cpuMicros/s.cpuMicros, "cpu-vs-null")
		if dir := profileDir(); dir != "" && b.N > 1 { // (not on the probe run of one request)
			profileCase(b, dir, c, clients, profiled{"sink", sink, s.cpuMicros}, profiled{"null", null, f.cpuMicros})
		}
	})
}

// eachLoadCase runs each case of loadCases but those named in skip as a
// sub-benchmark: it warms servers up, sends the case's requests to them
// in turn (measureAlternating) and hands report what it measured of
// each, in servers' order.
func eachLoadCase(b *testing.B, servers []pinnedServer, report func(b *testing.B, c singleOpCase, clients int, m []loadMeasure), skip ...string) {
	clientsOf := make([]opClient, len(servers))
	for i, srv := range servers {
		clientsOf[i] = srv.client
	}
	for _, c := range loadCases() {
		if slices.Contains(skip, c.name) {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			clients := loadClients(c)
			warmUp(b, c, clientsOf...)
			report(b, c, clients, measureAlternating(b, c, clients, max(b.N, clients), servers...))
		})
	}
}

// reportServer reports what was measured of one server, its metrics'
// names prefixed with prefix ("" for Sink): its rate ("ops/s"), and per
// request its processor time ("cpu-µs/op"), allocations, bytes allocated
// and write system calls ("allocs/op", "B/op", "writes/op"; Sink's as
// "srv-…", since the unprefixed ones are the benchmark's own).
func reportServer(b *testing.B, prefix string, m loadMeasure) {
	b.ReportMetric(m.rate, prefix+"ops/s")
	b.ReportMetric(m.cpuMicros, prefix+"cpu-µs/op")
	proc := cmp.Or(prefix, "srv-")
	b.ReportMetric(m.allocs, proc+"allocs/op")
	b.ReportMetric(m.bytes, proc+"B/op")
	b.ReportMetric(m.writes, proc+"writes/op")
}

// BenchmarkOwedWorkOutOfProcess: the cases of
// BenchmarkSingleOpLoadOutOfProcess against three servers, laid out the
// same way and taking turns in rounds: Sink, the owed-work floor
// (integration/cmd/worksink: only the work Sink's contract owes,
// straight-line, with Sink's memory store, document check and merge
// profile) and the null server. As there, "cpu-vs-null" is the null
// server's processor time per request over Sink's; "floor-cpu-vs-null" is
// the null server's over the floor's, about the most an implementation
// of the contract reaches against the gRPC floor (the floor is a simple
// one, not a proven minimum), and "cpu-vs-floor" the floor's over
// Sink's: what Sink's design costs beyond the work. Rates and
// allocations as there (floor-…: the floor's), and SINK_BENCH_PROFILE
// profiles the three servers as there.
func BenchmarkOwedWorkOutOfProcess(b *testing.B) {
	sink, null := startPinnedServers(b)
	floor := startPinnedRef(b, pinnedPrefix(b), "worksink")
	eachLoadCase(b, []pinnedServer{sink, floor, null}, func(b *testing.B, c singleOpCase, clients int, m []loadMeasure) {
		s, w, z := m[0], m[1], m[2]
		reportServer(b, "", s)
		reportServer(b, "floor-", w)
		reportServer(b, "null-", z)
		b.ReportMetric(z.cpuMicros/s.cpuMicros, "cpu-vs-null")
		b.ReportMetric(z.cpuMicros/w.cpuMicros, "floor-cpu-vs-null")
		b.ReportMetric(w.cpuMicros/s.cpuMicros, "cpu-vs-floor")
		if dir := profileDir(); dir != "" && b.N > 1 {
			profileCase(b, dir, c, clients, profiled{"sink", sink, s.cpuMicros}, profiled{"floor", floor, w.cpuMicros}, profiled{"null", null, z.cpuMicros})
		}
	}, "health") // (the same handler in all three)
}

// BenchmarkCodecOutOfProcess: Sink's codec (vtcodec) against grpc-go's
// stock proto codec, end to end. Sink and the null server are each built
// twice, with vtcodec and with the build tag sink_stockcodec (the stock
// codec); all four run on the last processor and the clients on the
// first, and each case (those of BenchmarkSingleOpLoadOutOfProcess) runs
// against the four in turn. It reports each server's rate and processor
// time per request: "vt-gain" is Sink's processor time per request with
// the stock codec over with vtcodec (the rate a saturated Sink would
// gain), "null-vt-gain" the null server's, and "vs-null" and
// "stock-vs-null" Sink's throughput ratio to the null server with each
// codec (null's time per request over Sink's).
func BenchmarkCodecOutOfProcess(b *testing.B) {
	const stock = "-tags=sink_stockcodec"
	sink, null := startPinnedServers(b)
	sinkStock, nullStock := startPinnedServers(b, stock)
	eachLoadCase(b, []pinnedServer{sink, sinkStock, null, nullStock}, func(b *testing.B, _ singleOpCase, _ int, m []loadMeasure) {
		s, ss, f, fs := m[0], m[1], m[2], m[3]
		reportServer(b, "", s)
		reportServer(b, "stock-", ss)
		reportServer(b, "null-", f)
		reportServer(b, "null-stock-", fs)
		b.ReportMetric(ss.cpuMicros/s.cpuMicros, "vt-gain")
		b.ReportMetric(fs.cpuMicros/f.cpuMicros, "null-vt-gain")
		b.ReportMetric(f.cpuMicros/s.cpuMicros, "vs-null")
		b.ReportMetric(fs.cpuMicros/ss.cpuMicros, "stock-vs-null")
	})
}

// loadCases are the cases of BenchmarkSingleOpLoadOutOfProcess: the single
// put, merge and read, a single delete (of a record that is gone after
// the first round: the delete path without the record's removal), the
// health check of the whole server, and a 500-operation batch put and read
// (1 KB documents).
func loadCases() []singleOpCase {
	ctx := context.Background()
	doc := `{"payload":"` + strings.Repeat("x", 1000) + `"}`
	const batch = 500
	put := &sinkv1.WriteRequest{}
	get := &sinkv1.ReadRequest{}
	for i := range batch {
		a := addr("bench", "batch", fmt.Sprint(i))
		put.Operations = append(put.Operations, putOp(a, doc, 0, nil))
		get.Operations = append(get.Operations, &sinkv1.ReadOperation{Address: a})
	}
	return append(singleOpCases(),
		singleOpCase{"delete", func(c opClient, i int) error {
			resp, err := c.Delete(ctx, &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{{Address: addr("bench", "single-delete", fmt.Sprint(i%1000))}}})
			if err == nil && resp.GetResults()[0].GetError() != nil {
				err = fmt.Errorf("delete: %v", resp.GetResults()[0].GetError())
			}
			return err
		}, 1, nil},
		singleOpCase{"health", func(c opClient, _ int) error {
			resp, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				err = fmt.Errorf("health: %v", resp.GetStatus())
			}
			return err
		}, 1, nil},
		singleOpCase{"batch500-put", func(c opClient, _ int) error {
			resp, err := c.Write(ctx, put)
			if err == nil && resp.GetResults()[batch-1].GetStatus() != applied {
				err = fmt.Errorf("batch put: %v", resp.GetResults()[batch-1])
			}
			return err
		}, batch, nil},
		singleOpCase{"batch500-read", func(c opClient, _ int) error {
			resp, err := c.Read(ctx, get)
			if err == nil && resp.GetResults()[batch-1].GetStatus() != found {
				err = fmt.Errorf("batch read: %v", resp.GetResults()[batch-1])
			}
			return err
		}, batch, func(c opClient) error { // the batch put's records
			_, err := c.Write(ctx, put)
			return err
		}},
	)
}

// dialOpClient returns a client of the Sink API and the health service
// at addr.
func dialOpClient(b testing.TB, addr string) opClient {
	b.Helper()
	conn := dialConn(b, addr)
	return opClient{SinkClient: sinkv1.NewSinkClient(conn), health: healthpb.NewHealthClient(conn)}
}

// heapAllocations returns how many heap objects and bytes a server
// process has allocated so far, from the Go runtime metrics it serves at
// httpAddr.
func heapAllocations(b testing.TB, httpAddr string) (objects, bytes float64) {
	b.Helper()
	m := opsScrape(b, httpAddr)
	for _, name := range []string{"go_memstats_mallocs_total", "go_memstats_alloc_bytes_total"} {
		if _, ok := m[name]; !ok {
			b.Fatalf("the server process's metrics have no %s", name)
		}
	}
	return m.value("go_memstats_mallocs_total", nil), m.value("go_memstats_alloc_bytes_total", nil)
}

// processCPU returns the processor time (user and system, every thread)
// the process pid has used: from its processor-time clock
// (clock_getcpuclockid's, in nanoseconds), or else from /proc/<pid>/stat,
// in clock ticks of 10 ms (Linux's USER_HZ), too coarse for the
// alternating rounds of measureAlternating.
func processCPU(b testing.TB, pid int) time.Duration {
	b.Helper()
	var ts unix.Timespec
	// The clock of a whole process: MAKE_PROCESS_CPUCLOCK(pid,
	// CPUCLOCK_SCHED) in Linux's posix-timers.h.
	if err := unix.ClockGettime(int32(^pid<<3|2), &ts); err == nil {
		return time.Duration(ts.Nano())
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name (in parentheses, which may hold
	// spaces): state is field 3, utime 14 and stime 15.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat: %v", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// processWrites returns how many write system calls the process pid has
// made, from /proc/<pid>/io (syscw).
func processWrites(b testing.TB, pid int) int64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "syscw:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatalf("/proc/%d/io: %v", pid, err)
			}
			return n
		}
	}
	b.Fatalf("/proc/%d/io has no syscw: %q", pid, raw)
	return 0
}

// pinSelf runs every thread of this process on processor cpu, with
// GOMAXPROCS 1, until the benchmark ends.
func pinSelf(b testing.TB, cpu int) {
	b.Helper()
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		b.Fatal(err)
	}
	mask := func(set unix.CPUSet) string {
		var cpus []string
		for c := 0; c < runtime.NumCPU(); c++ {
			if set.IsSet(c) {
				cpus = append(cpus, strconv.Itoa(c))
			}
		}
		return strings.Join(cpus, ",")
	}
	set := func(cpus string) {
		if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
			b.Fatalf("taskset: %v\n%s", err, out)
		}
	}
	procs := runtime.GOMAXPROCS(1)
	set(strconv.Itoa(cpu))
	b.Cleanup(func() {
		set(mask(was))
		runtime.GOMAXPROCS(procs)
	})
}

// refProcess is a reference server process (the null server, the
// owed-work floor) started by startRefProcess.
type refProcess struct {
	grpcAddr, metricsAddr string
	pid                   int
}

// startPinnedRef starts the reference server NAME (see startRefProcess)
// under the command prefix and returns it as a pinnedServer.
func startPinnedRef(b testing.TB, prefix []string, name string, buildFlags ...string) pinnedServer {
	b.Helper()
	p := startRefProcess(b, prefix, name, buildFlags...)
	return pinnedServer{client: dialOpClient(b, p.grpcAddr), pid: p.pid, httpAddr: p.metricsAddr}
}

// startRefProcess starts the reference server integration/cmd/NAME
// (internal/testkit/benchproc's process: the null server, nullsink, or
// the owed-work floor, worksink), built with buildFlags, under the command
// prefix on a free loopback port and returns its addresses and process
// id. It is killed when the test or benchmark ends.
func startRefProcess(b testing.TB, prefix []string, name string, buildFlags ...string) refProcess {
	b.Helper()
	argv := append(append([]string(nil), prefix...), buildBinaryWith(b, "./integration/cmd/"+name, name, buildFlags...))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addrs := make(chan refProcess, 1)
	go func() {
		r := bufio.NewReader(out)
		grpcLine, _ := r.ReadString('\n')
		metricsLine, _ := r.ReadString('\n')
		addrs <- refProcess{
			grpcAddr:    strings.TrimPrefix(strings.TrimSpace(grpcLine), "listening on "),
			metricsAddr: strings.TrimPrefix(strings.TrimSpace(metricsLine), "metrics on "),
			pid:         cmd.Process.Pid,
		}
	}()
	select {
	case p := <-addrs:
		if p.grpcAddr == "" || p.metricsAddr == "" {
			b.Fatalf("%s printed no addresses: %+v", name, p)
		}
		return p
	case <-time.After(30 * time.Second): // a failure guard
		b.Fatalf("%s did not start", name)
		return refProcess{}
	}
}

// The null server's command answers as the benchmarks expect: every write
// applied with a revision, every read found with a document.
func TestNullSinkProcessAnswers(t *testing.T) {
	p := startRefProcess(t, nil, "nullsink")
	c := dialSink(t, p.grpcAddr)
	res := write(t, c, putOp(addr("ns", "ds", "k"), `{"a":1}`, 0, nil), mergeOp(addr("ns", "ds", "k"), "merge-patch", `{"b":2}`))
	for i, r := range res {
		if r.GetStatus() != applied || len(r.GetRevision()) == 0 || r.GetIndex() != uint32(i) {
			t.Fatalf("result %d: %v", i, r)
		}
	}
	got := read(t, c, addr("ns", "ds", "k"))
	if got[0].GetStatus() != found || len(got[0].GetDocument().GetData()) < 1000 {
		t.Fatalf("read: %v", got[0])
	}
	if st, err := opsHealth(dialConn(t, p.grpcAddr), ""); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", st, err)
	}
	if objects, _ := heapAllocations(t, p.metricsAddr); objects <= 0 {
		t.Fatalf("the null server's metrics count %v allocations", objects)
	}
}

// The owed-work floor's command serves the Sink service and does the
// work: a merge reads what a put wrote and a read returns the merge (in
// requests of their own: the floor takes puts or merges, not both).
func TestWorkSinkProcessAnswers(t *testing.T) {
	p := startRefProcess(t, nil, "worksink")
	c := dialSink(t, p.grpcAddr)
	for _, op := range []*sinkv1.WriteOperation{putOp(addr("ns", "ds", "k"), `{"a":1}`, 0, nil), mergeOp(addr("ns", "ds", "k"), "merge-patch", `{"b":2}`)} {
		if r := write(t, c, op)[0]; r.GetStatus() != applied || len(r.GetRevision()) == 0 {
			t.Fatalf("%v: %v", op, r)
		}
	}
	got := read(t, c, addr("ns", "ds", "k"))
	if got[0].GetStatus() != found || string(got[0].GetDocument().GetData()) != `{"a":1,"b":2}` {
		t.Fatalf("read: %v", got[0])
	}
	if objects, _ := heapAllocations(t, p.metricsAddr); objects <= 0 {
		t.Fatalf("the floor's metrics count %v allocations", objects)
	}
}
