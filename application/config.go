package application

import (
	"errors"
	"fmt"
	"time"

	"github.com/sink-io/sink/domain"
)

// Limits bound what one request may carry.
type Limits struct {
	// MaxOperations per request.
	MaxOperations int
	// MaxDocumentBytes per document or merge intent.
	MaxDocumentBytes int
	// MaxKeyBytes per string or bytes key.
	MaxKeyBytes int
	// MaxNameLength for store, namespace and dataset names, in bytes.
	MaxNameLength int
	// MaxRequestBytes: the sum of all documents, intents and keys of one request.
	MaxRequestBytes int
	// MaxNestingDepth bounds the nesting of objects and arrays below the
	// top level of the documents, intents and merge results whose content
	// type Sink checks (JSON and BSON; domain.CheckDocument), from 1 to
	// domain.MaxNestingLimit.
	MaxNestingDepth int
}

// DefaultLimits are the limits used when none are configured.
func DefaultLimits() Limits {
	return Limits{
		MaxOperations:    1000,
		MaxDocumentBytes: 4 << 20,
		MaxKeyBytes:      1024,
		MaxNameLength:    120,
		MaxRequestBytes:  32 << 20,
		MaxNestingDepth:  100,
	}
}

// Validate reports every invalid limit at once.
func (l Limits) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	positive("max operations", l.MaxOperations)
	positive("max document bytes", l.MaxDocumentBytes)
	positive("max key bytes", l.MaxKeyBytes)
	positive("max name length", l.MaxNameLength)
	positive("max request bytes", l.MaxRequestBytes)
	if l.MaxNestingDepth < 1 || l.MaxNestingDepth > domain.MaxNestingLimit {
		errs = append(errs, fmt.Errorf("max nesting depth must be between 1 and %d, got %d", domain.MaxNestingLimit, l.MaxNestingDepth))
	}
	if l.MaxRequestBytes > 0 && l.MaxDocumentBytes > l.MaxRequestBytes {
		errs = append(errs, fmt.Errorf("max document bytes (%d) must not exceed max request bytes (%d)", l.MaxDocumentBytes, l.MaxRequestBytes))
	}
	return errors.Join(errs...)
}

// RetryPolicy bounds a retry loop: at most MaxAttempts tries, sleeping a
// random ("full jitter") duration in [0, min(MaxBackoff, BaseBackoff·2^n)]
// between them.
type RetryPolicy struct {
	MaxAttempts int
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
}

// Validate reports every problem of the policy at once.
func (p RetryPolicy) Validate(name string) error {
	var errs []error
	if p.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("%s: max attempts must be at least 1, got %d", name, p.MaxAttempts))
	}
	if p.BaseBackoff < 0 || p.MaxBackoff < 0 {
		errs = append(errs, fmt.Errorf("%s: backoff durations must not be negative", name))
	}
	if p.MaxBackoff < p.BaseBackoff {
		errs = append(errs, fmt.Errorf("%s: max backoff (%s) must not be below base backoff (%s)", name, p.MaxBackoff, p.BaseBackoff))
	}
	return errors.Join(errs...)
}

// MergePolicy bounds one merge: the read-modify-write retries on conflict,
// and the time each run of its profile may take.
type MergePolicy struct {
	RetryPolicy
	// Timeout is the time budget of one run of a merge profile; the
	// profile's context ends after it, and a run that takes longer fails
	// with a non-retryable CodeResourceExhausted error (see runProfile).
	Timeout time.Duration
}

// Validate reports every problem of the policy at once.
func (p MergePolicy) Validate(name string) error {
	var errs []error
	errs = append(errs, p.RetryPolicy.Validate(name))
	if p.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("%s: timeout must be positive, got %s", name, p.Timeout))
	}
	return errors.Join(errs...)
}

// BatchPolicy configures natural batching: while a storage call of the
// service is in flight, the operations of new callers (requests, and the
// worker's batches) wait; when it returns, everything that waited goes to
// storage as one batch of at most MaxOps operations (a caller with more
// goes alone), in arrival order. There is no timer: a caller that finds no
// call in flight goes to storage at once. Reads and writes batch
// separately. Merges of one record that wait together fold into one
// read-modify-write (see applyWave); a fold of a record whose last write
// was the service's own, in the batch before or earlier in the same batch,
// starts from that written state instead of reading it (see hintTable).
// Per-caller results and the order of
// each record's operations are the same as without batching.
//
// Records are spread over Shards shards, each with its own batches, so that
// up to Shards batches are at storage at once; a caller whose operations
// address records of several shards (a large request, a worker batch) goes
// to storage at once, unbatched, as without batching.
type BatchPolicy struct {
	Enabled bool
	MaxOps  int
	Shards  int
}

