// Command holdports keeps TCP ports taken while tests run, so that a test
// that listens on one of them (for example on Sink's default addresses,
// :8080 for gRPC and :8081 for HTTP, instead of 127.0.0.1:0) fails instead
// of passing by luck. .ci/run starts it before the tests and stops it after.
//
//	holdports PORT...
//
// It listens on every interface on each port, accepts connections and closes
// them at once, and runs until SIGINT or SIGTERM. A port that is already
// taken is reported and skipped: it is held either way. Once every port is
// held it writes the line "ready" to standard output, which a script can
// wait for.
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: holdports PORT...")
		return 2
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	var held []net.Listener
	for _, arg := range args {
		port, err := strconv.Atoi(arg)
		if err != nil || port < 1 || port > 65535 {
			fmt.Fprintf(os.Stderr, "holdports: %q is not a port (1-65535)\n", arg)
			return 2
		}
		l, err := net.Listen("tcp", ":"+arg)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				fmt.Fprintf(os.Stderr, "holdports: port %d is already taken; it stays taken\n", port)
				continue
			}
			fmt.Fprintf(os.Stderr, "holdports: cannot listen on port %d: %v\n", port, err)
			return 1
		}
		held = append(held, l)
		go refuse(l)
		fmt.Fprintf(os.Stderr, "holdports: holding port %d\n", port)
	}
	if _, err := fmt.Println("ready"); err != nil {
		fmt.Fprintf(os.Stderr, "holdports: cannot report readiness: %v\n", err)
		return 1
	}
	<-stop
	for _, l := range held {
		_ = l.Close()
	}
	return 0
}

// refuse accepts connections and closes them at once, so that a client that
// dials a held port fails fast instead of waiting.
func refuse(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}
