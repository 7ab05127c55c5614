//go:build !linux

package mongotest

import "syscall"

// childSysProcAttr: parent-death signals are Linux-only; elsewhere Close (via
// Main) is what stops the child.
func childSysProcAttr() *syscall.SysProcAttr { return nil }

// processGone is not implemented here: stale temp dirs are left alone.
func processGone(pid int) bool { return false }
