//go:build !linux

package mongotest

import (
	"errors"
	"os"
	"syscall"
)

// childSysProcAttr: parent-death signals are Linux-only; elsewhere Close (via
// Main) is what stops the child.
func childSysProcAttr() *syscall.SysProcAttr { return nil }

// processGone is not implemented here: stale temp dirs are left alone.
func processGone(pid int) bool { return false }

// stopProcess and continueProcess (Server.Pause) are Linux-only here.
func stopProcess(*os.Process) error     { return errors.New("mongotest: Pause is Linux-only") }
func continueProcess(*os.Process) error { return errors.New("mongotest: Resume is Linux-only") }
