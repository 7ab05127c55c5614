//go:build !(linux && (amd64 || arm64))

package storagetest

import (
	"context"
	"time"
)

// sleep waits d (> 0) or until ctx ends, whichever comes first, and returns
// ctx's error if it ended first.
func sleep(ctx context.Context, d time.Duration) error { return timerSleep(ctx, d) }
