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

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/kafka"
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
			func(lc fx.Lifecycle, cfg Config, log *slog.Logger, obs ports.Observer) (*kgo.Client, error) {
				cc, err := kafkaClientConfig(cfg, log)
				if err != nil {
					return nil, err
				}
				if cc.GroupID != "" {
					// Withdraw the lag metric of partitions this worker no longer owns (observability.go).
					cc.ExtraOpts = append(cc.ExtraOpts, kafka.PartitionsGone(func(t string, p int32) { obs.WorkerLag(t, p, -1) })...)
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

// WorkerModule runs the worker: the batch consumer of the mutation log,
// applying mutations through the application service (the same execution
// path as WAIT_UNTIL_APPLIED) and dead-lettering permanent failures. On stop
// it finishes the current batch within the shutdown timeout, commits what
// finished, and the Kafka client then leaves the group.
func WorkerModule() fx.Option {
	return fx.Module("worker",
		fx.Provide(func(cfg Config, log *slog.Logger, cl *kgo.Client, pub *kafka.Publisher, svc *application.Service, obs ports.Observer) (*kafka.Consumer, error) {
			return kafka.NewConsumer(cl, pub, svc, kafka.ConsumerConfig{
				Topic:           cfg.Kafka.Topic,
				DeadLetterTopic: cfg.Kafka.DeadLetter(),
				MaxPollRecords:  cfg.Kafka.MaxPollRecords,
				Logger:          log,
				Observer:        obs,
			})
		}),
		fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner, log *slog.Logger, c *kafka.Consumer) {
			var stopping sync.Mutex
			stopped := false
			lc.Append(fx.Hook{
				OnStart: func(context.Context) error {
					if err := c.Start(); err != nil {
						return err
					}
					go func() {
						<-c.Done()
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
					if err := c.Stop(ctx); err != nil {
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
// listener: readiness (/readyz) requires the consume loop to run, and
// GET /healthz answers 200 while the consume loop runs and storage answers
// a ping within 2 s, 503 otherwise, with a small JSON body.
func WorkerHealthModule() fx.Option {
	return fx.Module("worker-health",
		HealthCheck("worker", func(c *kafka.Consumer) ports.HealthChecker {
			return ports.HealthCheckFunc(func(context.Context) error {
				if !c.Running() {
					return errors.New("the consume loop is not running")
				}
				return nil
			})
		}),
		HTTPRoutes(func(c *kafka.Consumer, st ports.Storage) HTTPRoute {
			return HTTPRoute{Pattern: "GET /healthz", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := map[string]any{"status": "SERVING", "worker": "running", "storage": "ok"}
				code := http.StatusOK
				if !c.Running() {
					body["worker"], body["status"], code = "stopped", "NOT_SERVING", http.StatusServiceUnavailable
				}
				ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
				defer cancel()
				if err := st.Ping(ctx); err != nil {
					body["storage"], body["status"], code = err.Error(), "NOT_SERVING", http.StatusServiceUnavailable
				}
				s := c.Stats()
				body["applied"], body["dead_lettered"], body["batches"] = s.Applied, s.DeadLettered, s.Batches
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				_ = json.NewEncoder(w).Encode(body)
			})}
		}),
	)
}
