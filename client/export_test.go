package client

import "context"

// WithLookup replaces the resolver of WithDNSRouting (tests).
func WithLookup(f func(ctx context.Context, host string) ([]string, error)) Option {
	return func(c *config) { c.lookup = f }
}
