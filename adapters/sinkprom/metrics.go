// Package sinkprom is the Prometheus metrics adapter: it implements the
// observers of package ports (and the gRPC adapter's RPCObserver) on a
// registry of its own — one per process, never the global default — and serves it in the
// Prometheus exposition format through client_golang's promhttp.
//
// Every metric is named sink_* and carries bounded labels only: store,
// namespace and dataset (capped, see Options.MaxDatasets; only operations
// that passed validation and authorization name theirs), operation kind,
// status, error code, completion mode, RPC method and code, merge profile,
// dead-letter reason, topic and partition. Record keys and documents never
// become labels.
package sinkprom

import (
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var (
	_ ports.StorageObserver    = (*Metrics)(nil)
	_ ports.MergeObserver      = (*Metrics)(nil)
	_ ports.OperationObserver  = (*Metrics)(nil)
	_ ports.QueueObserver      = (*Metrics)(nil)
	_ ports.LagObserver        = (*Metrics)(nil)
	_ ports.DeadLetterObserver = (*Metrics)(nil)
)

// Label values that stand for many client-chosen values.
const (
	// Other replaces namespace and dataset (and the store) once
	// Options.MaxDatasets distinct datasets have been seen, and dead-letter
	// reasons beyond the first MaxReasons.
	Other = "_other"
	// Invalid replaces names that cannot be label values: longer than
	// MaxLabelValueLength, not UTF-8, or with control characters.
	Invalid = "_invalid"
)

// DefaultMaxDatasets is the default cap of distinct datasets in labels.
const DefaultMaxDatasets = 100

// MaxLabelValueLength is the longest store, namespace or dataset name kept
// as a label value.
const MaxLabelValueLength = 120

// MaxReasons caps the distinct dead-letter reasons.
const MaxReasons = 32

// Options configure Metrics.
type Options struct {
	// Store is the name of the served store (label of the storage metrics).
	Store string
	// MaxDatasets caps the number of distinct store/namespace/dataset label
	// combinations (DefaultMaxDatasets when zero). Operations on further
	// datasets are counted under store, namespace and dataset "_other", and
	// sink_metrics_datasets_overflow_total counts them.
	MaxDatasets int
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options {
	var o Options
	o.setDefaults()
	return o
}

// setDefaults fills the unset fields with the defaults. New cannot fail,
// so a MaxDatasets below 1 gets the default too; Validate reports it.
func (o *Options) setDefaults() {
	if o.MaxDatasets <= 0 {
		o.MaxDatasets = DefaultMaxDatasets
	}
}

// Validate reports every problem of the options at once (messages name
// the fields).
func (o Options) Validate() error {
	if o.MaxDatasets <= 0 {
		return fmt.Errorf("MaxDatasets must be positive, got %d", o.MaxDatasets)
	}
	return nil
}

// Metrics holds Sink's metrics. It is safe for concurrent use.
type Metrics struct {
	reg   *prometheus.Registry
	store string

	rpcs        *prometheus.CounterVec
	rpcDuration *prometheus.HistogramVec

	operations *prometheus.CounterVec
	applied    *prometheus.CounterVec
	overflow   prometheus.Counter

	mergeConflicts *prometheus.CounterVec
	// fingerprintMismatches: see MergeFingerprintMismatch.
	fingerprintMismatches *prometheus.CounterVec

	storageDuration *prometheus.HistogramVec
	storageOps      *prometheus.CounterVec
	combined        *prometheus.HistogramVec
	// storageSeries: the three above for this store, per storage call
	// (resolved once: every operation reports them).
	storageSeries [ports.StorageWrite + 1]storageSeries

	publishDuration prometheus.Histogram
	published       prometheus.Counter

	lag          *prometheus.GaugeVec
	deadLettered *prometheus.CounterVec
	deduplicated *prometheus.CounterVec
	applyRetries prometheus.Counter
	applyBackoff prometheus.Counter

	ready        prometheus.Gauge
	dependencyUp *prometheus.GaugeVec

	datasets *limiter
	reasons  *limiter

	// Resolved series of the per-call metrics, so that the request path
	// does not hash label values on every call: at most maxCachedSeries
	// each (their labels are bounded classes and capped datasets; past
	// the bound, calls resolve the labels each time).
	rpcSeries seriesCache[rpcKey, rpcSeries]
	opSeries  seriesCache[opKey, opSeries]
}

// maxCachedSeries bounds each cache of resolved series.
const maxCachedSeries = 4096

type rpcKey struct {
	method string
	code   codes.Code
}

type rpcSeries struct {
	count prometheus.Counter
	dur   prometheus.Observer
}

type opKey struct {
	d domain.DatasetRef
	o ports.OperationOutcome // without its dataset
}

// opSeries is the counter of an opKey. own says that the key's dataset
// labels are the names of a dataset that has labels of its own (one the
// cap admitted, whose names are valid label values as they are): an
// operation on the dataset of that name may use the series without
// asking the cap (see Operations).
type opSeries struct {
	c   prometheus.Counter
	own bool
}

// storageSeries are the storage metrics of one kind of storage call.
type storageSeries struct {
	dur, combined prometheus.Observer
	ops           prometheus.Counter
}

// storage returns the series of call.
func (m *Metrics) storage(call ports.StorageCall) storageSeries {
	if int(call) < len(m.storageSeries) && m.storageSeries[call].dur != nil {
		return m.storageSeries[call]
	}
	c := call.String()
	return storageSeries{dur: m.storageDuration.WithLabelValues(m.store, c), combined: m.combined.WithLabelValues(m.store, c), ops: m.storageOps.WithLabelValues(m.store, c)}
}

// seriesCache holds resolved series by key for the request path. A
// lookup reads an immutable map, without a lock or a write to shared
// memory (so it costs the same on any number of processors, and hashes
// the key with its type's own function); adding a series, once per key
// and at most maxCachedSeries of them, publishes a copy of the map with
// it (so filling a cache copies about maxCachedSeries²/2 entries in all,
// once per process; the series a process sees are a few hundred).
type seriesCache[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex // held by writers
}

// load returns the series of key, if it is cached.
func (c *seriesCache[K, V]) load(key K) (V, bool) {
	if p := c.m.Load(); p != nil {
		v, ok := (*p)[key]
		return v, ok
	}
	var zero V
	return zero, false
}

// get returns the series of key, resolving it and (within the bound)
// caching it on a miss.
func (c *seriesCache[K, V]) get(key K, resolve func() V) V {
	if v, ok := c.load(key); ok {
		return v
	}
	v := resolve()
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int
	old := c.m.Load()
	if old != nil {
		if w, ok := (*old)[key]; ok {
			return w
		}
		n = len(*old)
	}
	if n >= maxCachedSeries {
		return v
	}
	next := make(map[K]V, n+1)
	if old != nil {
		maps.Copy(next, *old)
	}
	next[key] = v
	c.m.Store(&next)
	return v
}

// New returns the metrics of one process on a fresh registry, with the Go
// runtime and process collectors registered too.
func New(opts Options) *Metrics {
	opts.setDefaults()
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		reg:   prometheus.NewRegistry(),
		store: labelValue(opts.Store),

		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sink_grpc_requests_total",
			Help: "Finished gRPC requests (unary, and streams other than the health check's Watch) by full method name and gRPC status code.",
		}, []string{"method", "code"}),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sink_grpc_request_duration_seconds",
			Help:    "Latency of gRPC requests (unary: receipt to response; streams such as Scan: open to close), by full method name.",
			Buckets: latency,
		}, []string{"method"}),

		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sink_operations_total",
			Help: "Operations of Read, Write and Delete requests by dataset, kind (read, put, merge, delete), completion mode, status and error code (empty without error).",
		}, []string{"store", "namespace", "dataset", "kind", "completion", "status", "code"}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sink_worker_mutations_total",
			Help: "Queued mutations the worker finished, by dataset, kind, status (applied: newly applied; skipped: found already applied, a redelivery, nothing written; not_found; failed ...) and error code (empty without error).",
		}, []string{"store", "namespace", "dataset", "kind", "status", "code"}),
		overflow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sink_metrics_datasets_overflow_total",
			Help: "Operations counted under dataset \"_other\" because the cap of distinct datasets in labels (SINK_METRICS_MAX_DATASETS) was reached.",
		}),

		mergeConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sink_merge_conflicts_total",
			Help: "Merge compare-and-set attempts that met a concurrent change and were retried, by merge profile.",
		}, []string{"profile"}),
		fingerprintMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sink_merge_fingerprint_mismatches_total",
			Help: "Queued merges a worker met whose declarative profile had another definition (fingerprint) than when they were submitted, by profile and by what SINK_MERGE_FINGERPRINT_POLICY did (action: applied or dead_lettered).",
		}, []string{"profile", "action"}),

		storageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sink_storage_call_duration_seconds",
			Help:    "Latency of batch calls to storage, by call (read, write).",
			Buckets: latency,
		}, []string{"store", "call"}),
		storageOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sink_storage_operations_total",
			Help: "Operations sent to storage in batch calls, by call (read, write).",
		}, []string{"store", "call"}),
		combined: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sink_storage_batch_callers",
			Help:    "Callers (requests, or the worker's batches) whose operations went to storage together in one batch by natural batching, by call (read, write); 1 when a caller went alone.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}, []string{"store", "call"}),

		publishDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sink_queue_publish_duration_seconds",
			Help:    "Latency of submitting one batch of mutations to the durable queue, until every acknowledgement.",
			Buckets: latency,
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sink_queue_published_mutations_total",
			Help: "Mutations submitted to the durable queue (accepted or not).",
		}),

		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sink_worker_lag_records",
			Help: "Records of the mutation log after the worker's position, per owned partition.",
		}, []string{"topic", "partition"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sink_worker_dead_lettered_total",
			Help: "Queued mutations written to the dead-letter topic, by reason (error code, or UNDECODABLE).",
		}, []string{"reason"}),
		deduplicated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sink_mutations_deduplicated_total",
			Help: "Mutations not applied because their record's applied mark covered them, by source (worker: queued mutations; request: synchronous retries with the same idempotency key) and reason (duplicate: already applied, answered as applied; superseded: a later mutation of the record was applied first, dead-lettered).",
		}, []string{"source", "reason"}),
		applyRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sink_worker_apply_retries_total",
			Help: "Retries of queued mutations after transient failures.",
		}),
		applyBackoff: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sink_worker_apply_backoff_seconds_total",
			Help: "Time spent backing off between retries of queued mutations.",
		}),

		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sink_ready",
			Help: "1 when the process is ready (every dependency answers and it is not shutting down), else 0.",
		}),
		dependencyUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sink_dependency_up",
			Help: "1 when the dependency (storage, kafka) answered its last health check, else 0.",
		}, []string{"dependency"}),

		datasets: newLimiter(opts.MaxDatasets),
		reasons:  newLimiter(MaxReasons),
	}
	for _, call := range []ports.StorageCall{ports.StorageRead, ports.StorageWrite} {
		m.storageSeries[call] = m.storage(call)
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.rpcs, m.rpcDuration, m.operations, m.applied, m.overflow, m.mergeConflicts, m.fingerprintMismatches,
		m.storageDuration, m.storageOps, m.combined, m.publishDuration, m.published,
		m.lag, m.deadLettered, m.deduplicated, m.applyRetries, m.applyBackoff, m.ready, m.dependencyUp,
	)
	return m
}

