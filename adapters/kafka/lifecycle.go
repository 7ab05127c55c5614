package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// StartPingTimeout bounds ClientLifecycle.Start's check of the brokers.
const StartPingTimeout = 5 * time.Second

// ClientLifecycle starts and stops a process's client with the process.
type ClientLifecycle struct {
	Client *kgo.Client
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Start checks within StartPingTimeout that a broker answers. Brokers that
// do not answer yet are only a warning: asynchronous writes fail with
// UNAVAILABLE and workers wait until they answer.
func (l ClientLifecycle) Start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, StartPingTimeout)
	defer cancel()
	if err := l.Client.Ping(ctx); err != nil {
		log := l.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("Kafka is not reachable yet; asynchronous writes fail with UNAVAILABLE and workers wait until it is",
			"brokers", l.Client.OptValue(kgo.SeedBrokers), "error", err)
	}
	return nil
}

// Stop closes the client (a group member leaves its group) unless ctx ends
// first.
func (l ClientLifecycle) Stop(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		l.Client.Close()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cannot close the Kafka client before the shutdown timeout: %w", ctx.Err())
	}
}
