package shmring

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Hand-over: the client sends "SLSH1" with four descriptors attached
// (SCM_RIGHTS): Iov segment, Ior segment, submission bell, completion bell.
// The agent answers one byte: 0 when it took them. After that the
// connection carries control messages (see Call) and its end tells the
// agent the client died.
const helloMsg = "SLSH1"

// Client is an application's end: its Iov (the data buffer the agent reads
// and writes), its Ior (the rings), the two bells, and the connection whose
// end tells the agent it died.
type Client struct {
	Iov  *Segment
	ior  *Segment
	Ring *Ring
	sq   *Bell // rung by the client after submitting
	cq   *Bell // rung by the agent after completing

	callMu sync.Mutex // one control message at a time
	broken error      // set when a call was cut short mid-message
	conn   *net.UnixConn

	stop chan struct{}
	done chan struct{}
}

// Dial connects to the agent at path with an Iov of iovSize bytes and rings
// of depth entries, on huge pages when wantHuge and reserved (normal pages
// otherwise: Iov.Huge says which).
func Dial(path string, iovSize, depth int, wantHuge bool) (*Client, error) {
	c := &Client{stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	fail := func(err error) (*Client, error) {
		c.release()
		return nil, err
	}
	if c.Iov, err = NewSegment("sluice-iov", iovSize, wantHuge); err != nil {
		return fail(err)
	}
	if c.ior, err = NewSegment("sluice-ior", RingSize(depth), false); err != nil {
		return fail(err)
	}
	if c.Ring, err = InitRing(c.ior.Bytes(), depth); err != nil {
		return fail(err)
	}
	c.Ring.Beat(time.Now())
	if c.sq, err = NewBell(); err != nil {
		return fail(err)
	}
	if c.cq, err = NewBell(); err != nil {
		return fail(err)
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fail(fmt.Errorf("shmring: dial agent %s: %w", path, err))
	}
	c.conn = conn
	rights := unix.UnixRights(c.Iov.Fd(), c.ior.Fd(), c.sq.Fd(), c.cq.Fd())
	if _, _, err := conn.WriteMsgUnix([]byte(helloMsg), rights, nil); err != nil {
		return fail(fmt.Errorf("shmring: hand over segments: %w", err))
	}
	var ack [1]byte
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(ack[:]); err != nil || ack[0] != 0 {
		return fail(fmt.Errorf("shmring: agent refused the segments (%v)", err))
	}
	conn.SetReadDeadline(time.Time{})
	go c.heartbeat()
	return c, nil
}

// heartbeat keeps the ring's heartbeat fresh while the client lives.
func (c *Client) heartbeat() {
	defer close(c.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.Ring.Beat(now)
		}
	}
}

// Submit queues entries and rings the agent; it returns how many fit.
func (c *Client) Submit(es []Entry) int {
	n := c.Ring.Submit(es)
	if n > 0 {
		c.sq.Ring()
	}
	return n
}

// Reap returns completions, waiting up to timeout for the first.
func (c *Client) Reap(cs []Completion, timeout time.Duration) int {
	if n := c.Ring.Reap(cs); n > 0 {
		return n
	}
	c.cq.Wait(int(timeout / time.Millisecond))
	return c.Ring.Reap(cs)
}

// Call sends a control message to the agent and returns its answer: what
// the messages mean (opening files, say) is the agent's business. An error
// the agent returned comes back as *CallError. A call cut short (ctx, a
// broken connection) leaves the control stream mid-message, so every later
// call fails too; the rings go on working.
func (c *Client) Call(ctx context.Context, req []byte) ([]byte, error) {
	if len(req) > maxFrame {
		return nil, fmt.Errorf("shmring: control message of %d bytes, limit %d", len(req), maxFrame)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("shmring: call agent: %w", err)
	}
	c.callMu.Lock()
	defer c.callMu.Unlock()
	if c.broken != nil {
		return nil, fmt.Errorf("shmring: call agent: an earlier call was cut short: %w", c.broken)
	}
	dl, _ := ctx.Deadline()
	c.conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Now()) })
	defer func() {
		stop()
		c.conn.SetDeadline(time.Time{})
	}()
	fail := func(err error) ([]byte, error) {
		// The connection's deadline may fire a moment before ctx's timer.
		if ctx.Err() != nil {
			err = ctx.Err()
		} else if !dl.IsZero() && !time.Now().Before(dl) {
			err = context.DeadlineExceeded
		}
		c.broken = err
		return nil, fmt.Errorf("shmring: call agent: %w", err)
	}
	if err := writeFrame(c.conn, 0, req); err != nil {
		return fail(err)
	}
	status, resp, err := readFrame(c.conn)
	if err != nil {
		return fail(err)
	}
	if status != 0 {
		return nil, &CallError{Msg: string(resp)}
	}
	return resp, nil
}

// CallError is an error the agent answered a control message with.
type CallError struct{ Msg string }

func (e *CallError) Error() string { return "agent: " + e.Msg }

func (c *Client) release() {
	closeEnds(c.Iov, c.ior, c.sq, c.cq)
	if c.conn != nil {
		c.conn.Close()
	}
}

// closeEnds closes one side's two segments and two bells, those it has.
func closeEnds(iov, ior *Segment, sq, cq *Bell) {
	for _, s := range []*Segment{iov, ior} {
		if s != nil {
			s.Close()
		}
	}
	for _, b := range []*Bell{sq, cq} {
		if b != nil {
			b.Close()
		}
	}
}

// Close ends the session; the agent reclaims its side.
func (c *Client) Close() error {
	close(c.stop)
	<-c.done
	c.release()
	return nil
}
