//go:build !linux

package kafkatest

import "os/exec"

// setPdeathsig is a no-op off Linux; the broker's -parent-pid watchdog
// still stops it when the test process dies.
func setPdeathsig(*exec.Cmd) {}