// Registry returns the process's registry (to register more collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// RPC records one finished unary RPC (it implements the gRPC adapter's
// RPCObserver). The code label is the gRPC code name, e.g. "OK",
// "InvalidArgument".
func (m *Metrics) RPC(method string, code codes.Code, d time.Duration) {
	r := m.rpcSeries.get(rpcKey{method, code}, func() rpcSeries {
		l := labelValue(method)
		return rpcSeries{m.rpcs.WithLabelValues(l, code.String()), m.rpcDuration.WithLabelValues(l)}
	})
	r.count.Inc()
	r.dur.Observe(d.Seconds())
}

// StorageCall implements ports.StorageObserver.
func (m *Metrics) StorageCall(call ports.StorageCall, n int, d time.Duration) {
	ss := m.storage(call)
	ss.dur.Observe(d.Seconds())
	ss.ops.Add(float64(n))
}

// Combined implements ports.StorageObserver.
func (m *Metrics) Combined(call ports.StorageCall, callers int) {
	m.storage(call).combined.Observe(float64(callers))
}

// QueuePublish implements ports.QueueObserver.
func (m *Metrics) QueuePublish(n int, d time.Duration) {
	m.publishDuration.Observe(d.Seconds())
	m.published.Add(float64(n))
}

// MergeConflict implements ports.MergeObserver. Profiles are registered at
// start-up, so their names are bounded.
func (m *Metrics) MergeConflict(profile string) {
	m.mergeConflicts.WithLabelValues(labelValue(profile)).Inc()
}

