// Command nullsink serves the null Sink service (internal/testkit/nullsink),
// the gRPC floor of the benchmarks, as a process of its own
// (internal/testkit/benchproc says how it starts and what it prints).
package main

import (
	"net"

	"github.com/sink-io/sink/internal/testkit/benchproc"
	"github.com/sink-io/sink/internal/testkit/nullsink"
)

func main() { benchproc.Main("nullsink", func(lis net.Listener) { nullsink.Serve(lis) }) }
