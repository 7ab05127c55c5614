package ports

import "time"

// Observer receives measurements from the application (metrics adapters
// implement it). Implementations must be safe for concurrent use and cheap.
type Observer interface {
	// StorageCall: one batch call to storage ("read" or "write") with n operations.
	StorageCall(call string, n int, d time.Duration)
	// QueuePublish: one batch of n mutations submitted to the queue.
	QueuePublish(n int, d time.Duration)
	// MergeConflict: a merge met a concurrent change and is retried.
	MergeConflict(profile string)
	// ApplyRetry: a queued mutation is retried after a transient failure,
	// after sleeping backoff.
	ApplyRetry(backoff time.Duration)
}

// NopObserver discards every measurement.
type NopObserver struct{}

func (NopObserver) StorageCall(string, int, time.Duration) {}
func (NopObserver) QueuePublish(int, time.Duration)        {}
func (NopObserver) MergeConflict(string)                   {}
func (NopObserver) ApplyRetry(time.Duration)               {}
