// Command sink runs Sink: the gRPC API server, the queue worker, or both
// (SINK_MODE), configured from the environment.
package main

import (
	"os"

	"github.com/sink-io/sink/bootstrap"
)

func main() { os.Exit(bootstrap.Main(os.Args[1:])) }
