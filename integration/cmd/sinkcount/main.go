// Command sinkcount is the sink binary plus the "count" merge profile
// (internal/testkit/countprofile), whose merges are not idempotent, so that tests
// running Sink as a separate process (for example a worker killed with
// SIGKILL) can count how many mutations were applied twice.
package main

import (
	"os"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/internal/testkit/countprofile"
)

func main() { os.Exit(bootstrap.Main(os.Args[1:], bootstrap.MergeProfile(countprofile.New))) }
