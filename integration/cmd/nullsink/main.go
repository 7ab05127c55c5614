// Command nullsink serves the null Sink service (internal/testkit/nullsink),
// the gRPC floor of the benchmarks, as a process of its own: it listens on
// the address of its one argument (default 127.0.0.1:0), prints
// "listening on ADDRESS" and serves until it is killed.
package main

import (
	"fmt"
	"net"
	"os"

	"github.com/sink-io/sink/internal/testkit/nullsink"
)

func main() {
	addr := "127.0.0.1:0"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullsink:", err)
		os.Exit(1)
	}
	nullsink.Serve(lis)
	fmt.Println("listening on", lis.Addr())
	select {}
}
