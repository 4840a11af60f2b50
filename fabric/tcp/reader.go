package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"google.golang.org/protobuf/proto"
)

// work is a request of the peer's, read off the socket and waiting for its
// reply.
type work struct {
	typ   uint8  // typeCall, typeRead or typeWrite
	id    uint64 // the peer's request id
	meta  []byte // a call's meta (pooled)
	spans []fabric.Span
	total uint64 // bytes in spans
	err   error  // reply with this error
}

// readLoop reads frames until the connection fails, then closes it. When it
// reads a request of the peer's it has another worker take over the socket
// and serves the request itself: handing on the socket rather than the
// request lets the reply go out before the next read parks, which is most
// of a small request's latency.
func (c *conn) readLoop() {
	var w work
	err := c.readFrames(&w)
	if err == nil {
		c.serve(&w)
		return
	}
	c.close(err)
	if !errors.Is(err, fabric.ErrClosed) && !errors.Is(err, net.ErrClosed) {
		c.ep.log.Debug("fabric connection closed", "peer", c.peer, "err", err)
	}
}

// readFrames reads frames until one is a request, which it leaves in w after
// starting the next reader, or until the connection fails.
func (c *conn) readFrames(w *work) error {
	for {
		h, err := c.fr.header()
		if err != nil {
			return err
		}
		if isReply(h.typ) {
			if err := c.readReply(h); err != nil {
				return err
			}
			continue
		}
		if h.flags&flagPosted != 0 {
			if err := c.readPostedWrite(h); err != nil {
				return err
			}
			continue
		}
		if err := c.admit(); err != nil {
			return err
		}
		*w = work{typ: h.typ, id: h.id}
		switch h.typ {
		case typeCall:
			err = c.readCall(h, w)
		case typeRead:
			err = c.readReadRequest(h, w)
		case typeWrite:
			err = c.readWriteRequest(h, w)
		}
		if err != nil {
			return err
		}
		c.ep.startReader(c)
		return nil
	}
}

// payloadDeadline bounds how long a frame's bulk data may take to arrive, so
// a peer that stalls mid-frame cannot pin a region (or a caller's buffer).
func (c *conn) payloadDeadline(h header) func() {
	if h.dataLen == 0 {
		return func() {}
	}
	c.nc.SetReadDeadline(time.Now().Add(c.ep.cfg.IOTimeout))
	return func() { c.nc.SetReadDeadline(time.Time{}) }
}

func (c *conn) readReply(h header) error {
	p := c.claim(h.id)
	if p == nil {
		return fmt.Errorf("%w: reply to unknown request %d", fabric.ErrProtocol, h.id)
	}
	if p.abandoned {
		// The waiter gave up (deadline); drop the reply unread.
		c.retire(p)
		if _, err := c.fr.br.Discard(int(h.metaLen)); err != nil {
			return err
		}
		return c.fr.skipData(h)
	}
	err := c.fillReply(h, p)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%w: %s: %v", fabric.ErrPeerClosed, c.peer, err)
	}
	p.done <- struct{}{}
	return err
}

// fillReply completes p from the reply h. It returns an error only when the
// connection must close; a failed request is reported in p.err.
func (c *conn) fillReply(h header, p *pending) error {
	if h.status != fabric.CodeOK {
		var msg [maxErrorMsg]byte
		if err := c.fr.meta(h, msg[:h.metaLen]); err != nil {
			return err
		}
		p.err = fabric.RemoteError(h.status, string(msg[:h.metaLen]))
		return nil
	}
	if h.typ != p.typ {
		return fmt.Errorf("%w: reply type %d to a request expecting %d", fabric.ErrProtocol, h.typ, p.typ)
	}
	switch h.typ {
	case typeCallReply:
		p.meta = c.ep.bufs.get(int(h.metaLen))
		if err := c.fr.meta(h, p.meta); err != nil {
			return err
		}
		c.mu.Lock()
		p.err = p.posted
		c.mu.Unlock()
		return nil
	case typeWriteReply:
		if h.metaLen != 0 {
			return fmt.Errorf("%w: write reply with meta", fabric.ErrProtocol)
		}
		return c.fr.meta(h, nil)
	}
	// typeReadReply
	total := 0
	for _, d := range p.dsts {
		total += len(d)
	}
	if h.metaLen != 0 || uint64(h.dataLen) != uint64(total) {
		return fmt.Errorf("%w: read reply of %d bytes for %d requested", fabric.ErrProtocol, h.dataLen, total)
	}
	if err := c.fr.meta(h, nil); err != nil {
		return err
	}
	defer c.payloadDeadline(h)()
	ok, err := c.fr.data(h, p.dsts)
	if err != nil {
		return err
	}
	if !ok {
		p.err = fmt.Errorf("read from %s: %w", c.peer, fabric.ErrChecksum)
	}
	return nil
}

