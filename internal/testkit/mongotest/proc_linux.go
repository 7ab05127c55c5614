package mongotest

import (
	"errors"
	"os"
	"syscall"
)

// childSysProcAttr makes the FerretDB child die with SIGKILL when the test
// process dies, so no server outlives a crashed or killed test binary.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// processGone reports whether no process with this pid exists.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// stopProcess freezes p (SIGSTOP); continueProcess continues it (SIGCONT).
func stopProcess(p *os.Process) error     { return p.Signal(syscall.SIGSTOP) }
func continueProcess(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
