package sinkgrpc

import (
	"testing"
)

// The server's buffer pool keeps at most boundedPoolMaxBytes (a few MiB)
// however many buffers are freed, never keeps a buffer above its largest
// class, and hands out zeroed buffers of the length asked for.
func TestBoundedPoolKeepsABoundedAmount(t *testing.T) {
	p := newBoundedPool()
	if boundedPoolMaxBytes > 11<<20 {
		t.Fatalf("the pool may keep %d bytes; keep it under 11 MiB", boundedPoolMaxBytes)
	}
	// A burst: many buffers of every size in use at once, then all freed.
	var bufs []*[]byte
	for _, n := range []int{1, 200, 256, 257, 4 << 10, 10 << 10, 16 << 10, 20 << 10, 32 << 10, 33 << 10, 200 << 10, 1 << 20, 8 << 20} {
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

// The large classes serve only buffers of more than half their size: a
// message a little above 32 KiB gets a buffer of its own size, a 500 KiB
// batch one of the 1 MiB class, kept when freed.
func TestBoundedPoolLargeClassesServeLargeBuffers(t *testing.T) {
	p := newBoundedPool()
	if b := p.Get(40 << 10); cap(*b) != 40<<10 {
		t.Fatalf("a 40 KiB buffer has capacity %d", cap(*b))
	}
	b := p.Get(530 << 10)
	if cap(*b) != 1<<20 {
		t.Fatalf("a 530 KiB buffer has capacity %d, want the 1 MiB class", cap(*b))
	}
	(*b)[0] = 1
	p.Put(b)
	again := p.Get(600 << 10)
	if again != b || (*again)[0] != 0 || len(*again) != 600<<10 {
		t.Fatalf("the freed 1 MiB buffer was not reused, zeroed, with the length asked for")
	}
	// Only the length handed out is cleared: a shorter Get leaves the
	// rest as it was, a longer one clears it.
	(*again)[600<<10-1], (*again)[(600<<10)-2] = 1, 1
	p.Put(again)
	short := p.Get(600<<10 - 1)
	if short != b || (*short)[600<<10-2] != 0 || (*short)[:600<<10][600<<10-1] != 1 {
		t.Fatalf("a Get cleared other than the length it handed out")
	}
	p.Put(short)
	if long := p.Get(700 << 10); long != b || (*long)[600<<10-1] != 0 {
		t.Fatalf("a longer Get handed out bytes it had not cleared")
	}
	if c := p.Get(300 << 10); cap(*c) != 300<<10 {
		t.Fatalf("a 300 KiB buffer has capacity %d, want its own size", cap(*c))
	}
}