// admit counts one more of the peer's requests. A peer that exceeds the
// limit it agreed to in the handshake is cut off: that is what bounds the
// memory and goroutines it can make us spend.
func (c *conn) admit() error {
	if c.serving.Add(1) > int32(c.ep.lim.maxInFlight) {
		return fmt.Errorf("%w: peer exceeded %d requests in flight", fabric.ErrProtocol, c.ep.lim.maxInFlight)
	}
	return nil
}

// readCall reads a call's meta into a pooled buffer.
func (c *conn) readCall(h header, w *work) error {
	w.meta = c.ep.bufs.get(int(h.metaLen))
	if err := c.fr.meta(h, w.meta); err != nil {
		c.ep.bufs.put(w.meta)
		return err
	}
	return nil
}

// readDescriptors reads a one-sided request's descriptors and acquires the
// regions they name; w.err says why not when they cannot be served.
func (c *conn) readDescriptors(h header, w *work, want fabric.Access) error {
	meta := c.ep.bufs.get(int(h.metaLen))
	defer c.ep.bufs.put(meta)
	if err := c.fr.meta(h, meta); err != nil {
		return err
	}
	w.spans, w.total, w.err = c.acquireAll(meta, want)
	return nil
}

// readReadRequest takes the peer's pull: the reply streams straight out of
// our registered regions.
func (c *conn) readReadRequest(h header, w *work) error {
	if err := c.readDescriptors(h, w, fabric.AccessRemoteRead); err != nil {
		return err
	}
	if w.err == nil && w.total > maxData {
		releaseAll(w.spans)
		w.spans, w.err = nil, fmt.Errorf("%w: read of %d bytes", fabric.ErrBadRequest, w.total)
	}
	return nil
}

// readWriteRequest takes the peer's push: its bytes go from the socket
// straight into our registered regions.
func (c *conn) readWriteRequest(h header, w *work) error {
	if err := c.readDescriptors(h, w, fabric.AccessRemoteWrite); err != nil {
		return err
	}
	if w.err != nil {
		// Refused: the bytes are drained unread, never stored or buffered.
		return c.fr.skipData(h)
	}
	defer func() {
		releaseAll(w.spans)
		w.spans = nil
	}()
	if w.total != uint64(h.dataLen) {
		return fmt.Errorf("%w: write of %d bytes carries %d", fabric.ErrProtocol, w.total, h.dataLen)
	}
	var one [1][]byte
	dsts := one[:0]
	if len(w.spans) > 1 {
		dsts = make([][]byte, 0, len(w.spans))
	}
	for _, s := range w.spans {
		dsts = append(dsts, s.B)
	}
	stop := c.payloadDeadline(h)
	ok, err := c.fr.data(h, dsts)
	stop()
	if err != nil {
		return err
	}
	if !ok {
		w.err = fmt.Errorf("write from %s: %w", c.peer, fabric.ErrChecksum)
		c.ep.log.Warn("fabric write payload failed its checksum", "peer", c.peer)
	}
	return nil
}

// readPostedWrite stores a push the peer posted ahead of its reply to our
// call h.id (see flagPosted). It is read inline, like a reply: it needs no
// worker and sends nothing back. A push for a call we no longer wait for is
// drained unread; one that cannot be stored fails the call.
func (c *conn) readPostedWrite(h header) error {
	c.mu.Lock()
	p := c.pending[h.id]
	waiting := p != nil && !p.abandoned && p.typ == typeCallReply
	c.mu.Unlock()
	if !waiting {
		meta := c.ep.bufs.get(int(h.metaLen))
		defer c.ep.bufs.put(meta)
		if err := c.fr.meta(h, meta); err != nil {
			return err
		}
		return c.fr.skipData(h)
	}
	var w work
	if err := c.readWriteRequest(h, &w); err != nil {
		return err
	}
	if w.err != nil {
		c.mu.Lock()
		if p := c.pending[h.id]; p != nil && p.posted == nil {
			p.posted = fmt.Errorf("push from %s ahead of the reply: %w", c.peer, w.err)
		}
		c.mu.Unlock()
	}
	return nil
}

// acquireAll checks every descriptor in meta against the region table and
// holds the spans. On error nothing stays held.
func (c *conn) acquireAll(meta []byte, want fabric.Access) ([]fabric.Span, uint64, error) {
	n := len(meta) / descSize
	spans := make([]fabric.Span, 0, n)
	total := uint64(0)
	for i := 0; i < n; i++ {
		d := getDesc(meta[i*descSize:])
		s, err := c.ep.regions.Acquire(d.key, d.off, d.n, want)
		if err != nil {
			releaseAll(spans)
			if n > 1 {
				err = fmt.Errorf("range %d: %w", i, err)
			}
			return nil, 0, err
		}
		spans = append(spans, s)
		total += uint64(d.n)
	}
	return spans, total, nil
}

