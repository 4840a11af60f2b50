package tcp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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

	wmu     sync.Mutex  // serializes frames on the socket; guards the fields below
	wdl     time.Time   // the socket's write deadline
	iov     net.Buffers // scratch for gathered writes
	trailer [4]byte     // scratch for the data CRC

	sem      chan struct{} // our requests in flight, at most peerLim.maxInFlight
	serving  atomic.Int32  // the peer's requests we are serving
	nextID   atomic.Uint64
	mu       sync.Mutex
	pending  map[uint64]*pending
	closed   bool
	closeErr error
	done     chan struct{}
}

// readBuffer is the size of a connection's read buffer. It lets one read
// system call take in several small frames, or several small ranges of one
// batch (a batch of 4 KiB reads took a system call per range with a 4 KiB
// buffer); a payload at least this large bypasses it, except for whatever
// part of it arrived with its header. It costs 32 KiB per connection, 128
// MiB at the default MaxConns.
const readBuffer = 32 << 10

// pending is one request of ours waiting for its reply. Pooled with its
// slices, so a request allocates nothing in steady state.
type pending struct {
	typ  uint8    // the reply type expected
	dsts [][]byte // where a read reply's data goes
	data [][]byte // a write request's data
	meta []byte   // call reply body (pooled), owned by the waiter once done
	err  error
	// posted is why a push the peer posted ahead of this call's reply could
	// not be stored (see flagPosted); set by the reader under conn.mu.
	posted error
	done   chan struct{} // receives once, when the reader has finished with it

	abandoned bool // the caller stopped waiting (under conn.mu)
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func getPending(typ uint8) *pending {
	p := pendingPool.Get().(*pending)
	p.typ = typ
	return p
}

func putPending(p *pending) {
	clear(p.dsts)
	clear(p.data)
	p.dsts, p.data, p.meta, p.err, p.posted, p.abandoned = p.dsts[:0], p.data[:0], nil, nil, nil, false
	pendingPool.Put(p)
}

func newConn(ep *Endpoint, nc net.Conn, peer fabric.NodeID, outbound bool, peerLim limits) *conn {
	return &conn{
		ep:       ep,
		nc:       nc,
		peer:     peer,
		outbound: outbound,
		fr:       frameReader{br: bufio.NewReaderSize(nc, readBuffer), lim: ep.lim},
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

// send writes one frame: head (header and meta), then data gathered from
// its slices. A failed or cut-short write leaves the stream unusable, so it
// closes the connection.
//
// A frame, once begun, is written whole whatever happens to its caller's
// context: the connection is shared, and a frame cut off by one caller's
// deadline would cost every other request on it. So ctx is checked only
// before the first byte, and the socket's write deadline is IOTimeout from
// now, which a peer that stops reading cannot hold us past. The deadline is
// moved only when it must be (already passed, or more than a second
// short), which keeps timer updates off the per-frame path.
func (c *conn) send(ctx context.Context, head []byte, data [][]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.sendLocked(ctx, head, data)
}

// sendLocked is send with c.wmu held.
func (c *conn) sendLocked(ctx context.Context, head []byte, data [][]byte) error {
	if err := ctx.Err(); err != nil {
		return err // nothing written: the stream is intact
	}
	now := time.Now()
	dl := now.Add(c.ep.cfg.IOTimeout)
	if c.wdl.IsZero() || c.wdl.Before(now) || dl.Sub(c.wdl) > time.Second {
		c.nc.SetWriteDeadline(dl)
		c.wdl = dl
	}
	size := 0
	for _, d := range data {
		size += len(d)
	}
	var err error
	if size == 0 {
		_, err = c.nc.Write(head)
	} else {
		err = c.writeData(head, data)
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

// writeData writes head, then data and, if head's flags ask for it, the
// data's CRC trailer, in gathered writes of about crcChunk bytes, each
// checksummed just before it is written.
func (c *conn) writeData(head []byte, data [][]byte) error {
	check := head[20]&flagDataCRC != 0
	c.iov = append(c.iov[:0], head)
	gathered := 0
	crc := uint32(0)
	for _, d := range data {
		for len(d) > 0 {
			n := len(d)
			if check {
				n = min(n, crcChunk-gathered)
				crc = crc32.Update(crc, castagnoli, d[:n])
			}
			c.iov = append(c.iov, d[:n])
			gathered += n
			d = d[n:]
			if check && gathered == crcChunk {
				if err := c.flush(); err != nil {
					return err
				}
				gathered = 0
			}
		}
	}
	if check {
		binary.LittleEndian.PutUint32(c.trailer[:], crc)
		c.iov = append(c.iov, c.trailer[:])
	}
	return c.flush()
}

// flush writes the gathered slices in c.iov.
func (c *conn) flush() error {
	iov := c.iov
	_, err := c.iov.WriteTo(c.nc)
	clear(iov)
	c.iov = iov[:0]
	return err
}

// roundTrip sends a request and waits for its reply. frame holds the
// header (filled in here, once the request id is known) and the meta;
// data follows it on the wire, and a read reply's data lands in dsts. It
// returns a call reply's body (a pooled buffer the caller must put back).
//
// A request keeps its in-flight slot until its reply arrives or the
// connection dies, even when the caller stops waiting: the peer still counts
// it, and the slots are how we keep to the peer's limit.
func (c *conn) roundTrip(ctx context.Context, h header, frame []byte, data, dsts [][]byte) ([]byte, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, c.lostErr()
	}
	p := getPending(h.typ + 1)
	p.dsts = append(p.dsts, dsts...)
	id, err := c.register(p)
	if err != nil {
		<-c.sem
		putPending(p)
		return nil, err
	}
	h.id = id
	h.encode(frame, frame[headerSize:])
	if err := c.send(ctx, frame, data); err != nil {
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
		// caller's buffer, which must not be handed back before it is done.
		// Give it a moment; then cut the connection so it stops at once.
		t := time.NewTimer(replyGrace)
		select {
		case <-p.done:
		case <-t.C:
			c.nc.SetReadDeadline(time.Now())
			<-p.done
		}
		t.Stop()
		if p.err != nil {
			p.err = ctx.Err()
		}
	}
	<-c.sem
	meta, err := p.meta, p.err
	putPending(p)
	return meta, err
}

// replyGrace is how long a caller whose deadline passed waits for a reply
// that is already being read before cutting the connection.
const replyGrace = 250 * time.Millisecond

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