// MergeFingerprintMismatch implements ports.MergeObserver.
func (m *Metrics) MergeFingerprintMismatch(profile string, applied bool) {
	action := "dead_lettered"
	if applied {
		action = "applied"
	}
	m.fingerprintMismatches.WithLabelValues(labelValue(profile), action).Inc()
}

// ApplyRetry implements ports.QueueObserver.
func (m *Metrics) ApplyRetry(backoff time.Duration) {
	m.applyRetries.Inc()
	m.applyBackoff.Add(backoff.Seconds())
}

// Operations implements ports.OperationObserver. Equal outcomes are added up first
// (runs of equal outcomes are cheap to detect), so a large request costs one
// update per distinct label set. Datasets are admitted to labels in the
// order they are first seen.
func (m *Metrics) Operations(outcomes []ports.OperationOutcome) {
	type group struct {
		o ports.OperationOutcome
		n int
	}
	var groups []group
	if len(outcomes) == 1 {
		groups = []group{{outcomes[0], 1}}
	}
	var index map[ports.OperationOutcome]int
	if len(outcomes) > 1 {
		index = map[ports.OperationOutcome]int{}
	}
	for i := 0; len(outcomes) > 1 && i < len(outcomes); {
		j := i + 1
		for j < len(outcomes) && outcomes[j] == outcomes[i] {
			j++
		}
		if g, ok := index[outcomes[i]]; ok {
			groups[g].n += j - i
		} else {
			index[outcomes[i]] = len(groups)
			groups = append(groups, group{outcomes[i], j - i})
		}
		i = j
	}
	overflow := 0
	for _, g := range groups {
		c, own := m.opCounter(g.o)
		if !own {
			overflow += g.n
		}
		c.Add(float64(g.n))
	}
	if overflow > 0 {
		m.overflow.Add(float64(overflow))
	}
}

