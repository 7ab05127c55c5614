package orders_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sink-io/sink/examples/orders"
	"github.com/sink-io/sink/sinktest"
)

func TestOrders(t *testing.T) {
	ctx := context.Background()
	svc := orders.New(sinktest.New(t)) // an in-process Sink, stopped at the end of the test

	if err := svc.Place(ctx, "req-1", "o-1", "ada", "tea", "scones"); err != nil {
		t.Fatal(err)
	}
	// The same request again (a retry): the same success, nothing written.
	if err := svc.Place(ctx, "req-1", "o-1", "ada", "tea", "scones"); err != nil {
		t.Fatalf("retried Place = %v", err)
	}
	// Another request for the same order id.
	if err := svc.Place(ctx, "req-2", "o-1", "bob"); !errors.Is(err, orders.ErrDuplicate) {
		t.Fatalf("second Place = %v, want ErrDuplicate", err)
	}
	if _, err := svc.Get(ctx, "o-2"); !errors.Is(err, orders.ErrNoSuchOrder) {
		t.Fatalf("Get of a missing order = %v", err)
	}
	if err := svc.Ship(ctx, "o-1"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Ship(ctx, "o-1"); !errors.Is(err, orders.ErrAlreadyShipped) {
		t.Fatalf("second Ship = %v", err)
	}
	if err := svc.Annotate(ctx, "o-1", "leave at the door"); err != nil {
		t.Fatal(err)
	}
	o, err := svc.Get(ctx, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	if o.Customer != "ada" || o.Status != "shipped" || o.Note != "leave at the door" || len(o.Items) != 2 {
		t.Fatalf("order = %+v", o)
	}
}

// Shipping races with notes: every note lands and every order ships once.
func TestShipRacesWithNotes(t *testing.T) {
	ctx := context.Background()
	svc := orders.New(sinktest.New(t))
	const n = 8
	for i := range n {
		if err := svc.Place(ctx, fmt.Sprint("req-", i), fmt.Sprint("o-", i), "ada", "tea"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		id := fmt.Sprint("o-", i)
		wg.Add(2)
		go func() { defer wg.Done(); errs <- svc.Ship(ctx, id) }()
		go func() { defer wg.Done(); errs <- svc.Annotate(ctx, id, "fragile") }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		o, err := svc.Get(ctx, fmt.Sprint("o-", i))
		if err != nil || o.Status != "shipped" || o.Note != "fragile" {
			t.Fatalf("order %d = %+v, %v", i, o, err)
		}
	}
}
