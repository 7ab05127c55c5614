package sinkgrpc

import (
	"sync"

	"google.golang.org/grpc/mem"
)

// The gRPC server's buffers (received HTTP/2 frames, a request assembled
// from several frames, encoded responses) come from a mem.BufferPool.
// grpc-go's default pool keeps every freed buffer of up to 1 MiB, and
// larger ones too, in sync.Pools: after a burst of large requests (8 MiB
// batches from 8 clients) it held 53 MiB of 16 KiB frame buffers and
// 8 MiB of assembled requests, which only two garbage collections give
// back, and an idle server collects only every two minutes. boundedPool
// keeps at most boundedPoolMaxBytes (see poolClasses) and never a buffer
// above 1 MiB: larger buffers, and buffers beyond a class's count, are
// left to the garbage collector.

// poolClass is one size of pooled buffer and how many of them the pool
// keeps at most.
type poolClass struct {
	size, keep int
}

// poolClasses are the sizes boundedPool keeps: small messages, a page, an
// HTTP/2 frame (16 KiB, gRPC's frame size) and 32 KiB (the transport's
// read and write buffers), each up to 2 MiB (1024 buffers of 256 bytes),
// and a few buffers of up to 256 KiB and 1 MiB: a 500-operation batch of
// 1 KB documents (its assembled request, or its read's response) took a
// fresh half MiB per request, a fifth of what a batch put allocated. Four
// of 1 MiB: with one, four clients reading 500-operation batches at once
// (the load benchmark's) allocated and cleared a new 1 MiB buffer for
// most responses (a third of what a batch read allocated; the read took
// 17 % more processor time).
var poolClasses = []poolClass{{256, 1024}, {4 << 10, 512}, {16 << 10, 128}, {32 << 10, 64}, {256 << 10, 2}, {1 << 20, 4}}

// boundedPoolMaxBytes is the most bytes a boundedPool keeps.
var boundedPoolMaxBytes = func() int {
	n := 0
	for _, c := range poolClasses {
		n += c.size * c.keep
	}
	return n
}()

// boundedPool is a mem.BufferPool that keeps freed buffers of the
// poolClasses sizes, up to each class's count, and no others. Buffers are
// zeroed when handed out, as by grpc-go's default pool, up to the length
// asked for (grpc-go's clears the whole capacity; nothing reads beyond a
// buffer's length, and a Get of more clears more).
type boundedPool struct {
	classes []boundedClass
}

type boundedClass struct {
	size int
	mu   sync.Mutex
	free []*[]byte // len <= cap, fixed at keep
}

var _ mem.BufferPool = (*boundedPool)(nil)

func newBoundedPool() *boundedPool {
	p := &boundedPool{classes: make([]boundedClass, len(poolClasses))}
	for i, c := range poolClasses {
		p.classes[i] = boundedClass{size: c.size, free: make([]*[]byte, 0, c.keep)}
	}
	return p
}

// sparseAbove: a class larger than this serves only buffers of more than
// half its size (a 40 KiB message in a 256 KiB buffer would cost more to
// clear, or to allocate, than a buffer of its own).
const sparseAbove = 32 << 10

// Get returns a buffer of length n: a kept one of the smallest class that
// holds n (see sparseAbove), or a new one (of the class's size when there
// is one, so that it can be kept when freed).
func (p *boundedPool) Get(n int) *[]byte {
	for i := range p.classes {
		c := &p.classes[i]
		if n > c.size || c.size > sparseAbove && n <= c.size/2 {
			continue
		}
		c.mu.Lock()
		if k := len(c.free); k > 0 {
			b := c.free[k-1]
			c.free[k-1] = nil
			c.free = c.free[:k-1]
			c.mu.Unlock()
			*b = (*b)[:n]
			clear(*b) // (only what is handed out: a 530 KiB response cleared all of its 1 MiB buffer)
			return b
		}
		c.mu.Unlock()
		b := make([]byte, n, c.size)
		return &b
	}
	b := make([]byte, n)
	return &b
}

// Put keeps b when its capacity is a class's size and the class has room.
func (p *boundedPool) Put(b *[]byte) {
	size := cap(*b)
	for i := range p.classes {
		c := &p.classes[i]
		if c.size != size {
			continue
		}
		c.mu.Lock()
		if len(c.free) < cap(c.free) {
			c.free = append(c.free, b)
		}
		c.mu.Unlock()
		return
	}
}

// kept returns the bytes of the buffers the pool keeps (tests).
func (p *boundedPool) kept() int {
	n := 0
	for i := range p.classes {
		c := &p.classes[i]
		c.mu.Lock()
		for _, b := range c.free {
			n += cap(*b)
		}
		c.mu.Unlock()
	}
	return n
}