// Config configures the application service.
type Config struct {
	// Store is the name of the store this process serves. Requests that
	// leave the store empty get this one.
	Store  string
	Limits Limits
	// Merge bounds the read-modify-write retries of one merge on conflict
	// and the time budget of its profile.
	Merge MergePolicy
	// Apply bounds the retries of a queued mutation on transient failures
	// (worker path).
	Apply RetryPolicy
	// Batch configures natural batching.
	Batch BatchPolicy
	// IdempotencyRing is how many mutation IDs (queued mutations' IDs and
	// clients' idempotency keys) each record's applied mark remembers (1 to
	// domain.MaxAppliedRing): the window within which a redelivery or a
	// client's retry of a record's mutation is recognised and not applied
	// again (see domain.AppliedMark).
	IdempotencyRing int
	// Scan bounds the work of one Scan page and of one Count.
	Scan ScanLimits
	// AsyncDisabledHint is appended to the error returned for
	// RETURN_AFTER_ACCEPTED requests when no queue is configured; it should
	// name the settings that enable the queue.
	AsyncDisabledHint string
	// MaxRequestBytesSetting names the setting of Limits.MaxRequestBytes
	// in the RESOURCE_EXHAUSTED error of a request above it (e.g.
	// "SINK_MAX_REQUEST_BYTES"); empty: none is named.
	MaxRequestBytesSetting string
	// MinDeadline is the least time a request's deadline may leave when
	// the request arrives: a request whose deadline has passed, or leaves
	// less, is refused whole with CodeDeadlineExceeded before any storage
	// or queue work (see checkDeadline). 0 refuses only requests whose
	// deadline has passed. MinDeadlineSetting names its setting in the
	// refusal (empty: none is named).
	MinDeadline        time.Duration
	MinDeadlineSetting string
}

// DefaultConfig returns the defaults for every setting (the environment
// layer's defaults are these). NewService does not fill in zero fields: a
// zero limit or attempt count is invalid, and zero backoffs mean retrying
// without a pause, so start from DefaultConfig and change what differs.
func DefaultConfig() Config {
	return Config{
		Store:  "primary",
		Limits: DefaultLimits(),
		Merge: MergePolicy{
			RetryPolicy: RetryPolicy{MaxAttempts: 32, BaseBackoff: time.Millisecond, MaxBackoff: 100 * time.Millisecond},
			Timeout:     2 * time.Second,
		},
		Apply:           RetryPolicy{MaxAttempts: 10, BaseBackoff: 50 * time.Millisecond, MaxBackoff: 5 * time.Second},
		Batch:           BatchPolicy{Enabled: true, MaxOps: 1000, Shards: 2},
		IdempotencyRing: domain.DefaultAppliedRing,
		Scan:            DefaultScanLimits(),
		MinDeadline:     DefaultMinDeadline,
	}
}

// DefaultMinDeadline is Config.MinDeadline's default: less than one
// storage round trip, so that only requests that cannot finish are
// refused.
const DefaultMinDeadline = time.Millisecond

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Store == "" {
		errs = append(errs, errors.New("store name must not be empty"))
	}
	errs = append(errs, c.Limits.Validate(), c.Merge.Validate("merge"), c.Apply.Validate("apply retry"), c.Scan.Validate())
	if c.Batch.Enabled && c.Batch.MaxOps < 1 {
		errs = append(errs, fmt.Errorf("batch: max operations must be at least 1, got %d", c.Batch.MaxOps))
	}
	if c.Batch.Enabled && (c.Batch.Shards < 1 || c.Batch.Shards > 1024) {
		errs = append(errs, fmt.Errorf("batch: shards must be between 1 and 1024, got %d", c.Batch.Shards))
	}
	if c.MinDeadline < 0 {
		errs = append(errs, fmt.Errorf("min deadline must not be negative, got %s", c.MinDeadline))
	}
	if c.IdempotencyRing < 1 || c.IdempotencyRing > domain.MaxAppliedRing {
		errs = append(errs, fmt.Errorf("idempotency ring must be between 1 and %d mutation ids, got %d", domain.MaxAppliedRing, c.IdempotencyRing))
	}
	return errors.Join(errs...)
}

// DefaultHealthConfig returns the health monitor's defaults.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{Interval: 2 * time.Second, Timeout: time.Second}
}
