package kafkatest

import (
	"os/exec"
	"syscall"
)

// setPdeathsig makes the kernel SIGKILL the broker when the thread that
// started it dies (Go keeps its threads alive, so in practice: when the test
// process dies). The broker's -parent-pid watchdog covers the rest.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
