package auth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Watcher reloads an Authenticator's file while it runs: every interval
// and on SIGHUP (see Authenticator.Watch). Start and Stop fit
// fx.StartStopHook; a Watcher runs once (it cannot start again after Stop).
type Watcher struct {
	a        *Authenticator
	interval time.Duration

	mu      sync.Mutex
	started bool
	hup     chan os.Signal
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewWatcher returns a Watcher of a that checks the file every interval
// (which must be positive).
func NewWatcher(a *Authenticator, interval time.Duration) *Watcher {
	return &Watcher{a: a, interval: interval}
}

// Start starts watching; the context only bounds the start.
func (w *Watcher) Start(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("cannot start watching the authorization file: already started")
	}
	if w.interval <= 0 {
		return fmt.Errorf("cannot start watching the authorization file: the interval must be positive, got %s", w.interval)
	}
	w.started = true
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	w.hup = make(chan os.Signal, 1)
	signal.Notify(w.hup, syscall.SIGHUP)
	trigger := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.hup:
			}
			// Signals arriving during a reload are coalesced by hup's
			// buffer of one.
			select {
			case trigger <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		defer close(w.done)
		w.a.Watch(ctx, w.interval, trigger)
	}()
	return nil
}

// Stop stops watching and waits until a reload in progress has finished,
// or until ctx ends. Stopping a Watcher that has not started does nothing.
func (w *Watcher) Stop(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel == nil {
		return nil
	}
	signal.Stop(w.hup)
	w.cancel()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cannot stop watching the authorization file: %w", ctx.Err())
	}
}
