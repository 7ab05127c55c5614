package application

import (
	"math/rand/v2"
	"time"
)

// backoff returns the full-jitter sleep before retry number attempt (1-based).
func (p RetryPolicy) backoff(attempt int) time.Duration {
	if p.MaxBackoff <= 0 {
		return 0
	}
	ceiling := p.BaseBackoff
	for i := 1; i < attempt && ceiling < p.MaxBackoff; i++ {
		ceiling *= 2
	}
	if ceiling > p.MaxBackoff {
		ceiling = p.MaxBackoff
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}