// opCounter returns the counter of an outcome and whether its dataset has
// labels of its own (false: it is counted under Other). The outcome's
// dataset names are valid, so they are usually their own labels: a series
// cached under them that says so (opSeries.own) is the outcome's, and
// the cap is asked only when there is none.
func (m *Metrics) opCounter(o ports.OperationOutcome) (prometheus.Counter, bool) {
	key := opKey{o.Dataset, o}
	key.o.Dataset = domain.DatasetRef{}
	if s, ok := m.opSeries.load(key); ok && s.own {
		return s.c, true
	}
	d, ok := m.datasetLabels(o.Dataset)
	key.d = d
	s := m.opSeries.get(key, func() opSeries {
		var c prometheus.Counter
		if o.Source == ports.SourceWorker {
			c = m.applied.WithLabelValues(d.Store, d.Namespace, d.Dataset, o.Kind.String(), o.Status.String(), o.CodeLabel())
		} else {
			c = m.operations.WithLabelValues(d.Store, d.Namespace, d.Dataset, o.Kind.String(), o.Completion.String(), o.Status.String(), o.CodeLabel())
		}
		return opSeries{c: c, own: ok && d == o.Dataset}
	})
	return s.c, ok
}

// datasetLabels returns the store, namespace and dataset labels of an
// outcome and whether it has labels of its own. Operations rejected before
// validation and authorization passed (zero DatasetRef) are counted under
// the served store with empty namespace and dataset and take no slot of
// the cap: their names are whatever the client sent.
func (m *Metrics) datasetLabels(d domain.DatasetRef) (domain.DatasetRef, bool) {
	if d == (domain.DatasetRef{}) {
		return domain.DatasetRef{Store: m.store}, true
	}
	return m.datasets.dataset(d)
}

