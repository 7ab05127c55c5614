package bootstrap

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/adapters/opshttp"
	"github.com/sink-io/sink/adapters/sinkprom"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/ports"
)

// KafkaModule provides the process's one Kafka client (*kgo.Client, shared
// by producing and consuming), the Watermill publisher over it
// (*kafka.Publisher) and the mutation queue (ports.MutationQueue), which
// enables RETURN_AFTER_ACCEPTED. The client is closed on stop, after
// everything that uses it has stopped.
func KafkaModule() fx.Option {
	return fx.Module("kafka",
		// Readiness requires the brokers to answer (observability.go).
		HealthCheck("kafka", func(cl *kgo.Client) ports.HealthChecker { return ports.HealthCheckFunc(cl.Ping) }),
		fx.Provide(
			// The partitions the worker gives up in rebalances: its poll in
			// flight stops and is not committed for them.
			kafka.NewFence,
			func(lc fx.Lifecycle, cfg Config, log *slog.Logger, obs ports.LagObserver, fence *kafka.Fence, m *sinkprom.Metrics) (*kgo.Client, error) {
				// A group member in worker and all modes, a producer only in server mode.
				cc := cfg.KafkaClient()
				cc.Logger = log
				cc.ExtraOpts = append(cc.ExtraOpts, kafka.ClientMetrics(m.Registry())) // sink_kafka_* metrics
				if cc.GroupID != "" {
					// Feed the fence, and withdraw the lag metric of partitions this worker no longer owns (observability.go).
					cc.ExtraOpts = append(cc.ExtraOpts, fence.Opts(func(t string, p int32) { obs.WorkerLag(t, p, -1) })...)
				}
				cl, err := kafka.NewClient(cc)
				if err != nil {
					return nil, err
				}
				// Start warns when no broker answers; Stop leaves the group.
				life := kafka.ClientLifecycle{Client: cl, Logger: log}
				lc.Append(fx.StartStopHook(life.Start, life.Stop))
				return cl, nil
			},
			func(cl *kgo.Client) *kafka.Publisher { return kafka.NewPublisher(cl) },
			func(cfg Config, pub *kafka.Publisher, tp trace.TracerProvider) (ports.MutationQueue, error) {
				qc := cfg.Queue()
				qc.TracerProvider = tp
				return kafka.NewQueue(pub, qc)
			},
		),
	)
}

// WorkerTransport is the Watermill Pub/Sub of the worker: the subscriber
// of the mutation log (SINK_KAFKA_TOPIC) and the publisher of its dead
// letters (SINK_KAFKA_DEAD_LETTER_TOPIC). WorkerModule provides the Kafka
// one (kafka.Subscriber on the process's client); QueuePubSub replaces it.
type WorkerTransport struct {
	Subscriber  message.Subscriber
	DeadLetters message.Publisher
}

// QueuePubSub replaces the Kafka transport of the mutation queue and of
// the worker with another Watermill Pub/Sub (for example Watermill's
// in-memory GoChannel in tests): the queue publishes to pub, the worker
// subscribes to sub and writes dead letters to deadLetters. The Kafka
// client is still created from the configuration but carries no
// mutations. The worker applies a message without Kafka batch metadata on
// its own, so the Pub/Sub must deliver one record's messages in order and
// one at a time (GoChannel does with BlockPublishUntilSubscriberAck).
func QueuePubSub(pub message.Publisher, sub message.Subscriber, deadLetters message.Publisher) fx.Option {
	return fx.Options(
		fx.Decorate(func(cfg Config, _ ports.MutationQueue, tp trace.TracerProvider) (ports.MutationQueue, error) {
			qc := cfg.Queue()
			qc.TracerProvider = tp
			return kafka.NewQueue(pub, qc)
		}),
		fx.Decorate(func(WorkerTransport) WorkerTransport {
			return WorkerTransport{Subscriber: sub, DeadLetters: deadLetters}
		}),
	)
}

// WorkerModule runs the worker: a Watermill Router (kafka.Worker) whose
// handler applies the mutation log through the application service (the
// same execution path as WAIT_UNTIL_APPLIED) in batches of up to
// SINK_KAFKA_MAX_POLL_RECORDS and dead-letters permanent failures. On stop
// it finishes the batch in flight within the shutdown timeout, commits what
// finished, and the Kafka client then leaves the group.
//
// A batch is bounded in time well below SINK_KAFKA_REBALANCE_TIMEOUT (R):
// applying gets R/3 (a mutation still failing then is parked with its
// record's later mutations and delivered again later, while the other
// records flow), writing its dead letters R/6 and committing its offsets
// R/6, so a worker finishes its batch before the group would expel it. Mutations
// carry their log position (the topic id or SINK_KAFKA_LOG_EPOCH,
// partition, offset), which the records' applied marks compare.
func WorkerModule() fx.Option {
	return fx.Module("worker",
		fx.Provide(
			func(cfg Config, log *slog.Logger, cl *kgo.Client, pub *kafka.Publisher, obs ports.LagObserver, fence *kafka.Fence) (WorkerTransport, error) {
				sc := cfg.Subscriber()
				sc.Fence, sc.Logger, sc.Observer = fence, log, obs
				sub, err := kafka.NewSubscriber(cl, sc)
				if err != nil {
					return WorkerTransport{}, err
				}
				return WorkerTransport{Subscriber: sub, DeadLetters: pub}, nil
			},
			func(cfg Config, log *slog.Logger, tr WorkerTransport, svc *application.Service, obs ports.DeadLetterObserver, tp trace.TracerProvider, sd fx.Shutdowner) (*kafka.Worker, error) {
				wc := cfg.Worker()
				wc.Logger, wc.Observer, wc.TracerProvider = log, obs, tp
				wc.OnUnexpectedStop = func(error) { _ = sd.Shutdown(fx.ExitCode(1)) }
				return kafka.NewWorker(tr.Subscriber, tr.DeadLetters, svc, wc)
			},
		),
		// The worker starts and stops with the app; a worker that dies
		// shuts the process down (WorkerConfig.OnUnexpectedStop, above).
		fx.Invoke(func(lc fx.Lifecycle, w *kafka.Worker) { lc.Append(fx.StartStopHook(w.Start, w.Stop)) }),
	)
}

// WorkerHealthModule adds the worker's health to the HTTP operations
// endpoint (SINK_HTTP_ADDRESS, observability.go), the worker role's only
// listener: readiness (/readyz) requires the worker's router to run and
// its last offset commit to have succeeded, and GET /healthz answers 200
// while the router runs, the last commit succeeded and storage answers a
// ping within 2 s, 503 otherwise, with a small JSON body. The worker's
// counters are metrics too: sink_worker_offset_commit_failures_total and
// sink_worker_parked_mutations_total.
func WorkerHealthModule() fx.Option {
	return fx.Module("worker-health",
		HealthCheck("worker", func(c *kafka.Worker) ports.HealthChecker {
			return ports.HealthCheckFunc(func(context.Context) error { return c.Health() })
		}),
		fx.Invoke(func(m *sinkprom.Metrics, w *kafka.Worker) error {
			return m.RegisterWorker(func() int64 { return w.Stats().CommitFailures }, func() int64 { return w.Stats().Parked })
		}),
		HTTPRoutes(func(w *kafka.Worker, st ports.Storage) HTTPRoute {
			return opshttp.Healthz(w, ports.HealthCheckFunc(st.Ping))
		}),
	)
}
