package integration_test

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

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
	client sinkv1.SinkClient
	pid    int
	// httpAddr is the sink process's operations endpoint (none for the
	// null server).
	httpAddr string
}

// startPinnedServers starts the sink binary (configured by SINK_BENCH_ENV)
// and the null server as processes on the last processor, pins this
// process to the first (see pinSelf) and returns a client of each. It
// skips the benchmark without taskset or a second processor.
func startPinnedServers(b *testing.B) (sink, null pinnedServer) {
	b.Helper()
	if _, err := exec.LookPath("taskset"); err != nil || runtime.NumCPU() < 2 {
		b.Skip("needs taskset and two processors")
	}
	server := []string{"taskset", "-c", strconv.Itoa(runtime.NumCPU() - 1)}
	p := startSinkProcessUnder(b, server, strings.Fields(os.Getenv("SINK_BENCH_ENV"))...)
	sink = pinnedServer{client: dialSink(b, p.grpcAddr), pid: p.cmd.Process.Pid, httpAddr: p.httpAddr}
	nullAddr, nullPID := startNullProcess(b, server)
	null = pinnedServer{client: dialSink(b, nullAddr), pid: nullPID}
	pinSelf(b, 0)
	return sink, null
}

// BenchmarkSingleOpLoadOutOfProcess: the single-operation cases under load,
// 16 clients at a time, laid out as BenchmarkSingleOpOutOfProcess (each
// server on the last processor, the clients on the first). The client
// may be what limits the rate here, so besides the rates it reports each
// server process's processor time per operation (from /proc): the rate a
// saturated server would reach is inversely proportional to it, so
// "cpu-vs-null" (the null server's time per operation over Sink's) is
// Sink's throughput ratio to the gRPC floor, as a load generator on
// another machine would measure it.
func BenchmarkSingleOpLoadOutOfProcess(b *testing.B) {
	const clients = 16
	sink, null := startPinnedServers(b)
	for _, c := range singleOpCases() {
		b.Run(c.name, func(b *testing.B) {
			warmUp(b, c, sink.client, null.client)
			n := max(b.N, clients)
			measure := func(srv pinnedServer) (loadResult, time.Duration) {
				before := processCPU(b, srv.pid)
				r := runLoad(b, clients, n, func(i int) (codes.Code, error) { return codes.OK, c.call(srv.client, i) })
				return r, processCPU(b, srv.pid) - before
			}
			allocs, bytes := heapAllocations(b, sink.httpAddr)
			s, sCPU := measure(sink)
			allocsAfter, bytesAfter := heapAllocations(b, sink.httpAddr)
			f, fCPU := measure(null)
			b.ReportMetric(s.rate(), "ops/s")
			b.ReportMetric(s.rate()/f.rate(), "vs-null")
			b.ReportMetric(float64(sCPU.Microseconds())/float64(n), "cpu-µs/op")
			b.ReportMetric(float64(fCPU.Microseconds())/float64(n), "null-cpu-µs/op")
			b.ReportMetric(float64(fCPU)/float64(sCPU), "cpu-vs-null")
			b.ReportMetric((allocsAfter-allocs)/float64(n), "srv-allocs/op")
			b.ReportMetric((bytesAfter-bytes)/float64(n), "srv-B/op")
		})
	}
}

// heapAllocations returns how many heap objects and bytes the sink
// process has allocated so far, from its Go runtime metrics.
func heapAllocations(b testing.TB, httpAddr string) (objects, bytes float64) {
	b.Helper()
	m := opsScrape(b, httpAddr)
	for _, name := range []string{"go_memstats_mallocs_total", "go_memstats_alloc_bytes_total"} {
		if _, ok := m[name]; !ok {
			b.Fatalf("the sink process's metrics have no %s", name)
		}
	}
	return m.value("go_memstats_mallocs_total", nil), m.value("go_memstats_alloc_bytes_total", nil)
}

// processCPU returns the processor time (user and system, every thread)
// the process pid has used, from /proc/<pid>/stat, in clock ticks of
// 10 ms (Linux's USER_HZ).
func processCPU(b testing.TB, pid int) time.Duration {
	b.Helper()
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

// startNullProcess starts integration/cmd/nullsink under the command
// prefix on a free loopback port and returns its address and process id.
// It is killed when the benchmark ends.
func startNullProcess(b testing.TB, prefix []string) (string, int) {
	b.Helper()
	argv := append(append([]string(nil), prefix...), buildBinary(b, "./integration/cmd/nullsink", "nullsink"))
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
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimPrefix(strings.TrimSpace(line), "listening on ")
	}()
	select {
	case a := <-addr:
		if a == "" {
			b.Fatal("nullsink printed no address")
		}
		return a, cmd.Process.Pid
	case <-time.After(30 * time.Second): // a failure guard
		b.Fatal("nullsink did not start")
		return "", 0
	}
}

// The null server's command answers as the benchmarks expect: every write
// applied with a revision, every read found with a document.
func TestNullSinkProcessAnswers(t *testing.T) {
	nullAddr, _ := startNullProcess(t, nil)
	c := dialSink(t, nullAddr)
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
}
