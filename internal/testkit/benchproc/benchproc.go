// Package benchproc runs one of the benchmarks' reference servers (the
// null server, the owed-work floor) as a process of its own, the way the
// out-of-process benchmarks start them: it listens on the address of the
// process's first argument (default 127.0.0.1:0), prints "listening on
// ADDRESS", serves the Go runtime's metrics (as Sink's /metrics names
// them: go_memstats_mallocs_total and the others) on another loopback port
// (with the Go runtime's profiles under /debug/pprof/, to compare with
// Sink's), prints "metrics on ADDRESS", and serves until it is killed. Its
// Go runtime is set up as the sink binary's: the collector's heap floor is
// SINK_GC_HEAP_FLOOR_BYTES (internal/heapfloor; default heapfloor.Default),
// GOGC and the rest as the environment says.
package benchproc

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sink-io/sink/internal/heapfloor"
)

// Main serves serve's gRPC server on the process's listener, as the
// package comment says, and never returns; name prefixes its errors.
func Main(name string, serve func(net.Listener)) {
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	floor := uint64(heapfloor.Default)
	if v := os.Getenv("SINK_GC_HEAP_FLOOR_BYTES"); v != "" { // empty: the default, as for Sink
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fail(fmt.Errorf("SINK_GC_HEAP_FLOOR_BYTES: %w", err))
		}
		floor = n
	}
	heapfloor.Start(floor)
	addr := "127.0.0.1:0"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		fail(err)
	}
	metrics, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go func() { _ = http.Serve(metrics, mux) }()
	serve(lis)
	fmt.Println("listening on", lis.Addr())
	fmt.Println("metrics on", metrics.Addr())
	select {}
}
