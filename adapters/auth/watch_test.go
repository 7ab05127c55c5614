//go:build unix

package auth

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sink-io/sink/ports"
)

func TestWatcherReloadsOnIntervalAndSIGHUP(t *testing.T) {
	for _, c := range []struct {
		name     string
		interval time.Duration
		nudge    func(t *testing.T)
	}{
		{"interval", 10 * time.Millisecond, func(*testing.T) {}},
		{"SIGHUP", time.Hour, func(t *testing.T) {
			if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "auth.json")
			writeFile(t, path, fileFor(map[string]string{"old": "token-old"}))
			logs := newLogRecorder()
			a, err := Load(path, slog.New(logs))
			if err != nil {
				t.Fatal(err)
			}
			logs.wait(t, "loaded the authorization file")
			w := NewWatcher(a, c.interval)
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := w.Start(context.Background()); err == nil {
				t.Error("a second Start was accepted")
			}
			writeFile(t, path, fileFor(map[string]string{"new": "token-new"}))
			c.nudge(t)
			logs.wait(t, "loaded the authorization file")
			if p, err := a.Authenticate(context.Background(), ports.Credentials{BearerToken: "token-new"}); err != nil || p.Name != "new" {
				t.Fatalf("new token: %v %v", p, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.Stop(ctx); err != nil {
				t.Fatalf("Stop: %v", err)
			}
		})
	}
}

func TestWatcherStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	writeFile(t, path, fileFor(map[string]string{"a": "token-a"}))
	a, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := NewWatcher(a, time.Second).Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := NewWatcher(a, 0).Start(context.Background()); err == nil {
		t.Fatal("a zero interval was accepted")
	}
	w := NewWatcher(a, time.Hour)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("a second Stop: %v", err)
	}
	// Stop waits for the watcher to end.
	select {
	case <-w.done:
	default:
		t.Fatal("Stop returned before the watcher ended")
	}
}
