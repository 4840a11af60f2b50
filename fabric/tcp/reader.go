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

// readLoop reads frames until the connection fails, then closes it.
func (c *conn) readLoop() {
	defer c.ep.wg.Done()
	err := c.readFrames()
	c.close(err)
	if !errors.Is(err, fabric.ErrClosed) && !errors.Is(err, net.ErrClosed) {
		c.ep.log.Debug("fabric connection closed", "peer", c.peer, "err", err)
	}
}

func (c *conn) readFrames() error {
	for {
		h, err := c.fr.header()
		if err != nil {
			return err
		}
		switch h.typ {
		case typeCallReply, typeReadReply, typeWriteReply:
			err = c.readReply(h)
		case typeCall:
			err = c.readCall(h)
		case typeRead:
			err = c.readReadRequest(h)
		case typeWrite:
			err = c.readWriteRequest(h)
		}
		if err != nil {
			return err
		}
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
		return c.fr.skip(uint64(h.metaLen) + uint64(h.dataLen))
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
		return c.fr.meta(h, p.meta)
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

func (c *conn) readCall(h header) error {
	if err := c.admit(); err != nil {
		return err
	}
	meta := c.ep.bufs.get(int(h.metaLen))
	if err := c.fr.meta(h, meta); err != nil {
		c.ep.bufs.put(meta)
		return err
	}
	c.ep.wg.Add(1)
	go c.serveCall(h.id, meta)
	return nil
}

func (c *conn) serveCall(id uint64, meta []byte) {
	defer c.ep.wg.Done()
	defer c.serving.Add(-1)
	resp, err := c.runHandler(meta)
	c.ep.bufs.put(meta)
	var frame []byte
	h := header{typ: typeCallReply, id: id}
	if err == nil {
		size := proto.Size(resp)
		frame = c.ep.bufs.get(headerSize + size)
		body, merr := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(frame[headerSize:headerSize], resp)
		switch {
		case merr != nil:
			err = fmt.Errorf("%w: marshal response: %v", fabric.ErrInternal, merr)
		case uint32(len(body)) > c.peerLim.maxMeta:
			err = fmt.Errorf("%w: response of %d bytes exceeds the caller's limit %d", fabric.ErrInternal, len(body), c.peerLim.maxMeta)
		default:
			h.metaLen = uint32(len(body))
			h.encode(frame, body)
			frame = frame[:headerSize+len(body)]
		}
		if err != nil {
			c.ep.bufs.put(frame)
		}
	}
	if err != nil {
		frame = c.errorFrame(h, err)
	}
	if serr := c.send(c.ep.ctx, net.Buffers{frame}); serr != nil {
		c.ep.log.Debug("fabric reply not sent", "peer", c.peer, "err", serr)
	}
	c.ep.bufs.put(frame)
}

// runHandler decodes a call's meta and runs its handler under the caller's
// deadline, turning a panic into an error for the caller.
func (c *conn) runHandler(meta []byte) (resp proto.Message, err error) {
	if len(meta) < 9 || len(meta) < 9+int(meta[8]) {
		return nil, fmt.Errorf("%w: short call header", fabric.ErrBadRequest)
	}
	timeout := time.Duration(binary.LittleEndian.Uint64(meta))
	method := string(meta[9 : 9+int(meta[8])])
	body := meta[9+int(meta[8]):]
	h := c.ep.handler(method)
	if h == nil {
		return nil, fmt.Errorf("%w: %q", fabric.ErrUnknownMethod, method)
	}
	ctx := c.ep.ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
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
	h.metaLen, h.dataLen, h.dataCRC = uint32(len(msg)), 0, 0
	frame := c.ep.bufs.get(headerSize + len(msg))
	copy(frame[headerSize:], msg)
	h.encode(frame, frame[headerSize:])
	return frame
}

// replyStatus sends a reply with no body from its own goroutine.
func (c *conn) replyStatus(typ uint8, id uint64, err error) {
	defer c.ep.wg.Done()
	defer c.serving.Add(-1)
	h := header{typ: typ, id: id}
	var frame []byte
	if err != nil {
		frame = c.errorFrame(h, err)
	} else {
		frame = c.ep.bufs.get(headerSize)
		h.encode(frame, nil)
	}
	if serr := c.send(c.ep.ctx, net.Buffers{frame}); serr != nil {
		c.ep.log.Debug("fabric reply not sent", "peer", c.peer, "err", serr)
	}
	c.ep.bufs.put(frame)
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
			for _, s := range spans {
				s.Release()
			}
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

// readMetaSmall reads a request's descriptor list into a pooled buffer.
func (c *conn) readDescriptors(h header) ([]byte, error) {
	meta := c.ep.bufs.get(int(h.metaLen))
	if err := c.fr.meta(h, meta); err != nil {
		c.ep.bufs.put(meta)
		return nil, err
	}
	return meta, nil
}

// readReadRequest serves the peer's pull: the reply streams straight out of
// our registered regions.
func (c *conn) readReadRequest(h header) error {
	if err := c.admit(); err != nil {
		return err
	}
	meta, err := c.readDescriptors(h)
	if err != nil {
		return err
	}
	spans, total, aerr := c.acquireAll(meta, fabric.AccessRemoteRead)
	c.ep.bufs.put(meta)
	c.ep.wg.Add(1)
	if aerr == nil && total > maxData {
		releaseAll(spans)
		aerr = fmt.Errorf("%w: read of %d bytes", fabric.ErrBadRequest, total)
	}
	if aerr != nil {
		go c.replyStatus(typeReadReply, h.id, aerr)
		return nil
	}
	go c.sendReadReply(h.id, spans, total)
	return nil
}

func (c *conn) sendReadReply(id uint64, spans []fabric.Span, total uint64) {
	defer c.ep.wg.Done()
	defer c.serving.Add(-1)
	defer releaseAll(spans)
	bufs := make(net.Buffers, 1, 1+len(spans))
	for _, s := range spans {
		if len(s.B) > 0 {
			bufs = append(bufs, s.B)
		}
	}
	hdr := c.ep.bufs.get(headerSize)
	defer c.ep.bufs.put(hdr)
	h := header{typ: typeReadReply, id: id, dataLen: uint32(total), dataCRC: dataCRC(bufs[1:])}
	h.encode(hdr, nil)
	bufs[0] = hdr
	ctx, cancel := context.WithTimeout(c.ep.ctx, c.ep.cfg.IOTimeout)
	defer cancel()
	if err := c.send(ctx, bufs); err != nil {
		c.ep.log.Debug("fabric read reply not sent", "peer", c.peer, "err", err)
	}
}

// readWriteRequest serves the peer's push: its bytes go from the socket
// straight into our registered regions.
func (c *conn) readWriteRequest(h header) error {
	if err := c.admit(); err != nil {
		return err
	}
	meta, err := c.readDescriptors(h)
	if err != nil {
		return err
	}
	spans, total, aerr := c.acquireAll(meta, fabric.AccessRemoteWrite)
	c.ep.bufs.put(meta)
	if aerr == nil && total != uint64(h.dataLen) {
		releaseAll(spans)
		return fmt.Errorf("%w: write of %d bytes carries %d", fabric.ErrProtocol, total, h.dataLen)
	}
	if aerr != nil {
		// Refused: the bytes are drained unread, never stored or buffered.
		if err := c.fr.skip(uint64(h.dataLen)); err != nil {
			return err
		}
		c.ep.wg.Add(1)
		go c.replyStatus(typeWriteReply, h.id, aerr)
		return nil
	}
	dsts := make([][]byte, len(spans))
	for i, s := range spans {
		dsts[i] = s.B
	}
	stop := c.payloadDeadline(h)
	ok, err := c.fr.data(h, dsts)
	stop()
	releaseAll(spans)
	if err != nil {
		return err
	}
	var werr error
	if !ok {
		werr = fmt.Errorf("write from %s: %w", c.peer, fabric.ErrChecksum)
		c.ep.log.Warn("fabric write payload failed its checksum", "peer", c.peer)
	}
	c.ep.wg.Add(1)
	go c.replyStatus(typeWriteReply, h.id, werr)
	return nil
}
