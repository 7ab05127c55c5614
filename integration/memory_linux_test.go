package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sink-io/sink/adapters/mergepatch"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// BenchmarkMemoryAfterLoadOutOfProcess measures the sink process's
// resident memory (VmRSS): idle after start-up, right after a load, and
// after memoryIdle without requests, with the Go runtime's heap figures at
// that point. Sink (memory storage, configured by SINK_BENCH_ENV) runs on
// one processor, as in BenchmarkSingleOpLoadOutOfProcess. The loads:
//   - mixed: 30,000 requests from 16 clients: single puts, merges and
//     reads of 1 KB documents, and every 50th request a batch of 500 puts
//     or reads of them;
//   - large: 400 batches of 500 puts of 16 KB documents (8 MiB requests)
//     from 8 clients, on the same 500 records.
//
// It reports numbers and asserts nothing about them (they depend on the
// machine and the load).
//
//	go test ./integration/ -run '^$' -bench MemoryAfterLoad -benchtime 1x
func BenchmarkMemoryAfterLoadOutOfProcess(b *testing.B) {
	if _, err := exec.LookPath("taskset"); err != nil || runtime.NumCPU() < 2 {
		b.Skip("needs taskset and two processors")
	}
	ctx := context.Background()
	batch := func(size int) *sinkv1.WriteRequest {
		doc := `{"payload":"` + strings.Repeat("x", size) + `"}`
		ops := make([]*sinkv1.WriteOperation, 500)
		for k := range ops {
			ops[k] = putOp(addr("bench", "mem-batch", fmt.Sprint(k)), doc, 0, nil)
		}
		return &sinkv1.WriteRequest{Operations: ops}
	}
	reads := make([]*sinkv1.ReadOperation, 500)
	for k := range reads {
		reads[k] = &sinkv1.ReadOperation{Address: addr("bench", "mem-batch", fmt.Sprint(k))}
	}
	doc := `{"payload":"` + strings.Repeat("x", 1000) + `"}`
	small, large := batch(1000), batch(16<<10)
	b.Run("mixed", func(b *testing.B) {
		memoryAfterLoad(b, 16, 30000, func(c sinkv1.SinkClient, i int) error {
			var err error
			switch {
			case i%100 == 0:
				_, err = c.Write(ctx, small)
			case i%100 == 50:
				_, err = c.Read(ctx, &sinkv1.ReadRequest{Operations: reads})
			case i%3 == 0:
				_, err = writeCode(c, putOp(addr("bench", "mem", fmt.Sprint(i%1000)), doc, 0, nil))
			case i%3 == 1:
				_, err = writeCode(c, mergeOp(addr("bench", "mem-merge", fmt.Sprint(i%1000)), mergepatch.Name, fmt.Sprintf(`{"n":%d}`, i)))
			default:
				_, err = c.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("bench", "mem", fmt.Sprint(i%1000))}}})
			}
			return err
		})
	})
	b.Run("large", func(b *testing.B) {
		memoryAfterLoad(b, 8, 400, func(c sinkv1.SinkClient, i int) error {
			_, err := c.Write(ctx, large)
			return err
		})
	})
}

// memoryAfterLoad starts a sink process, runs n calls of op from clients
// clients, idles memoryIdle and reports the process's memory.
func memoryAfterLoad(b *testing.B, clients, n int, op func(c sinkv1.SinkClient, i int) error) {
	p := startSinkProcessUnder(b, []string{"taskset", "-c", strconv.Itoa(runtime.NumCPU() - 1)}, strings.Fields(os.Getenv("SINK_BENCH_ENV"))...)
	c := dialSink(b, p.grpcAddr)
	pid := p.cmd.Process.Pid
	idle := residentBytes(b, pid)
	var after, afterIdle int64
	for b.Loop() {
		r := runLoad(b, clients, n, func(i int) (codes.Code, error) { return codes.OK, op(c, i) })
		_ = r
		after = residentBytes(b, pid)
		for t := time.Duration(0); t < memoryIdle; t += memoryIdle / 6 {
			time.Sleep(memoryIdle / 6) // the idle time is what is measured
			b.Logf("resident after %s idle: %.1f MiB", t+memoryIdle/6, float64(residentBytes(b, pid))/(1<<20))
		}
		afterIdle = residentBytes(b, pid)
	}
	m := opsScrape(b, p.httpAddr)
	if path := os.Getenv("SINK_BENCH_HEAP_PROFILE"); path != "" {
		// With SINK_PROFILING=true: the live heap after a collection (for
		// go tool pprof), and what resident memory a collection gives back.
		code, body, err := opsGet("http://" + p.httpAddr + "/debug/pprof/heap?gc=1")
		if err != nil || code != 200 {
			b.Fatalf("heap profile: %d %v", code, err)
		}
		if err := os.WriteFile(path+"."+strings.ReplaceAll(b.Name(), "/", "-"), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
		time.Sleep(memoryIdle / 6)
		b.Logf("resident %s after a collection: %.1f MiB", memoryIdle/6, float64(residentBytes(b, pid))/(1<<20))
	}
	b.ReportMetric(float64(idle)/(1<<20), "idle-MiB")
	b.ReportMetric(float64(after)/(1<<20), "after-load-MiB")
	b.ReportMetric(float64(afterIdle)/(1<<20), "after-idle-MiB")
	b.ReportMetric(m.value("go_memstats_heap_inuse_bytes", nil)/(1<<20), "heap-inuse-MiB")
	b.ReportMetric((m.value("go_memstats_heap_idle_bytes", nil)-m.value("go_memstats_heap_released_bytes", nil))/(1<<20), "heap-unreleased-MiB")
	b.ReportMetric(m.value("go_memstats_stack_inuse_bytes", nil)/(1<<20), "stack-MiB")
	b.ReportMetric(m.value("go_goroutines", nil), "goroutines")
}

const memoryIdle = time.Minute

// residentBytes returns the process's resident set size (VmRSS).
func residentBytes(b testing.TB, pid int) int64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("VmRSS: %q", line)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}
