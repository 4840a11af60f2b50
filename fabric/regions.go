package fabric

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
)

// Regions is the table of an endpoint's registered memory, shared by the
// software transports (tcp, local). Hardware transports use the NIC's own
// table instead.
//
// A key is (random 32-bit tag << 32 | region index). Indexes grow and are
// never reused, so a key that was valid once can be told apart from one that
// never was without remembering anything per revoked region: an index below
// the next one to hand out whose region is gone is revoked; anything else
// that does not match a live region's tag is unknown. The tag makes live keys
// unguessable (and fabric/tcp only serves authenticated peers anyway).
type Regions struct {
	node NodeID

	mu   sync.RWMutex
	live map[uint32]*region
	next uint32
}

type region struct {
	table  *Regions
	index  uint32
	tag    uint32
	buf    []byte
	access Access

	// mu guards the count of accesses in progress and dead. It is not an
	// RWMutex held shared by accesses: one operation may hold several spans
	// of a region at once, and a pending writer (Fence, Deregister) would
	// then block the second shared acquire behind the first — a deadlock.
	mu      sync.Mutex
	inUse   int
	dead    bool
	drained *sync.Cond // signalled when inUse drops to zero
}

// NewRegions returns an empty table for the endpoint named node.
func NewRegions(node NodeID) *Regions {
	return &Regions{node: node, live: make(map[uint32]*region), next: 1}
}

// Register adds buf to the table under a random tag.
func (t *Regions) Register(buf []byte, access Access) (MR, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("register memory: key: %w", err)
	}
	return t.RegisterTagged(buf, access, binary.LittleEndian.Uint32(b[:]))
}

// RegisterTagged adds buf to the table under a tag the caller chose: a
// hardware transport passes the NIC's remote key, so that one 64-bit key
// carries both what the NIC checks and what the table tracks.
func (t *Regions) RegisterTagged(buf []byte, access Access, tag uint32) (MR, error) {
	if access&^AccessRemoteReadWrite != 0 {
		return nil, fmt.Errorf("register memory: invalid access %v", access)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next == 0 {
		return nil, fmt.Errorf("register memory: region indexes exhausted")
	}
	r := &region{table: t, index: t.next, tag: tag, buf: buf, access: access}
	r.drained = sync.NewCond(&r.mu)
	t.next++
	t.live[r.index] = r
	return r, nil
}

// Span is access to a slice of a registered region, held until Release.
type Span struct {
	B []byte
	r *region
}

// Release ends the access; the region may be deregistered afterwards.
func (s Span) Release() {
	if r := s.r; r != nil {
		r.mu.Lock()
		if r.inUse--; r.inUse == 0 {
			r.drained.Broadcast()
		}
		r.mu.Unlock()
	}
}

// Acquire checks key, bounds and rights for n bytes at off and returns the
// bytes, held against deregistration until the span is released.
func (t *Regions) Acquire(key, off uint64, n uint32, want Access) (Span, error) {
	index, tag := uint32(key), uint32(key>>32)
	t.mu.RLock()
	r := t.live[index]
	if r == nil || r.tag != tag {
		revoked := r == nil && index != 0 && index < t.next
		t.mu.RUnlock()
		if revoked {
			return Span{}, ErrRevoked
		}
		return Span{}, ErrUnknownKey
	}
	t.mu.RUnlock()
	if r.access&want != want {
		return Span{}, fmt.Errorf("%w: region allows %v, wanted %v", ErrAccessDenied, r.access, want)
	}
	size := uint64(len(r.buf))
	if off > size || uint64(n) > size-off {
		return Span{}, fmt.Errorf("%w: [%d:+%d] of %d bytes", ErrOutOfBounds, off, n, size)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead {
		return Span{}, ErrRevoked
	}
	r.inUse++
	return Span{B: r.buf[off : off+uint64(n) : off+uint64(n)], r: r}, nil
}

func (r *region) Key() uint64   { return uint64(r.tag)<<32 | uint64(r.index) }
func (r *region) Bytes() []byte { return r.buf }

func (r *region) Remote(off, n int) RemoteBuf {
	return RemoteBuf{Node: r.table.node, Key: r.Key(), Offset: uint64(off), Len: uint32(n)}
}

// Fence orders every access already released before what follows (each
// release passes through mu); it does not wait for accesses in progress.
func (r *region) Fence() {
	r.mu.Lock()
	//lint:ignore SA2001 the empty section is the fence: taking mu orders this after every release that held it
	r.mu.Unlock()
}

func (r *region) Deregister() error {
	t := r.table
	t.mu.Lock()
	if t.live[r.index] != r {
		t.mu.Unlock()
		return fmt.Errorf("deregister %#x: %w", r.Key(), ErrRevoked)
	}
	delete(t.live, r.index)
	t.mu.Unlock()
	r.mu.Lock()
	r.dead = true
	for r.inUse > 0 {
		r.drained.Wait()
	}
	r.mu.Unlock()
	return nil
}
