//go:build !linux

package storagetest

import "time"

// preciseSleep sleeps for d (elsewhere than Linux with the runtime's
// timers: less precise, see Delayed.wait).
func preciseSleep(d time.Duration) { time.Sleep(d) }
