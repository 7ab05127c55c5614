package sinkgrpc

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// parkingAPI holds each call until released, so that tests choose what is
// in flight.
type parkingAPI struct {
	sinkv1.UnimplementedSinkServer
	entered chan struct{}
	release chan struct{}
}

func newParkingAPI() *parkingAPI {
	return &parkingAPI{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (p *parkingAPI) park() { p.entered <- struct{}{}; <-p.release }

func (p *parkingAPI) Read(context.Context, *sinkv1.ReadRequest) (*sinkv1.ReadResponse, error) {
	p.park()
	return &sinkv1.ReadResponse{}, nil
}

func (p *parkingAPI) Write(context.Context, *sinkv1.WriteRequest) (*sinkv1.WriteResponse, error) {
	p.park()
	return &sinkv1.WriteResponse{}, nil
}

func (p *parkingAPI) Delete(context.Context, *sinkv1.DeleteRequest) (*sinkv1.DeleteResponse, error) {
	p.park()
	return &sinkv1.DeleteResponse{}, nil
}

func writeOf(n int) *sinkv1.WriteRequest {
	return &sinkv1.WriteRequest{Operations: make([]*sinkv1.WriteOperation, n)}
}
func readOf(n int) *sinkv1.ReadRequest {
	return &sinkv1.ReadRequest{Operations: make([]*sinkv1.ReadOperation, n)}
}
func deleteOf(n int) *sinkv1.DeleteRequest {
	return &sinkv1.DeleteRequest{Operations: make([]*sinkv1.DeleteOperation, n)}
}

// retryDelayOf returns the RetryInfo delay of a refusal (fails the test
// when err is not a retryable RESOURCE_EXHAUSTED refusal with one).
func retryDelayOf(t *testing.T, err error) time.Duration {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.HasPrefix(st.Message(), overloadMessage) {
		t.Fatalf("got %v, want a RESOURCE_EXHAUSTED refusal (%q…)", err, overloadMessage)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	t.Fatalf("refusal without RetryInfo: %v", err)
	return 0
}

// The bound counts operations, not RPCs: requests are admitted while the
// operations in flight stay within it, refused beyond it (every RPC), and
// admitted again once work finished; a request alone is admitted whatever
// its size.
func TestLimitOperationsRefusesBeyondTheBound(t *testing.T) {
	c := NewConnections(slog.New(slog.DiscardHandler))
	c.LimitOperations(10)
	api := newParkingAPI()
	tracked := c.Track(api)

	var wg sync.WaitGroup
	call := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				t.Errorf("admitted call failed: %v", err)
			}
		}()
		<-api.entered
	}
	call(func() error { _, err := tracked.Write(t.Context(), writeOf(6)); return err })
	call(func() error { _, err := tracked.Read(t.Context(), readOf(3)); return err })
	if got, ops := c.InFlight(), c.InFlightOperations(); got != 2 || ops != 9 {
		t.Fatalf("in flight: %d RPCs, %d operations; want 2, 9", got, ops)
	}
	// 9 + 2 > 10: refused, whatever the RPC.
	for name, f := range map[string]func() error{
		"Write":  func() error { _, err := tracked.Write(t.Context(), writeOf(2)); return err },
		"Read":   func() error { _, err := tracked.Read(t.Context(), readOf(2)); return err },
		"Delete": func() error { _, err := tracked.Delete(t.Context(), deleteOf(2)); return err },
	} {
		if d := retryDelayOf(t, f()); d <= 0 || d > 2*maxRetryDelay {
			t.Errorf("%s: retry delay %v", name, d)
		}
	}
	if got, ops := c.InFlight(), c.InFlightOperations(); got != 2 || ops != 9 {
		t.Fatalf("refusals left %d RPCs, %d operations in flight; want 2, 9", got, ops)
	}
	// 9 + 1 fits.
	call(func() error { _, err := tracked.Delete(t.Context(), deleteOf(1)); return err })
	for range 3 {
		api.release <- struct{}{}
	}
	wg.Wait()
	if got, ops := c.InFlight(), c.InFlightOperations(); got != 0 || ops != 0 {
		t.Fatalf("%d RPCs, %d operations in flight after they finished", got, ops)
	}
	// Alone, a request over the bound runs; beside it, nothing does.
	call(func() error { _, err := tracked.Write(t.Context(), writeOf(50)); return err })
	retryDelayOf(t, func() error { _, err := tracked.Read(t.Context(), readOf(1)); return err }())
	api.release <- struct{}{}
	wg.Wait()
}

// Without a bound nothing is refused.
func TestLimitOperationsOffAdmitsEverything(t *testing.T) {
	for _, max := range []int{0, -1} {
		c := NewConnections(slog.New(slog.DiscardHandler))
		c.LimitOperations(max)
		api := newParkingAPI()
		tracked := c.Track(api)
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := tracked.Write(t.Context(), writeOf(1000)); err != nil {
					t.Errorf("LimitOperations(%d): %v", max, err)
				}
			}()
			<-api.entered
		}
		if ops := c.InFlightOperations(); ops != 20000 {
			t.Errorf("LimitOperations(%d): %d operations in flight, want 20000", max, ops)
		}
		close(api.release)
		wg.Wait()
	}
}

