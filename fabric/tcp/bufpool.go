package tcp

import (
	"math/bits"
	"sync"
)

// bufPool recycles frame buffers in power-of-two size classes so that the
// per-request path allocates nothing in steady state.
type bufPool struct {
	classes [maxClass - minClass + 1]sync.Pool
}

const (
	minClass = 9  // 512 B
	maxClass = 24 // 16 MiB; larger buffers are allocated and dropped
)

func class(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}

// get returns a buffer of length n.
func (p *bufPool) get(n int) []byte {
	c := class(n)
	if c > maxClass {
		return make([]byte, n)
	}
	if b, ok := p.classes[c-minClass].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<c)
}

// put returns b for reuse; b must not be used afterwards.
func (p *bufPool) put(b []byte) {
	c := class(cap(b))
	if c > maxClass || cap(b) != 1<<c {
		return
	}
	b = b[:0]
	p.classes[c-minClass].Put(&b)
}
