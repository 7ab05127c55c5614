package sinkgrpc

import (
	"strings"
	"testing"
	"time"
)

func TestLimitsDefaults(t *testing.T) {
	d := DefaultLimits()
	if err := d.Validate(); err != nil {
		t.Fatalf("default limits invalid: %v", err)
	}
	want := Limits{MaxConcurrentStreams: 100, MaxConnectionIdle: 5 * time.Minute, MaxConnectionAge: 30 * time.Minute,
		MaxConnectionAgeGrace: time.Minute, KeepaliveMinTime: 10 * time.Second, HandshakeTimeout: 10 * time.Second, MaxHealthWatchers: 1000,
		MaxInFlightOperations: DefaultMaxInFlightOperations}
	if d != want {
		t.Fatalf("DefaultLimits() = %+v, want %+v", d, want)
	}
	// Zero fields get the defaults; set ones are kept.
	l := Limits{MaxConnectionAge: time.Hour}
	l.setDefaults()
	want.MaxConnectionAge = time.Hour
	if l != want {
		t.Fatalf("defaulted %+v, want %+v", l, want)
	}
	if got := len(Limits{}.ServerOptions()); got != 4 {
		t.Fatalf("%d server options, want 4", got)
	}
}

func TestLimitsNever(t *testing.T) {
	l := DefaultLimits()
	l.MaxConnectionIdle, l.MaxConnectionAgeGrace = Never, Never
	if err := l.Validate(); err != nil {
		t.Fatalf("Never rejected: %v", err)
	}
	kp := l.keepaliveParams()
	if kp.MaxConnectionIdle != Never || kp.MaxConnectionAgeGrace != Never || kp.MaxConnectionAge != 30*time.Minute {
		t.Fatalf("keepalive parameters %+v", kp)
	}
}

func TestLimitsValidateReportsEveryProblem(t *testing.T) {
	err := Limits{MaxConcurrentStreams: -1, MaxConnectionIdle: -time.Second, MaxConnectionAge: time.Minute, MaxConnectionAgeGrace: time.Second,
		KeepaliveMinTime: 0, HandshakeTimeout: -5 * time.Second, MaxHealthWatchers: 0, MaxInFlightOperations: -1}.Validate()
	if err == nil {
		t.Fatal("invalid limits accepted")
	}
	for _, want := range []string{
		"MaxConcurrentStreams must be positive, got -1",
		"MaxHealthWatchers must be positive, got 0",
		"MaxInFlightOperations must be positive, got -1",
		"MaxConnectionIdle must be positive, got -1s",
		"KeepaliveMinTime must be positive, got 0s",
		"HandshakeTimeout must be positive, got -5s",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "MaxConnectionAge ") {
		t.Errorf("a valid field reported:\n%v", err)
	}
}
