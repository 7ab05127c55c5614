package sinkgrpc

import (
	"testing"
	"time"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// The idle collector collects once when requests stop for a period, not
// while they keep coming, and not again until requests come back.
func TestIdleCollectorCollectsOnceWhenRequestsStop(t *testing.T) {
	// The period is long against the gaps between requests (a few ms), so
	// that a busy machine's scheduling delays do not look like idleness.
	const period = 200 * time.Millisecond
	collected := make(chan time.Time, 10)
	c := &idleCollector{period: period, collect: func() { collected <- time.Now() }}
	await := func(what string) time.Time {
		t.Helper()
		select {
		case at := <-collected:
			return at
		case <-time.After(5 * time.Second): // a failure guard
			t.Fatalf("no collection %s", what)
			return time.Time{}
		}
	}
	none := func(what string) {
		t.Helper()
		// Absence cannot be awaited: watch several periods.
		select {
		case <-collected:
			t.Fatalf("a collection %s", what)
		case <-time.After(3 * period):
		}
	}

	none("before any request")

	// Requests for 5 periods: no collection while they come.
	stop := time.Now().Add(5 * period)
	for time.Now().Before(stop) {
		c.request()
		select {
		case <-collected:
			t.Fatal("a collection while requests keep coming")
		case <-time.After(2 * time.Millisecond):
		}
	}
	last := time.Now()
	at := await("after the requests stopped")
	if at.Sub(last) < period {
		t.Fatalf("collected %s after the last request, before a whole idle period (%s)", at.Sub(last), period)
	}
	none("a second time without new requests")

	// One more request: one more collection.
	c.request()
	await("after the server went idle again")
	none("twice for one request")
}

// The server counts every Sink RPC for the idle collector.
func TestTrackNotesRequestsForTheIdleCollector(t *testing.T) {
	c := NewConnections(nil)
	c.idle.period = time.Hour // no check runs during the test
	api := c.Track(sinkv1.UnimplementedSinkServer{}).(*trackedAPI)
	_, _ = api.Read(t.Context(), nil)
	_, _ = api.Write(t.Context(), nil)
	_, _ = api.Delete(t.Context(), nil)
	if got := c.idle.requests.Load(); got != 3 {
		t.Fatalf("the idle collector saw %d requests, want 3", got)
	}
}