// WorkerLag implements ports.LagObserver.
func (m *Metrics) WorkerLag(topic string, partition int32, lag int64) {
	p := strconv.FormatInt(int64(partition), 10)
	topic = labelValue(topic)
	if lag < 0 {
		m.lag.DeleteLabelValues(topic, p)
		return
	}
	m.lag.WithLabelValues(topic, p).Set(float64(lag))
}

// DeadLettered implements ports.DeadLetterObserver.
func (m *Metrics) DeadLettered(reason ports.DeadLetterReason, n int) {
	m.deadLettered.WithLabelValues(m.reasons.value(reason.String())).Add(float64(n))
}

// Deduplicated implements ports.OperationObserver.
func (m *Metrics) Deduplicated(source ports.OperationSource, coverage domain.Coverage, n int) {
	reason := "duplicate"
	if coverage == domain.Superseded {
		reason = "superseded"
	}
	m.deduplicated.WithLabelValues(source.String(), reason).Add(float64(n))
}

// SetReady records the readiness of the process.
func (m *Metrics) SetReady(ready bool) { m.ready.Set(boolValue(ready)) }

// SetDependencyUp records the last health check of a dependency.
func (m *Metrics) SetDependencyUp(name string, up bool) {
	m.dependencyUp.WithLabelValues(labelValue(name)).Set(boolValue(up))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// labelValue returns s, or Invalid when s cannot be a label value.
func labelValue(s string) string {
	if len(s) > MaxLabelValueLength || !utf8.ValidString(s) {
		return Invalid
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return Invalid
		}
	}
	return s
}

// limiter admits the first max distinct values; later ones become Other.
type limiter struct {
	max  int
	mu   sync.RWMutex
	seen map[string]struct{}
	refs map[domain.DatasetRef]struct{}
}

func newLimiter(max int) *limiter {
	return &limiter{max: max, seen: map[string]struct{}{}, refs: map[domain.DatasetRef]struct{}{}}
}

// dataset returns the labels of d and whether d has labels of its own.
func (l *limiter) dataset(d domain.DatasetRef) (domain.DatasetRef, bool) {
	v := domain.DatasetRef{Store: labelValue(d.Store), Namespace: labelValue(d.Namespace), Dataset: labelValue(d.Dataset)}
	l.mu.RLock()
	_, ok := l.refs[v]
	l.mu.RUnlock()
	if ok {
		return v, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.refs[v]; ok {
		return v, true
	}
	if len(l.refs) >= l.max {
		return domain.DatasetRef{Store: Other, Namespace: Other, Dataset: Other}, false
	}
	l.refs[v] = struct{}{}
	return v, true
}

// value returns s while fewer than max distinct values were seen, else Other.
func (l *limiter) value(s string) string {
	l.mu.RLock()
	_, ok := l.seen[s]
	l.mu.RUnlock()
	if ok {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[s]; ok {
		return s
	}
	if len(l.seen) >= l.max {
		return Other
	}
	l.seen[s] = struct{}{}
	return s
}
