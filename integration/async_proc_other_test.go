//go:build !linux

package integration_test

import "syscall"

func childProcAttr() *syscall.SysProcAttr { return nil }
