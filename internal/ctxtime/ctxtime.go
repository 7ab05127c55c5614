// Package ctxtime holds the one context-bound sleep that the application
// layer and the adapters share. It imports only the standard library, so
// every layer may import it (the architecture test allows exactly this
// package to the application layer).
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, whichever comes first, and reports
// whether the full time passed. A d <= 0 does not wait: it reports whether
// ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
