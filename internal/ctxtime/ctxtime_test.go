package ctxtime

import (
	"context"
	"testing"
	"time"
)

func TestSleepWaitsTheFullTime(t *testing.T) {
	start := time.Now()
	if !Sleep(context.Background(), 20*time.Millisecond) {
		t.Fatal("Sleep on a live context reported an early end")
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("Sleep returned after %s, want at least 20ms", waited)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case full := <-done:
		if full {
			t.Fatal("Sleep reported the full time after its context ended")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep did not return when its context ended")
	}
}

func TestSleepWithoutDuration(t *testing.T) {
	if !Sleep(context.Background(), 0) {
		t.Fatal("Sleep(0) on a live context = false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 { // a ready timer must never win over an ended context
		if Sleep(ctx, 0) || Sleep(ctx, -time.Second) {
			t.Fatal("Sleep(<=0) on an ended context = true, want false")
		}
	}
}
