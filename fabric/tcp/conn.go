package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/fabric"
)

// conn is one authenticated connection. It is symmetric: either side sends
// requests on it, and one reader goroutine per conn reads both the peer's
// requests and the replies to ours.
//
// Deadlock freedom: the reader never writes to the socket. Replies to the
// peer's requests are sent from their own goroutines, so a reader is always
// draining its socket and two peers writing large frames at each other both
// make progress.
type conn struct {
	ep       *Endpoint
	nc       net.Conn
	peer     fabric.NodeID
	outbound bool
	fr       frameReader // owned by the reader goroutine
	peerLim  limits      // what the peer accepts from us

	wmu         sync.Mutex // serializes frames on the socket
	hasDeadline bool       // a write deadline is set (under wmu)

	sem      chan struct{} // our requests in flight, at most peerLim.maxInFlight
	serving  atomic.Int32  // the peer's requests we are serving
	nextID   atomic.Uint64
	mu       sync.Mutex
	pending  map[uint64]*pending
	closed   bool
	closeErr error
	done     chan struct{}
}

// pending is one request of ours waiting for its reply.
type pending struct {
	typ  uint8 // the reply type expected
	dsts [][]byte
	one  [1][]byte // dsts for a single Read, without allocating
	meta []byte    // call reply body (pooled), owned by the waiter once done
	err  error
	done chan struct{} // receives once, when the reader has finished with it

	abandoned bool // the caller stopped waiting (under conn.mu)
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func getPending(typ uint8) *pending {
	p := pendingPool.Get().(*pending)
	p.typ = typ
	return p
}

func putPending(p *pending) {
	p.dsts, p.one[0], p.meta, p.err, p.abandoned = nil, nil, nil, nil, false
	pendingPool.Put(p)
}

func newConn(ep *Endpoint, nc net.Conn, peer fabric.NodeID, outbound bool, peerLim limits) *conn {
	return &conn{
		ep:       ep,
		nc:       nc,
		peer:     peer,
		outbound: outbound,
		fr:       frameReader{br: bufio.NewReaderSize(nc, 32<<10), lim: ep.lim},
		peerLim:  peerLim,
		sem:      make(chan struct{}, peerLim.maxInFlight),
		pending:  make(map[uint64]*pending),
		done:     make(chan struct{}),
	}
}

// load is the number of our requests in flight on c.
func (c *conn) load() int { return len(c.sem) }

// close fails every pending request with err and closes the socket. It is
// idempotent; the first error wins.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.closeErr = err
	pend := c.pending
	c.pending = nil
	c.mu.Unlock()
	close(c.done)
	c.nc.Close()
	for _, p := range pend {
		if p.abandoned {
			c.retire(p)
			continue
		}
		p.err = c.lostErr()
		p.done <- struct{}{}
	}
	c.ep.dropConn(c)
}

func (c *conn) lostErr() error {
	if errors.Is(c.closeErr, fabric.ErrClosed) {
		return fabric.ErrClosed
	}
	return fmt.Errorf("%w: %s: %v", fabric.ErrPeerClosed, c.peer, c.closeErr)
}

// register adds p under a fresh request id.
func (c *conn) register(p *pending) (uint64, error) {
	id := c.nextID.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, c.lostErr()
	}
	c.pending[id] = p
	return id, nil
}

// claim removes and returns the pending request id, or nil if its waiter gave up.
func (c *conn) claim(id uint64) *pending {
	c.mu.Lock()
	p := c.pending[id]
	if p != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
	return p
}

// send writes one frame made of bufs. A failed or cut-short write leaves the
// stream unusable, so it closes the connection.
func (c *conn) send(ctx context.Context, bufs net.Buffers) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(dl)
		c.hasDeadline = true
	} else if c.hasDeadline {
		c.nc.SetWriteDeadline(time.Time{})
		c.hasDeadline = false
	}
	var err error
	if len(bufs) == 1 {
		_, err = c.nc.Write(bufs[0])
	} else {
		_, err = bufs.WriteTo(c.nc)
	}
	if err != nil {
		c.close(fmt.Errorf("write: %w", err))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.lostErr()
	}
	return nil
}

// roundTrip sends a request frame and waits for its reply. build encodes
// the frame for request id; a read reply's data lands in dsts. It returns a
// call reply's body (a pooled buffer the caller must put back).
//
// A request keeps its in-flight slot until its reply arrives or the
// connection dies, even when the caller stops waiting: the peer still counts
// it, and the slots are how we keep to the peer's limit.
func (c *conn) roundTrip(ctx context.Context, typ uint8, dsts [][]byte, build func(id uint64) net.Buffers) ([]byte, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, c.lostErr()
	}
	p := getPending(typ + 1)
	p.dsts = dsts
	if len(dsts) == 1 {
		p.one[0] = dsts[0]
		p.dsts = p.one[:]
	}
	id, err := c.register(p)
	if err != nil {
		<-c.sem
		putPending(p)
		return nil, err
	}
	if err := c.send(ctx, build(id)); err != nil {
		if c.claim(id) == nil {
			<-p.done // close() or the reader got to it first
		}
		<-c.sem
		putPending(p)
		return nil, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		if c.abandon(id) {
			return nil, ctx.Err() // the reader frees p and the slot
		}
		// The reader is filling p right now, maybe streaming data into the
		// caller's buffer. Cut the connection so it stops promptly; p is
		// complete before the caller gets its buffer back.
		c.nc.SetReadDeadline(time.Now())
		<-p.done
		if p.err != nil {
			p.err = ctx.Err()
		}
	}
	<-c.sem
	meta, err := p.meta, p.err
	putPending(p)
	return meta, err
}

// abandon marks a request whose caller stopped waiting. It reports false if
// the reader already took the request.
func (c *conn) abandon(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[id]
	if p == nil {
		return false
	}
	p.abandoned = true
	return true
}

// retire frees an abandoned request once its reply (or the connection's end)
// has come.
func (c *conn) retire(p *pending) {
	if p.meta != nil {
		c.ep.bufs.put(p.meta)
	}
	<-c.sem
	putPending(p)
}
