// Package orders is a small service built on Sink's Go client: orders
// stored in one dataset, created once, shipped with an optimistic
// read-modify-write, annotated with server-side merges. Its tests
// (orders_test.go) run it against an in-process Sink (package sinktest).
package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/sink-io/sink/client"
)

// Order is one order.
type Order struct {
	Customer string   `json:"customer"`
	Items    []string `json:"items"`
	Status   string   `json:"status"` // "placed", "shipped"
	Note     string   `json:"note,omitempty"`
}

// Errors of the service.
var (
	ErrDuplicate      = errors.New("orders: an order with this id exists")
	ErrNoSuchOrder    = errors.New("orders: no such order")
	ErrAlreadyShipped = errors.New("orders: already shipped")
)

// Service manages orders in the dataset shop/orders.
type Service struct {
	orders *client.Dataset
}

// New returns the service over a Sink client.
func New(c *client.Client) *Service { return &Service{orders: c.Dataset("shop", "orders")} }

// Place creates an order. requestID identifies the caller's request (for
// example its Idempotency-Key header) and becomes the write's idempotency
// key: the client may then resend the write after a timeout, and a
// caller's retry of the same request gets the same success instead of
// ErrDuplicate.
func (s *Service) Place(ctx context.Context, requestID, id, customer string, items ...string) error {
	_, err := s.orders.Create(ctx, client.StringKey(id), Order{Customer: customer, Items: items, Status: "placed"},
		client.WithIdempotencyKey("place-"+requestID))
	if errors.Is(err, client.ErrAlreadyExists) {
		return ErrDuplicate
	}
	return err
}

// Get returns an order.
func (s *Service) Get(ctx context.Context, id string) (Order, error) {
	var o Order
	_, err := s.orders.Get(ctx, client.StringKey(id), &o)
	if errors.Is(err, client.ErrNotFound) {
		return o, ErrNoSuchOrder
	}
	return o, err
}

// Ship marks a placed order shipped: read, check, write back at the read
// revision, and start over when another writer came in between.
func (s *Service) Ship(ctx context.Context, id string) error {
	for {
		var o Order
		rev, err := s.orders.Get(ctx, client.StringKey(id), &o)
		if errors.Is(err, client.ErrNotFound) {
			return ErrNoSuchOrder
		}
		if err != nil {
			return err
		}
		if o.Status == "shipped" {
			return ErrAlreadyShipped
		}
		o.Status = "shipped"
		_, err = s.orders.Replace(ctx, client.StringKey(id), o, client.WithExpectedRevision(rev))
		if errors.Is(err, client.ErrRevisionMismatch) {
			continue // someone else wrote the order: read it again
		}
		if err != nil {
			return fmt.Errorf("orders: ship %s: %w", id, err)
		}
		return nil
	}
}

// Annotate sets the order's note with a server-side merge (no read, no
// conflict with Ship: the server merges into the latest order).
func (s *Service) Annotate(ctx context.Context, id, note string) error {
	_, err := s.orders.Merge(ctx, client.StringKey(id), "merge-patch", map[string]string{"note": note})
	return err
}
