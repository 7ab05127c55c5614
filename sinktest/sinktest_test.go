package sinktest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/client"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/sinktest"
)

func TestNewServesAndStopsOnCleanup(t *testing.T) {
	var srv *sinktest.Server
	t.Run("inner", func(t *testing.T) {
		srv = sinktest.Start(t)
		c := srv.NewClient(t)
		if _, err := c.Dataset("ns", "ds").Put(context.Background(), client.StringKey("k"), map[string]int{"a": 1}); err != nil {
			t.Fatal(err)
		}
	})
	// After the subtest's cleanup the server is gone.
	c, err := client.New(srv.Addr(), client.WithInsecure(), client.WithRetry(1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var v any
	if _, err := c.Dataset("ns", "ds").Get(context.Background(), client.StringKey("k"), &v); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Get after cleanup = %v, want ErrUnavailable", err)
	}
}

func TestWithStorageServesThatStorage(t *testing.T) {
	st := memory.New()
	a := sinktest.New(t, sinktest.WithStorage(st))
	b := sinktest.New(t, sinktest.WithStorage(st))
	ctx := context.Background()
	if _, err := a.Dataset("ns", "ds").Put(ctx, client.Int64Key(1), map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	var v map[string]int
	if _, err := b.Dataset("ns", "ds").Get(ctx, client.Int64Key(1), &v); err != nil || v["a"] != 1 {
		t.Fatalf("the second server does not see the shared storage: %v, %v", v, err)
	}
}

func TestWithEnvConfiguresTheServer(t *testing.T) {
	c := sinktest.New(t, sinktest.WithEnv("SINK_MAX_OPERATIONS", "2"), sinktest.WithClientOptions(client.WithLimits(5, 0)))
	ds := c.Dataset("ns", "ds")
	b := c.Batch()
	for i := range 3 {
		b.Read(ds, client.Int64Key(int64(i)))
	}
	if r := b.Do(context.Background()); !errors.Is(r[0].Err, client.ErrInvalidArgument) {
		t.Fatalf("3 reads against SINK_MAX_OPERATIONS=2: %v, want ErrInvalidArgument", r[0].Err)
	}
}

func TestWithQueueAppliesAcceptedWrites(t *testing.T) {
	c := sinktest.New(t, sinktest.WithQueue())
	ds := c.Dataset("ns", "ds", client.WithDefaultCompletion(client.ReturnAfterAccepted))
	ctx := context.Background()
	r, err := ds.Put(ctx, client.StringKey("k"), map[string]int{"a": 1}, client.WithIdempotencyKey("put-k-1"))
	if err != nil || r.Status != client.StatusAccepted || r.MutationID == "" {
		t.Fatalf("Put = %+v, %v; want ACCEPTED with a mutation id", r, err)
	}
	_, err = ds.Merge(ctx, client.StringKey("k"), "merge-patch", map[string]int{"b": 2})
	if err != nil {
		t.Fatal(err)
	}
	// The GoChannel publish returned once the worker applied each one.
	var v map[string]int
	if _, err := ds.Get(ctx, client.StringKey("k"), &v); err != nil || v["a"] != 1 || v["b"] != 2 {
		t.Fatalf("Get = %v, %v; want both accepted writes applied", v, err)
	}
	// Without WithQueue the same write is refused.
	plain := sinktest.New(t).Dataset("ns", "ds")
	if _, err := plain.Put(ctx, client.StringKey("k"), 1, client.WithCompletion(client.ReturnAfterAccepted)); !errors.Is(err, client.ErrFailedPrecondition) {
		t.Fatalf("RETURN_AFTER_ACCEPTED without a queue = %v", err)
	}
}

// upper is a merge profile that stores the intent's "s" upper-cased.
type upper struct{}

func (upper) Name() string           { return "upper" }
func (upper) ContentTypes() []string { return []string{"application/json"} }
func (upper) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	var v struct{ S string }
	if err := json.Unmarshal(in.Intent.Data, &v); err != nil {
		return domain.Document{}, err
	}
	b, _ := json.Marshal(map[string]string{"s": strings.ToUpper(v.S)})
	return domain.Document{ContentType: "application/json", Data: b}, nil
}

func TestWithProfilesRegistersThem(t *testing.T) {
	c := sinktest.New(t, sinktest.WithProfiles(upper{}))
	ds := c.Dataset("ns", "ds")
	ctx := context.Background()
	if _, err := ds.Merge(ctx, client.StringKey("k"), "upper", map[string]string{"s": "sink"}); err != nil {
		t.Fatal(err)
	}
	var v map[string]string
	if _, err := ds.Get(ctx, client.StringKey("k"), &v); err != nil || v["s"] != "SINK" {
		t.Fatalf("Get = %v, %v", v, err)
	}
	// The built-in profiles stay.
	if _, err := ds.Merge(ctx, client.StringKey("k"), "merge-patch", map[string]string{"t": "x"}); err != nil {
		t.Fatal(err)
	}
}
