package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/sink-io/sink/client"
	"github.com/sink-io/sink/sinktest"
)

type Order struct {
	Customer string   `json:"customer" bson:"customer"`
	Items    []string `json:"items,omitempty" bson:"items,omitempty"`
	Total    int      `json:"total" bson:"total"`
}

// startSink starts an in-process Sink for the examples (in your tests,
// sinktest.New(t) does this and the cleanup).
func startSink() (*client.Client, func()) {
	srv, err := sinktest.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	c, err := srv.Client()
	if err != nil {
		log.Fatal(err)
	}
	return c, func() { _ = c.Close(); _ = srv.Close() }
}

func Example() {
	c, stop := startSink() // client.New("sink.example:8080", client.WithBearerToken(token)) in production
	defer stop()
	ctx := context.Background()

	orders := c.Dataset("shop", "orders")
	if _, err := orders.Put(ctx, client.StringKey("o-1"), Order{Customer: "ada", Total: 12}); err != nil {
		log.Fatal(err)
	}
	var o Order
	if _, err := orders.Get(ctx, client.StringKey("o-1"), &o); err != nil {
		log.Fatal(err)
	}
	fmt.Println(o.Customer, o.Total)

	_, err := orders.Get(ctx, client.StringKey("o-2"), &o)
	fmt.Println(errors.Is(err, client.ErrNotFound))
	// Output:
	// ada 12
	// true
}

func ExampleDataset_Create() {
	c, stop := startSink()
	defer stop()
	ctx := context.Background()
	orders := c.Dataset("shop", "orders")

	_, err := orders.Create(ctx, client.Int64Key(7), Order{Customer: "ada"})
	fmt.Println(err)
	_, err = orders.Create(ctx, client.Int64Key(7), Order{Customer: "bob"})
	fmt.Println(errors.Is(err, client.ErrAlreadyExists))
	var oe *client.OperationError
	if errors.As(err, &oe) {
		fmt.Println(oe.Reason, oe.Retryable())
	}
	// Output:
	// <nil>
	// true
	// ALREADY_EXISTS false
}

func ExampleWithExpectedRevision() {
	c, stop := startSink()
	defer stop()
	ctx := context.Background()
	orders := c.Dataset("shop", "orders")
	key := client.StringKey("o-1")

	first, _ := orders.Put(ctx, key, Order{Customer: "ada", Total: 1})
	_, _ = orders.Put(ctx, key, Order{Customer: "ada", Total: 2})
	// A write based on the first revision no longer applies.
	_, err := orders.Put(ctx, key, Order{Customer: "ada", Total: 3}, client.WithExpectedRevision(first.Revision))
	fmt.Println(errors.Is(err, client.ErrRevisionMismatch))
	// Output:
	// true
}

func ExampleDataset_Merge() {
	c, stop := startSink()
	defer stop()
	ctx := context.Background()
	orders := c.Dataset("shop", "orders")
	key := client.StringKey("o-1")

	_, _ = orders.Put(ctx, key, Order{Customer: "ada", Total: 12})
	// The built-in JSON merge patch profile: only the fields sent change.
	_, err := orders.Merge(ctx, key, "merge-patch", map[string]any{"total": 15}, client.WithIdempotencyKey("raise-o-1-to-15"))
	if err != nil {
		log.Fatal(err)
	}
	var o Order
	_, _ = orders.Get(ctx, key, &o)
	fmt.Println(o.Customer, o.Total)
	// Output:
	// ada 15
}

func ExampleClient_Batch() {
	c, stop := startSink()
	defer stop()
	ctx := context.Background()
	orders := c.Dataset("shop", "orders")

	b := c.Batch()
	b.Put(orders, client.StringKey("a"), Order{Customer: "ada"})
	b.Put(orders, client.StringKey("b"), Order{Customer: "bob"})
	b.Replace(orders, client.StringKey("c"), Order{Customer: "cy"}) // does not exist
	read := b.Read(orders, client.StringKey("b"))
	results := b.Do(ctx)

	for _, r := range results[:3] {
		fmt.Println(r.Status == client.StatusApplied, errors.Is(r.Err, client.ErrNotFound))
	}
	var o Order
	if err := results[read].Decode(&o); err != nil {
		log.Fatal(err)
	}
	fmt.Println(o.Customer)
	// Output:
	// true false
	// true false
	// false true
	// bob
}

func ExampleWithCodec() {
	c, stop := startSink()
	defer stop()
	ctx := context.Background()
	orders := c.Dataset("shop", "orders", client.WithCodec(client.BSON))

	_, _ = orders.Put(ctx, client.StringKey("o-1"), Order{Customer: "ada", Items: []string{"tea"}})
	var o Order
	if _, err := orders.Get(ctx, client.StringKey("o-1"), &o); err != nil {
		log.Fatal(err)
	}
	fmt.Println(o.Customer, o.Items)
	// Output:
	// ada [tea]
}

func ExampleWithReturnDocument() {
	c, stop := startSink()
	defer stop()
	ctx := context.Background()
	orders := c.Dataset("shop", "orders")
	key := client.StringKey("o-1")

	_, _ = orders.Put(ctx, key, Order{Customer: "ada", Total: 12})
	// The merged order comes back with the merge: no read needed.
	res, err := orders.Merge(ctx, key, "merge-patch", map[string]any{"items": []string{"tea"}}, client.WithReturnDocument())
	if err != nil {
		log.Fatal(err)
	}
	var o Order
	if err := res.Decode(&o); err != nil {
		log.Fatal(err)
	}
	fmt.Println(o.Customer, o.Items, o.Total)
	// Output:
	// ada [tea] 12
}
