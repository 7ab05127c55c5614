package integration_test

import "syscall"

// childProcAttr makes a child process die with the test process.
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
