package sinkgrpc

import (
	"testing"
)

// The server's buffer pool keeps at most boundedPoolMaxBytes (a few MiB)
// however many buffers are freed, never keeps a buffer above its largest
// class, and hands out zeroed buffers of the length asked for.
func TestBoundedPoolKeepsABoundedAmount(t *testing.T) {
	p := newBoundedPool()
	if boundedPoolMaxBytes > 8<<20 {
		t.Fatalf("the pool may keep %d bytes; keep it under 8 MiB", boundedPoolMaxBytes)
	}
	// A burst: many buffers of every size in use at once, then all freed.
	var bufs []*[]byte
	for _, n := range []int{1, 200, 256, 257, 4 << 10, 10 << 10, 16 << 10, 20 << 10, 32 << 10, 33 << 10, 1 << 20, 8 << 20} {
		for range 2000 {
			b := p.Get(n)
			if len(*b) != n {
				t.Fatalf("Get(%d) returned %d bytes", n, len(*b))
			}
			(*b)[n-1] = 0xff
			bufs = append(bufs, b)
		}
	}
	for _, b := range bufs {
		p.Put(b)
	}
	if got := p.kept(); got > boundedPoolMaxBytes || got == 0 {
		t.Fatalf("after the burst the pool keeps %d bytes, want 1 to %d", got, boundedPoolMaxBytes)
	}
	for i := range p.classes {
		c := &p.classes[i]
		if len(c.free) != poolClasses[i].keep {
			t.Errorf("class %d keeps %d buffers, want its most, %d", c.size, len(c.free), poolClasses[i].keep)
		}
		for _, b := range c.free {
			if cap(*b) != c.size {
				t.Errorf("class %d keeps a buffer of capacity %d", c.size, cap(*b))
			}
		}
	}
	// Kept buffers are reused, zeroed.
	b := p.Get(16 << 10)
	for i, x := range (*b)[:cap(*b)] {
		if x != 0 {
			t.Fatalf("reused buffer has byte %d = %#x", i, x)
		}
	}
	if len(p.classes[2].free) != poolClasses[2].keep-1 {
		t.Fatal("Get of a frame-sized buffer did not reuse a kept one")
	}
}
