package verbs

import (
	"context"
	"sync"
)

// credits counts what a peer lets us have outstanding against it: SENDs
// (its receive buffers) or one-sided operations (what it accepts in flight).
// acquire waits for one; the peer hands them back (grant).
type credits struct {
	mu     sync.Mutex
	avail  int
	max    int
	wake   chan struct{} // closed when credits arrive or on close
	closed error
}

func newCredits(n int) *credits {
	return &credits{avail: n, max: n, wake: make(chan struct{})}
}

// acquire takes one credit, waiting until one is granted, ctx ends or the
// credits are closed.
func (c *credits) acquire(ctx context.Context) error {
	for {
		c.mu.Lock()
		if c.closed != nil {
			c.mu.Unlock()
			return c.closed
		}
		if c.avail > 0 {
			c.avail--
			c.mu.Unlock()
			return nil
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// grant returns n credits. Returning more than were ever given is a peer's
// protocol error; the count is clamped so a confused peer cannot inflate it.
func (c *credits) grant(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.avail = min(c.avail+n, c.max)
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
}

// close fails current and future acquires with err.
func (c *credits) close(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed == nil {
		c.closed = err
		close(c.wake)
		c.wake = make(chan struct{})
	}
}

// available reports the credits not in use.
func (c *credits) available() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.avail
}

// creditReturn tracks receive buffers we consumed and reposted for a peer
// and decides when to hand them back: piggybacked on any message we send,
// or in a credit-only message once half the grant has built up, so the peer
// never stalls for lack of credits while we have nothing to say.
type creditReturn struct {
	mu        sync.Mutex
	owedN     int
	threshold int
}

func newCreditReturn(granted int) *creditReturn {
	return &creditReturn{threshold: max(1, granted/2)}
}

// consumed records one received message whose buffer was reposted; it
// reports whether a credit-only message should go out now.
func (r *creditReturn) consumed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owedN++
	return r.owedN >= r.threshold
}

// owed reports the credits not yet handed back.
func (r *creditReturn) owed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owedN
}

// take returns the credits owed (at most what a header carries) and resets.
func (r *creditReturn) take() uint16 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(r.owedN, 0xffff)
	r.owedN -= n
	return uint16(n)
}
