package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/kafka"
	sinkprom "github.com/sink-io/sink/adapters/prometheus"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/ports"
)

// kafkaClientConfig returns the settings of the process's one Kafka client:
// a consumer group member in worker and all modes, a producer only in
// server mode. TLS and SASL come from KafkaSecurityOpts.
func kafkaClientConfig(cfg Config, log *slog.Logger) (kafka.ClientConfig, error) {
	sec, err := KafkaSecurityOpts(cfg.Kafka.Security)
	if err != nil {
		return kafka.ClientConfig{}, err
	}
	cc := kafka.ClientConfig{
		ExtraOpts:      sec,
		Brokers:        cfg.Kafka.Brokers,
		ClientID:       "sink-" + cfg.Mode,
		PublishTimeout: cfg.Kafka.PublishTimeout,
		// A record carries one document or intent plus its address.
		MaxRecordBytes: cfg.MaxDocumentBytes + 64<<10,
		Logger:         log,
	}
	if cfg.Mode == ModeWorker || cfg.Mode == ModeAll {
		cc.GroupID = cfg.Kafka.GroupID
		cc.Topic = cfg.Kafka.Topic
		cc.SessionTimeout = cfg.Kafka.SessionTimeout
		cc.RebalanceTimeout = cfg.Kafka.RebalanceTimeout
	}
	return cc, nil
}

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
			func(lc fx.Lifecycle, cfg Config, log *slog.Logger, obs ports.Observer, fence *kafka.Fence) (*kgo.Client, error) {
				cc, err := kafkaClientConfig(cfg, log)
				if err != nil {
					return nil, err
				}
				if cc.GroupID != "" {
					// Feed the fence, and withdraw the lag metric of partitions this worker no longer owns (observability.go).
					cc.ExtraOpts = append(cc.ExtraOpts, fence.Opts(func(t string, p int32) { obs.WorkerLag(t, p, -1) })...)
				}
				cl, err := kafka.NewClient(cc)
				if err != nil {
					return nil, err
				}
				lc.Append(fx.Hook{
					OnStart: func(ctx context.Context) error {
						pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
						defer cancel()
						if err := cl.Ping(pctx); err != nil {
							log.Warn("Kafka is not reachable yet; asynchronous writes fail with UNAVAILABLE and workers wait until it is",
								"brokers", cfg.Kafka.Brokers, "error", err)
						}
						return nil
					},
					OnStop: func(ctx context.Context) error {
						done := make(chan struct{})
						go func() {
							cl.Close() // leaves the consumer group
							close(done)
						}()
						select {
						case <-done:
							return nil
						case <-ctx.Done():
							return fmt.Errorf("cannot close the Kafka client before the shutdown timeout: %w", ctx.Err())
						}
					},
				})
				return cl, nil
			},
			func(cl *kgo.Client) *kafka.Publisher { return kafka.NewPublisher(cl) },
			func(cfg Config, pub *kafka.Publisher) (ports.MutationQueue, error) {
				return kafka.NewQueue(pub, kafka.QueueConfig{Topic: cfg.Kafka.Topic, PublishTimeout: cfg.Kafka.PublishTimeout})
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
		fx.Decorate(func(cfg Config, _ ports.MutationQueue) (ports.MutationQueue, error) {
			return kafka.NewQueue(pub, kafka.QueueConfig{Topic: cfg.Kafka.Topic, PublishTimeout: cfg.Kafka.PublishTimeout})
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
			func(cfg Config, log *slog.Logger, cl *kgo.Client, pub *kafka.Publisher, obs ports.Observer, fence *kafka.Fence) (WorkerTransport, error) {
				sub, err := kafka.NewSubscriber(cl, kafka.SubscriberConfig{
					Topic:          cfg.Kafka.Topic,
					MaxPollRecords: cfg.Kafka.MaxPollRecords,
					CloseTimeout:   cfg.ShutdownTimeout,
					CommitTimeout:  min(10*time.Second, cfg.Kafka.BatchBudget()/2),
					LogEpoch:       cfg.Kafka.LogEpoch,
					Fence:          fence,
					Logger:         log,
					Observer:       obs,
				})
				if err != nil {
					return WorkerTransport{}, err
				}
				return WorkerTransport{Subscriber: sub, DeadLetters: pub}, nil
			},
			func(cfg Config, log *slog.Logger, tr WorkerTransport, svc *application.Service, obs ports.Observer) (*kafka.Worker, error) {
				return kafka.NewWorker(tr.Subscriber, tr.DeadLetters, svc, kafka.WorkerConfig{
					Topic:           cfg.Kafka.Topic,
					DeadLetterTopic: cfg.Kafka.DeadLetter(),
					MaxBatch:        cfg.Kafka.MaxPollRecords,
					Logger:          log,
					Observer:        obs,
					BatchTimeout:    cfg.Kafka.BatchBudget(),
					// R/6, like the commit: with R/3 for applying, a batch
					// ends well within the rebalance timeout.
					DeadLetterTimeout: cfg.Kafka.BatchBudget() / 2,
					MaxAttempts:       cfg.Kafka.ApplyMaxAttempts,
				})
			},
		),
		fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner, log *slog.Logger, w *kafka.Worker) {
			var stopping sync.Mutex
			stopped := false
			lc.Append(fx.Hook{
				OnStart: func(context.Context) error {
					if err := w.Start(); err != nil {
						return err
					}
					go func() {
						<-w.Done()
						stopping.Lock()
						defer stopping.Unlock()
						if !stopped {
							log.Error("the worker stopped unexpectedly; shutting down")
							_ = sd.Shutdown(fx.ExitCode(1))
						}
					}()
					return nil
				},
				OnStop: func(ctx context.Context) error {
					stopping.Lock()
					stopped = true
					stopping.Unlock()
					if err := w.Stop(ctx); err != nil {
						return fmt.Errorf("cannot stop the worker cleanly: %w", err)
					}
					return nil
				},
			})
		}),
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
		fx.Invoke(func(m *sinkprom.Metrics, c *kafka.Worker) error {
			return errors.Join(
				m.Registry().Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
					Name: "sink_worker_offset_commit_failures_total",
					Help: "Offset commits of the worker that failed after their retries (their mutations are read again; the records' applied marks skip them).",
				}, func() float64 { return float64(c.Stats().CommitFailures) })),
				m.Registry().Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
					Name: "sink_worker_parked_mutations_total",
					Help: "Queued mutations the worker parked: still failing transiently when a batch's time budget (a third of SINK_KAFKA_REBALANCE_TIMEOUT) ended; they are read again after a pause.",
				}, func() float64 { return float64(c.Stats().Parked) })),
			)
		}),
		HTTPRoutes(func(c *kafka.Worker, st ports.Storage) HTTPRoute {
			return HTTPRoute{Pattern: "GET /healthz", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := map[string]any{"status": "SERVING", "worker": "running", "storage": "ok"}
				code := http.StatusOK
				if !c.Running() {
					body["worker"], body["status"], code = "stopped", "NOT_SERVING", http.StatusServiceUnavailable
				} else if err := c.Health(); err != nil {
					body["worker"], body["status"], code = err.Error(), "NOT_SERVING", http.StatusServiceUnavailable
				}
				ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
				defer cancel()
				if err := st.Ping(ctx); err != nil {
					body["storage"], body["status"], code = err.Error(), "NOT_SERVING", http.StatusServiceUnavailable
				}
				s := c.Stats()
				body["applied"], body["dead_lettered"], body["batches"] = s.Applied, s.DeadLettered, s.Batches
				body["skipped"], body["parked"], body["commit_failures"] = s.Skipped, s.Parked, s.CommitFailures
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				_ = json.NewEncoder(w).Encode(body)
			})}
		}),
	)
}