// The retry delay is about the time the operations in flight take to
// drain at the rate at which operations recently finished, jittered by
// ±50%, and within its bounds: the longest when nothing finishes.
func TestRetryDelayFollowsTheDrainRate(t *testing.T) {
	a := newAdmission()
	a.max = 100
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	within := func(d, want time.Duration) {
		t.Helper()
		if d < want/2 || d >= want*3/2 {
			t.Fatalf("retry delay %v, want %v ±50%%", d, want)
		}
	}
	within(a.retryDelay(100), initialRetryDelay) // nothing measured yet
	// 100 in flight, 500 finished in the last 200 ms: 2,500/s, 40 ms to drain.
	now = now.Add(200 * time.Millisecond)
	a.done.Add(500)
	within(a.retryDelay(100), 40*time.Millisecond)
	// Nothing finished: the longest delay.
	now = now.Add(200 * time.Millisecond)
	within(a.retryDelay(100), maxRetryDelay)
	// Fast drains still wait the shortest delay.
	now = now.Add(time.Second)
	a.done.Add(1_000_000)
	within(a.retryDelay(100), minRetryDelay)
	// Within a window the estimate stands; after a long quiet one the
	// window restarts rather than averaging over the quiet time.
	now = now.Add(10 * time.Millisecond)
	within(a.retryDelay(100), minRetryDelay)
	now = now.Add(time.Hour)
	within(a.retryDelay(100), minRetryDelay)
	if !a.at.Equal(now) {
		t.Fatal("a stale window was not restarted")
	}
}

// Admitting and counting cost no allocation.
func TestTrackAllocatesNothing(t *testing.T) {
	c := NewConnections(slog.New(slog.DiscardHandler))
	c.LimitOperations(100)
	n := testing.AllocsPerRun(1000, func() {
		if err := c.adm.enter(1); err != nil {
			t.Fatal(err)
		}
		c.adm.leave(1)
	})
	if n != 0 {
		t.Fatalf("%v allocations per admitted request", n)
	}
}

func BenchmarkAdmission(b *testing.B) {
	c := NewConnections(slog.New(slog.DiscardHandler))
	c.LimitOperations(DefaultMaxInFlightOperations)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.adm.enter(1); err != nil {
				b.Fatal(err)
			}
			c.adm.leave(1)
		}
	})
}

// Refusals of the in-flight bound are logged at debug level only (under
// overload they are most requests) and counted like any failure; other
// RESOURCE_EXHAUSTED failures, such as the rate limit's, stay at info.
func TestInterceptorLogsOverloadRefusalsAtDebug(t *testing.T) {
	a := newAdmission()
	a.max = 1
	if err := a.enter(1); err != nil {
		t.Fatal(err)
	}
	refusal := a.enter(1)
	for _, c := range []struct {
		err   error
		level string // "" for none at info
	}{
		{refusal, ""},
		{StatusError(retryLater("rate limit of store \"primary\" exceeded", time.Second)), "INFO"},
	} {
		for _, lvl := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
			var buf strings.Builder
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: lvl}))
			obs := &fakeRPCObserver{}
			if _, err := call(t, obs, log, nil, func(context.Context, any) (any, error) { return nil, c.err }); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("err = %v", err)
			}
			if len(obs.got) != 1 || obs.got[0].code != codes.ResourceExhausted {
				t.Fatalf("observed %+v", obs.got)
			}
			want := c.level
			if lvl == slog.LevelDebug && want == "" {
				want = "DEBUG"
			}
			got := ""
			if buf.Len() > 0 {
				got = strings.SplitN(strings.SplitN(buf.String(), `"level":"`, 2)[1], `"`, 2)[0]
			}
			if got != want {
				t.Errorf("%v at log level %v: logged at %q, want %q", status.Convert(c.err).Message(), lvl, got, want)
			}
		}
	}
}

// A refused request is never counted in, not even for an instant: while
// refusals race, a reader never sees more RPCs or operations in flight
// than were admitted.
func TestRefusedRequestsAreNeverCounted(t *testing.T) {
	a := newAdmission()
	a.max = 4
	if err := a.enter(4); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if a.enter(1) == nil {
					t.Error("a request over the bound was admitted")
					a.leave(1)
				}
			}
		}()
	}
	for range 200_000 {
		if rpcs, ops := a.rpcs(), a.operations(); rpcs != 1 || ops != 4 {
			t.Errorf("read %d RPCs and %d operations in flight while one of 4 was admitted", rpcs, ops)
			break
		}
	}
	close(stop)
	wg.Wait()
}
