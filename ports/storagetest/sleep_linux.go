package storagetest

import (
	"syscall"
	"time"
)

// preciseSleep blocks the calling OS thread for d (the runtime hands the
// goroutine's processor to another thread meanwhile), waking within the
// kernel's timer slack rather than at the runtime timers' millisecond
// granularity.
func preciseSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var left syscall.Timespec
		if err := syscall.Nanosleep(&ts, &left); err != syscall.EINTR {
			return
		}
		ts = left
	}
}