func releaseAll(spans []fabric.Span) {
	for _, s := range spans {
		s.Release()
	}
}

// serve sends the reply to a request of the peer's, running its handler first
// if it is a call. Every path ends in exactly one sendReply, which gives the
// request's in-flight slot back.
func (c *conn) serve(w *work) {
	h := header{typ: w.typ + 1, id: w.id}
	switch {
	case w.typ == typeCall:
		c.serveCall(h, w.id, w.meta)
		return
	case w.err != nil:
		c.sendReply(c.errorFrame(h, w.err), nil)
	case w.typ == typeRead:
		defer releaseAll(w.spans)
		var one [1][]byte
		data := one[:0]
		for _, s := range w.spans {
			data = append(data, s.B)
		}
		h.dataLen, h.flags = uint32(w.total), c.ep.dataFlags(w.total)
		frame := c.ep.bufs.get(headerSize)
		h.encode(frame, nil)
		c.sendReply(frame, data)
	default: // typeWrite, done
		frame := c.ep.bufs.get(headerSize)
		h.encode(frame, nil)
		c.sendReply(frame, nil)
	}
}

// sendReply sends a reply frame, returns it to the pool and gives the
// request's in-flight slot back. The slot is freed once we hold the write
// lock, before any byte of the reply can reach the peer: a peer that sends
// its next request as soon as a reply arrives must find the slot free, and
// replies still waiting for the lock keep theirs, so the goroutines a peer
// can park here stay bounded by the limit (plus the one writing).
func (c *conn) sendReply(frame []byte, data [][]byte) {
	c.wmu.Lock()
	c.serving.Add(-1)
	err := c.sendLocked(c.ep.ctx, frame, data)
	c.wmu.Unlock()
	if err != nil {
		c.ep.log.Debug("fabric reply not sent", "peer", c.peer, "err", err)
	}
	c.ep.bufs.put(frame)
}

func (c *conn) serveCall(h header, id uint64, meta []byte) {
	resp, err := c.runHandler(id, meta)
	c.ep.bufs.put(meta)
	if err != nil {
		c.sendReply(c.errorFrame(h, err), nil)
		return
	}
	size := proto.Size(resp)
	frame := c.ep.bufs.get(headerSize + size)
	body, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(frame[headerSize:headerSize], resp)
	switch {
	case err != nil:
		err = fmt.Errorf("%w: marshal response: %v", fabric.ErrInternal, err)
	case uint32(len(body)) > c.peerLim.maxMeta:
		err = fmt.Errorf("%w: response of %d bytes exceeds the caller's limit %d", fabric.ErrInternal, len(body), c.peerLim.maxMeta)
	}
	if err != nil {
		c.ep.bufs.put(frame)
		c.sendReply(c.errorFrame(h, err), nil)
		return
	}
	h.metaLen = uint32(len(body))
	h.encode(frame, body)
	c.sendReply(frame[:headerSize+len(body)], nil)
}

// runHandler decodes a call's meta and runs its handler under the caller's
// deadline, turning a panic into an error for the caller. The handler's
// context names the call (servingCall), so that the handler's pushes to the
// caller ride ahead of the reply.
func (c *conn) runHandler(id uint64, meta []byte) (resp proto.Message, err error) {
	if len(meta) < 9 || len(meta) < 9+int(meta[8]) {
		return nil, fmt.Errorf("%w: short call header", fabric.ErrBadRequest)
	}
	timeout := time.Duration(binary.LittleEndian.Uint64(meta))
	method := string(meta[9 : 9+int(meta[8])])
	body := meta[9+int(meta[8]):]
	h := c.ep.Lookup(method)
	if h == nil {
		return nil, fmt.Errorf("%w: %q", fabric.ErrUnknownMethod, method)
	}
	ctx := c.ep.ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ctx = context.WithValue(ctx, servingKey{}, servingCall{c: c, id: id})
	defer func() {
		if r := recover(); r != nil {
			c.ep.log.Error("fabric handler panicked", "method", method, "peer", c.peer, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, fmt.Errorf("%w: %s panicked: %v", fabric.ErrInternal, method, r)
		}
	}()
	return h(ctx, c.peer, body)
}

// errorFrame encodes an error reply to h (pooled buffer).
func (c *conn) errorFrame(h header, err error) []byte {
	msg := err.Error()
	if len(msg) > maxErrorMsg {
		msg = msg[:maxErrorMsg]
	}
	h.status = fabric.CodeOf(err)
	h.metaLen, h.dataLen = uint32(len(msg)), 0
	frame := c.ep.bufs.get(headerSize + len(msg))
	copy(frame[headerSize:], msg)
	h.encode(frame, frame[headerSize:])
	return frame
}

// servingKey is the context key of the call a handler is serving.
type servingKey struct{}

// servingCall is the call a handler is serving: the connection it came in on
// and the caller's request id.
type servingCall struct {
	c  *conn
	id uint64
}
