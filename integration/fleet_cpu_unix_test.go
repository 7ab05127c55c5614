//go:build unix

package integration_test

import (
	"syscall"
	"time"
)

// selfCPU is the CPU time (user and system) of this process so far: in the
// fleet benchmarks the clients and both servers, not the database.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
