//go:build verbs

package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicefs/sluice/fabric"
)

// oneSided posts ops to node as RDMA READs or WRITEs, in linked chains of at
// most maxChain, staging those whose local buffer is not registered.
func (ep *Endpoint) oneSided(ctx context.Context, node fabric.NodeID, verb fabric.Verb, ops []fabric.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ep.enter(); err != nil {
		return err
	}
	defer ep.wg.Done()
	c, err := ep.conn(ctx, node)
	if err != nil {
		return err
	}
	write := verb == fabric.VerbWrite
	var direct []rdmaOp
	var staged, empty []fabric.Op
	for _, op := range ops {
		if len(op.Local) == 0 {
			// The NIC checks no key for a zero-length transfer; the peer does.
			empty = append(empty, op)
			continue
		}
		lkey, laddr, ok := ep.findLocal(op.Local)
		if !ok {
			staged = append(staged, op)
			continue
		}
		direct = append(direct, rdmaOp{laddr: laddr, len: uint32(len(op.Local)), lkey: lkey,
			raddr: op.Remote.Offset, rkey: rkeyOf(op.Remote.Key)})
	}
	if len(empty) > 0 {
		if err := ep.diagnose(ctx, node, verb, empty, nil); err != nil {
			return err
		}
	}
	for len(direct) > 0 && err == nil {
		n := min(len(direct), maxChain)
		err = c.rdma(ctx, write, direct[:n])
		direct = direct[n:]
	}
	for _, op := range staged {
		if err != nil {
			break
		}
		err = ep.staged(ctx, c, write, op)
	}
	if errors.Is(err, errRemoteAccess) {
		return ep.diagnose(ctx, node, verb, ops, err)
	}
	return err
}

// maxChain bounds the work requests posted as one chain (the send queue is
// sized for it).
const maxChain = 64

// rdma posts one chain and waits for its completion.
func (c *rc) rdma(ctx context.Context, write bool, ops []rdmaOp) error {
	if err := c.oneSided.acquire(ctx); err != nil {
		return err
	}
	defer c.oneSided.grant(1)
	return c.postAndWait(func(id uint64) error { return c.qp.postRDMA(id, write, ops) })
}

// postAndWait posts one work request (or chain) under a fresh completion id
// and waits for its completion. A posted request cannot be recalled, so the
// wait ignores the caller's context (it is bounded by IOTimeout): when it
// returns, the memory the request named is the caller's again. A failed post
// or an error completion leaves an RC queue pair in the error state, so
// either fails the connection.
func (c *rc) postAndWait(post func(id uint64) error) error {
	id, w, err := c.ep.comps.expect()
	if err != nil {
		return err
	}
	if err := post(id); err != nil {
		c.ep.comps.forget(id)
		c.fail(err)
		return err
	}
	if err := c.await(w); err != nil {
		c.fail(err)
		return err
	}
	return nil
}

// staged moves op through the registered bounce buffer, a piece at a time.
func (ep *Endpoint) staged(ctx context.Context, c *rc, write bool, op fabric.Op) error {
	for done := 0; done < len(op.Local); {
		var seg int
		select {
		case seg = <-ep.stageSeg:
		case <-ctx.Done():
			return ctx.Err()
		}
		n := min(ep.piece, len(op.Local)-done)
		buf := ep.stage.buf[seg*ep.piece : seg*ep.piece+n]
		if write {
			copy(buf, op.Local[done:done+n])
		}
		err := c.rdma(ctx, write, []rdmaOp{{laddr: addrOf(buf), len: uint32(n), lkey: ep.stage.lkey(),
			raddr: op.Remote.Offset + uint64(done), rkey: rkeyOf(op.Remote.Key)}})
		if err == nil && !write {
			copy(op.Local[done:done+n], buf)
		}
		ep.stageSeg <- seg
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

// checkMethod is the RPC a peer answers to say why it refused a one-sided
// operation: the NIC reports key, bounds and rights failures alike.
const checkMethod = "fabric.verbs.check"

func (ep *Endpoint) serveCheck(ctx context.Context, peer fabric.NodeID, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
	b := req.Value
	if len(b) != 21 {
		return nil, fmt.Errorf("%w: check of %d bytes", fabric.ErrBadRequest, len(b))
	}
	key, off := binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
	n, want := binary.LittleEndian.Uint32(b[16:]), fabric.Access(b[20])
	s, err := ep.regions.Acquire(key, off, n, want)
	if err != nil {
		return nil, err
	}
	s.Release()
	return &wrapperspb.BytesValue{}, nil
}

// diagnose asks node which of ops it refuses and returns that error, as
// fabric/tcp would have; the connection the NIC broke is rebuilt on the way.
func (ep *Endpoint) diagnose(ctx context.Context, node fabric.NodeID, verb fabric.Verb, ops []fabric.Op, cause error) error {
	want := fabric.AccessRemoteRead
	if verb == fabric.VerbWrite {
		want = fabric.AccessRemoteWrite
	}
	for i, op := range ops {
		b := make([]byte, 21)
		binary.LittleEndian.PutUint64(b[0:], op.Remote.Key)
		binary.LittleEndian.PutUint64(b[8:], op.Remote.Offset)
		binary.LittleEndian.PutUint32(b[16:], op.Remote.Len)
		b[20] = byte(want)
		var out wrapperspb.BytesValue
		if err := ep.Call(ctx, node, checkMethod, wrapperspb.Bytes(b), &out); err != nil {
			var fe *fabric.Error
			if errors.As(err, &fe) {
				if len(ops) > 1 {
					return fmt.Errorf("range %d: %w", i, err)
				}
				return err
			}
			if cause == nil {
				return err
			}
			return fmt.Errorf("%w (diagnosis failed: %v)", cause, err)
		}
	}
	return cause
}
