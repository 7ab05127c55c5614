//go:build !unix

package integration_test

import "time"

// selfCPU is not measured here (the fleet benchmarks report 0).
func selfCPU() time.Duration { return 0 }
