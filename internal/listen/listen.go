// Package listen opens the listening socket of a server and remembers the
// address it bound, for the adapters whose servers start and stop with the
// process (the gRPC listener, the HTTP operations endpoint).
package listen

import (
	"fmt"
	"net"
	"sync"
)

// Endpoint is a server's TCP address: Listen opens it, Addr returns the
// address it bound.
type Endpoint struct {
	address, setting string

	mu   sync.Mutex
	addr net.Addr
}

// NewEndpoint returns the endpoint of address; setting names the address's
// setting in messages (for example an environment variable).
func NewEndpoint(address, setting string) *Endpoint {
	return &Endpoint{address: address, setting: setting}
}

// Listen opens the address, so that a server's start fails clearly when it
// is taken.
func (e *Endpoint) Listen() (net.Listener, error) {
	lis, err := net.Listen("tcp", e.address)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s %q: %w", e.setting, e.address, err)
	}
	e.mu.Lock()
	e.addr = lis.Addr()
	e.mu.Unlock()
	return lis, nil
}

// Addr returns the bound address (nil before Listen).
func (e *Endpoint) Addr() net.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addr
}
