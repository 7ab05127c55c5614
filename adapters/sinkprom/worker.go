package sinkprom

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterWorker adds the queue worker's counters, read when scraped:
// sink_worker_offset_commit_failures_total and
// sink_worker_parked_mutations_total.
func (m *Metrics) RegisterWorker(commitFailures, parked func() int64) error {
	return errors.Join(
		m.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sink_worker_offset_commit_failures_total",
			Help: "Offset commits of the worker that failed after their retries (their mutations are read again; the records' applied marks skip them).",
		}, func() float64 { return float64(commitFailures()) })),
		m.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sink_worker_parked_mutations_total",
			Help: "Queued mutations the worker parked: still failing transiently when a batch's time budget (a third of SINK_KAFKA_REBALANCE_TIMEOUT) ended; they are read again after a pause.",
		}, func() float64 { return float64(parked()) })),
	)
}
