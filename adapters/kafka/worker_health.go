package kafka

// Counters returns the worker's counters by name, as /healthz reports
// them (see opshttp.Healthz).
func (w *Worker) Counters() map[string]int64 {
	s := w.Stats()
	return map[string]int64{
		"applied": s.Applied, "dead_lettered": s.DeadLettered, "batches": s.Batches,
		"skipped": s.Skipped, "parked": s.Parked, "commit_failures": s.CommitFailures,
	}
}
