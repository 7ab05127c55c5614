// Command worksink serves the owed-work floor of the benchmarks
// (internal/testkit/worksink) as a process of its own
// (internal/testkit/benchproc says how it starts and what it prints).
package main

import (
	"net"

	"github.com/sink-io/sink/internal/testkit/benchproc"
	"github.com/sink-io/sink/internal/testkit/worksink"
)

func main() { benchproc.Main("worksink", func(lis net.Listener) { worksink.Serve(lis) }) }
