package tcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"google.golang.org/protobuf/proto"
)

// Call sends req to node's handler for method and unmarshals the reply into
// resp. The remaining time of ctx travels with the request and bounds the
// handler's context.
func (ep *Endpoint) Call(ctx context.Context, node fabric.NodeID, method string, req, resp proto.Message) error {
	if err := ep.call(ctx, node, method, req, resp); err != nil {
		return fmt.Errorf("call %s %s: %w", node, method, err)
	}
	return nil
}

func (ep *Endpoint) call(ctx context.Context, node fabric.NodeID, method string, req, resp proto.Message) error {
	if len(method) == 0 || len(method) > 255 {
		return fmt.Errorf("%w: method name of %d bytes", fabric.ErrBadRequest, len(method))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return context.DeadlineExceeded
		}
	}
	c, err := ep.conn(ctx, node)
	if err != nil {
		return err
	}
	head := 9 + len(method)
	metaLen := head + proto.Size(req)
	if uint64(metaLen) > uint64(c.peerLim.maxMeta) {
		return fmt.Errorf("%w: request of %d bytes, peer accepts %d", fabric.ErrFrameTooLarge, metaLen, c.peerLim.maxMeta)
	}
	frame := ep.bufs.get(headerSize + metaLen)
	defer ep.bufs.put(frame)
	meta := frame[headerSize:]
	binary.LittleEndian.PutUint64(meta, uint64(timeout))
	meta[8] = byte(len(method))
	copy(meta[9:], method)
	body, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(meta[head:head], req)
	if err != nil {
		return fmt.Errorf("marshal request: %w", err)
	}
	meta = meta[:head+len(body)]
	reply, err := c.roundTrip(ctx, header{typ: typeCall, metaLen: uint32(len(meta))}, frame[:headerSize+len(meta)], nil, nil)
	if reply != nil {
		defer ep.bufs.put(reply)
	}
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(reply, resp); err != nil {
		return fmt.Errorf("unmarshal response: %w", err)
	}
	return nil
}

// oneSided sends one Read or Write request covering ops (all to node) and
// waits for its reply. Read data lands straight in the ops' local slices.
func (ep *Endpoint) oneSided(ctx context.Context, node fabric.NodeID, verb fabric.Verb, ops []fabric.Op) error {
	typ := uint8(typeRead)
	if verb == fabric.VerbWrite {
		typ = typeWrite
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	total := uint64(0)
	for _, op := range ops {
		total += uint64(len(op.Local))
	}
	if total > maxData {
		return fmt.Errorf("%w: %d bytes in one batch, limit %d", fabric.ErrFrameTooLarge, total, maxData)
	}
	if s, ok := ctx.Value(servingKey{}).(servingCall); ok && typ == typeWrite && s.c.peer == node {
		// A handler pushing into its caller's memory: the push rides ahead
		// of the reply on the call's connection and the reply acknowledges
		// it (see flagPosted).
		return s.c.postWrite(ctx, s.id, ops, total)
	}
	c, err := ep.conn(ctx, node)
	if err != nil {
		return err
	}
	metaLen := len(ops) * descSize
	if uint64(metaLen) > uint64(c.peerLim.maxMeta) {
		return fmt.Errorf("%w: %d ranges in one batch, peer accepts %d", fabric.ErrFrameTooLarge, len(ops), c.peerLim.maxMeta/descSize)
	}
	frame := ep.bufs.get(headerSize + metaLen)
	defer ep.bufs.put(frame)
	putDescs(frame, ops)
	h := header{typ: typ, metaLen: uint32(metaLen)}
	var locals [1][]byte // a single op's slice list, without allocating
	lists := localLists(ops, locals[:])
	if typ == typeRead {
		_, err = c.roundTrip(ctx, h, frame, nil, lists)
		return err
	}
	h.dataLen, h.flags = uint32(total), ep.dataFlags(total)
	_, err = c.roundTrip(ctx, h, frame, lists, nil)
	return err
}

// putDescs writes ops' descriptors after the header in frame.
func putDescs(frame []byte, ops []fabric.Op) {
	for i, op := range ops {
		putDesc(frame[headerSize+i*descSize:], desc{key: op.Remote.Key, off: op.Remote.Offset, n: op.Remote.Len})
	}
}

// localLists returns ops' local slices, in one (a one-element array's
// slice, so that a single op allocates nothing) when there is one op.
func localLists(ops []fabric.Op, one [][]byte) [][]byte {
	if len(ops) == 1 {
		one[0] = ops[0].Local
		return one
	}
	lists := make([][]byte, len(ops))
	for i, op := range ops {
		lists[i] = op.Local
	}
	return lists
}

// postWrite sends ops as a push posted ahead of the reply to the peer's
// call id (see flagPosted). It returns once the bytes are on the socket;
// the peer reports a failure to store them as the call's error.
func (c *conn) postWrite(ctx context.Context, id uint64, ops []fabric.Op, total uint64) error {
	metaLen := len(ops) * descSize
	if uint64(metaLen) > uint64(c.peerLim.maxMeta) {
		return fmt.Errorf("%w: %d ranges in one batch, peer accepts %d", fabric.ErrFrameTooLarge, len(ops), c.peerLim.maxMeta/descSize)
	}
	frame := c.ep.bufs.get(headerSize + metaLen)
	defer c.ep.bufs.put(frame)
	putDescs(frame, ops)
	h := header{typ: typeWrite, id: id, metaLen: uint32(metaLen), dataLen: uint32(total), flags: c.ep.dataFlags(total) | flagPosted}
	h.encode(frame, frame[headerSize:])
	var locals [1][]byte
	return c.send(ctx, frame, localLists(ops, locals[:]))
}
