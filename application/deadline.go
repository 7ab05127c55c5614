package application

import (
	"context"
	"errors"
	"time"

	"github.com/sink-io/sink/domain"
)

// Deadlines. A request is refused at once when its deadline cannot be met
// (checkDeadline); a caller whose deadline passes while it waits in a
// combiner's queue leaves the queue and nothing of it is written
// (combiner.do, stoppedQueued); a synchronous caller in a batch of
// several callers (carried in another caller's, or leading one) leaves at
// its deadline without waiting for the batch, its writes reported with an
// unknown outcome (they may still be applied by the batch; see
// combiner.carry, combiner.lead and leftBatch).

// checkDeadline refuses a whole request, before any of its work, whose
// context has ended or whose deadline leaves less than Config.MinDeadline:
// it cannot be met, and work begun for it would only be cut off (a write
// cut off at storage has an unknown outcome). CodeDeadlineExceeded says
// that nothing was done.
func (s *Service) checkDeadline(ctx context.Context) *domain.Error {
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.Canceled) {
			return domain.Wrap(domain.CodeCanceled, err, "the request was canceled before any of its work; nothing was done")
		}
		return domain.Wrap(domain.CodeDeadlineExceeded, err, "the request's deadline had passed when it arrived; nothing was done")
	}
	d, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	if left := time.Until(d); left < s.cfg.MinDeadline {
		setting := ""
		if s.cfg.MinDeadlineSetting != "" {
			setting = " (" + s.cfg.MinDeadlineSetting + ")"
		}
		return domain.Errorf(domain.CodeDeadlineExceeded, "the request arrived with %s left before its deadline, less than the %s a request needs%s; nothing was done",
			max(left, 0).Round(time.Microsecond), s.cfg.MinDeadline, setting)
	}
	return nil
}

// stoppedCode is the code of a caller's operations that did not start
// because its context ended first (err is the context's error): nothing
// was done.
func stoppedCode(err error) domain.Code {
	if errors.Is(err, context.DeadlineExceeded) {
		return domain.CodeDeadlineExceeded
	}
	return domain.AsError(err).Code
}
