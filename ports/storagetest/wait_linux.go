//go:build linux && (amd64 || arm64)

package storagetest

import (
	"context"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// sleep waits d (> 0) or until ctx ends, whichever comes first, and returns
// ctx's error if it ended first.
//
// On Linux the wait ends the way a database's answer would: a timerfd
// armed for d becomes readable and the Go runtime's network poller, which
// watches it like a socket, wakes the caller. A plain runtime timer of 1 ms
// fires up to a millisecond late whenever a processor is idle, because an
// idle processor sleeps in the poller with a timeout rounded to whole
// milliseconds (measured under the contention benchmarks: 1.46 ms on
// average), so a "1 ms" storage would be half as slow again. The read's
// deadline, a runtime timer at the same instant, ends the wait when the
// processors are busy and check their timers before they poll. Where a
// timerfd cannot be had, sleep falls back to the runtime timer alone.
func sleep(ctx context.Context, d time.Duration) error {
	const clockMonotonic = 1
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return timerSleep(ctx, d)
	}
	f := os.NewFile(fd, "storagetest-delay")
	defer f.Close()
	due := time.Now().Add(d)
	if err := f.SetReadDeadline(due); err != nil { // not watched by the poller
		return timerSleep(ctx, d)
	}
	spec := [2]syscall.Timespec{1: syscall.NsecToTimespec(int64(d))} // struct itimerspec: no interval, the value
	if _, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); errno != 0 {
		return timerSleep(ctx, d)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Now()) })
	defer stop()
	var buf [8]byte
	_, _ = f.Read(buf[:])
	if err := ctx.Err(); err != nil && time.Now().Before(due) {
		return err
	}
	return nil
}
