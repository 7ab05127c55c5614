// Package check collects the problems of a configuration so that its
// Validate method reports them all at once, in one wording across the
// adapters' configs (messages name the config's fields).
package check

import (
	"errors"
	"fmt"
	"time"
)

// Problems are the problems found so far.
type Problems []error

// Add records a problem.
func (p *Problems) Add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// Positive records a problem when v is not positive.
func (p *Problems) Positive(name string, v int) {
	if v <= 0 {
		p.Add("%s must be positive, got %d", name, v)
	}
}

// PositiveDuration records a problem when d is not positive.
func (p *Problems) PositiveDuration(name string, d time.Duration) {
	if d <= 0 {
		p.Add("%s must be positive, got %s", name, d)
	}
}

// NotNegative records a problem when d is negative.
func (p *Problems) NotNegative(name string, d time.Duration) {
	if d < 0 {
		p.Add("%s must not be negative, got %s", name, d)
	}
}

// Err returns every problem joined, nil without any.
func (p Problems) Err() error { return errors.Join(p...) }
