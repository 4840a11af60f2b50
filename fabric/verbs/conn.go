//go:build verbs

package verbs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/fabric"
)

// rc is a reliable connection to one peer: an RC queue pair, the TCP
// bootstrap connection kept open to notice the peer's death, and the
// credits each side granted the other.
type rc struct {
	ep   *Endpoint
	peer fabric.NodeID
	qp   *queuePair
	boot net.Conn

	credit    *credits // SENDs we may have outstanding (the peer's buffers), but one
	reserve   *credits // the one kept for credit-only messages, so credits always flow
	calls     *credits // our calls in flight: half the credits, so replies always find some
	oneSided  *credits
	ret       *creditReturn
	crediting atomic.Bool // a credit-only message is on its way
	msgSize   int         // largest message either side accepts

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan result
	err     error
	done    chan struct{}
}

type result struct {
	status fabric.Code
	body   []byte
}

// fail breaks the connection: pending calls fail with err and the next
// operation to this peer builds a new one.
func (c *rc) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if !errors.Is(err, fabric.ErrClosed) && !errors.Is(err, fabric.ErrPeerClosed) {
		err = fmt.Errorf("%w: %s: %v", fabric.ErrPeerClosed, c.peer, err)
	}
	c.err = err
	close(c.done)
	c.mu.Unlock()
	c.credit.close(err)
	c.reserve.close(err)
	c.calls.close(err)
	c.oneSided.close(err)
	c.boot.Close()
	ep := c.ep
	ep.mu.Lock()
	if ep.peers[c.peer] == c {
		delete(ep.peers, c.peer)
	}
	delete(ep.byQPN, c.qp.num())
	ep.mu.Unlock()
	// Flush what is outstanding now; the queue pair itself goes at Close,
	// once nothing can post to it any more.
	c.qp.toError()
}

// grant takes back credits the peer returned, refilling the reserve first.
func (c *rc) grant(n int) {
	if n > 0 && c.reserve.available() == 0 {
		c.reserve.grant(1)
		n--
	}
	c.credit.grant(n)
}

func (c *rc) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// sendMsg sends one message: header, then parts, in a registered send slot.
func (c *rc) sendMsg(ctx context.Context, h msgHeader, parts ...[]byte) error {
	size := msgHeaderSize
	for _, p := range parts {
		size += len(p)
	}
	if size > c.msgSize {
		return fmt.Errorf("%w: message of %d bytes, peer accepts %d", fabric.ErrFrameTooLarge, size, c.msgSize)
	}
	pool := c.credit
	if h.typ == msgCredit {
		pool = c.reserve
	}
	if err := pool.acquire(ctx); err != nil {
		return err
	}
	var slot int
	select {
	case slot = <-c.ep.sendSlots:
	case <-ctx.Done():
		pool.grant(1)
		return ctx.Err()
	}
	defer func() { c.ep.sendSlots <- slot }()
	buf := c.ep.send.buf[slot*c.ep.cfg.MsgSize : slot*c.ep.cfg.MsgSize+size]
	h.credits = c.ret.take()
	h.put(buf)
	off := msgHeaderSize
	for _, p := range parts {
		off += copy(buf[off:], p)
	}
	// The slot is reusable once the send completes, whatever ctx says.
	return c.postAndWait(func(id uint64) error { return c.qp.postSend(id, buf, c.ep.send.lkey()) })
}

// await waits for a posted work request, at most IOTimeout.
func (c *rc) await(w *waiter) error {
	t := time.NewTimer(c.ep.cfg.IOTimeout)
	defer t.Stop()
	select {
	case err := <-w.done:
		return err
	case <-t.C:
		err := fmt.Errorf("%w: %s: work request not completed in %v", fabric.ErrPeerClosed, c.peer, c.ep.cfg.IOTimeout)
		c.fail(err)
		return err
	}
}

func (c *rc) sendCredits(ctx context.Context) {
	if c.ret.owed() == 0 {
		return // a message of ours carried them meanwhile
	}
	if err := c.sendMsg(ctx, msgHeader{typ: msgCredit}); err != nil {
		c.ep.log.Debug("fabric/verbs credit message not sent", "peer", c.peer, "err", err)
	}
}

func (c *rc) deliver(h msgHeader, body []byte) {
	c.mu.Lock()
	ch := c.pending[h.id]
	delete(c.pending, h.id)
	c.mu.Unlock()
	if ch != nil {
		ch <- result{status: h.status, body: body}
	}
}

func (c *rc) call(ctx context.Context, method string, req, resp proto.Message) error {
	if len(method) == 0 || len(method) > 255 {
		return fmt.Errorf("%w: method name of %d bytes", fabric.ErrBadRequest, len(method))
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("marshal request: %w", err)
	}
	if err := c.calls.acquire(ctx); err != nil {
		return err
	}
	defer c.calls.grant(1)
	ch := make(chan result, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.next++
	id := c.next
	c.pending[id] = ch
	c.mu.Unlock()
	h := msgHeader{typ: msgCall, id: id}
	if dl, ok := ctx.Deadline(); ok {
		h.timeout = uint64(max(1, time.Until(dl)))
	}
	if err := c.sendMsg(ctx, h, []byte{byte(len(method))}, []byte(method), body); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return err
	}
	select {
	case r := <-ch:
		if r.status != fabric.CodeOK {
			return fabric.RemoteError(r.status, string(r.body))
		}
		if err := proto.Unmarshal(r.body, resp); err != nil {
			return fmt.Errorf("unmarshal response: %w", err)
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return ctx.Err()
	case <-c.done:
		return c.failure()
	}
}

func (c *rc) serveCall(h msgHeader, body []byte) {
	method, req, err := callBody(body)
	var resp proto.Message
	if err == nil {
		resp, err = c.runHandler(h, method, req)
	}
	var out []byte
	if err == nil {
		out, err = proto.Marshal(resp)
	}
	reply := msgHeader{typ: msgReply, id: h.id}
	if err == nil && msgHeaderSize+len(out) > c.msgSize {
		err = fmt.Errorf("%w: response of %d bytes exceeds the caller's limit", fabric.ErrInternal, len(out))
	}
	if err != nil {
		reply.status = fabric.CodeOf(err)
		out = []byte(err.Error())
		if len(out) > c.msgSize-msgHeaderSize {
			out = out[:c.msgSize-msgHeaderSize]
		}
	}
	if err := c.sendMsg(c.ep.ctx, reply, out); err != nil {
		c.ep.log.Debug("fabric/verbs reply not sent", "peer", c.peer, "err", err)
	}
}

func (c *rc) runHandler(h msgHeader, method string, req []byte) (resp proto.Message, err error) {
	fn := c.ep.Lookup(method)
	if fn == nil {
		return nil, fmt.Errorf("%w: %q", fabric.ErrUnknownMethod, method)
	}
	ctx := c.ep.ctx
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(h.timeout))
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, fmt.Errorf("%w: %s panicked: %v", fabric.ErrInternal, method, r)
		}
	}()
	return fn(ctx, c.peer, req)
}

// Call sends req to node's handler for method over SEND/RECV.
func (ep *Endpoint) Call(ctx context.Context, node fabric.NodeID, method string, req, resp proto.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ep.enter(); err != nil {
		return fmt.Errorf("call %s %s: %w", node, method, err)
	}
	defer ep.wg.Done()
	c, err := ep.conn(ctx, node)
	if err == nil {
		err = c.call(ctx, method, req, resp)
	}
	if err != nil {
		return fmt.Errorf("call %s %s: %w", node, method, err)
	}
	return nil
}
