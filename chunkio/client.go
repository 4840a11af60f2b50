package chunkio

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// Client writes and reads chunks on storage nodes: writes go to a chain's
// head, which pulls the bytes from the client's registered buffer; reads go
// to any serving replica, which pushes the bytes into it. It retries what new
// routing can cure, with the same sequence number, so a retried write is
// applied once. The SDK builds its file I/O on it.
type Client struct {
	ep      fabric.Endpoint
	routing routing.Provider
	id      uint64
	seq     atomic.Uint64
	next    atomic.Uint32 // spreads reads over replicas

	// AttemptTimeout bounds one attempt before the client looks at the
	// routing again (default 5s).
	AttemptTimeout time.Duration
	// OnRetry, when set, is called with each error an attempt is retried
	// after (for metrics); set it before the client is used.
	OnRetry func(error)
}

// NewClient returns a client on ep.
func NewClient(ep fabric.Endpoint, routing routing.Provider) *Client {
	var b [8]byte
	rand.Read(b[:])
	return &Client{ep: ep, routing: routing, id: binary.LittleEndian.Uint64(b[:]), AttemptTimeout: 5 * time.Second}
}

// WriteRegistered writes data, which must lie in mr at offset off, into
// chunk at chunkOff; full replaces the chunk's content. It returns the
// committed version.
func (c *Client) WriteRegistered(ctx context.Context, chain routing.ChainID, chunk ID, chunkOff uint32, full bool, mr fabric.MR, off int, data []byte) (uint64, error) {
	rb := mr.Remote(off, len(data))
	req := &storagepb.UpdateRequest{
		Chain: uint32(chain), Chunk: chunk.Proto(), Offset: chunkOff, Length: uint32(len(data)), Crc: CRC(data),
		Src:    &storagepb.RemoteBuf{Node: string(rb.Node), Key: rb.Key, Offset: rb.Offset, Len: rb.Len},
		Client: c.id, Seq: c.seq.Add(1), FullChunk: full,
	}
	var resp storagepb.UpdateReply
	err := c.retry(ctx, func(ctx context.Context, r *routing.Routing, ch routing.Chain) error {
		head, err := writable(r, ch)
		if err != nil {
			return err
		}
		req.ChainVer, req.Target = ch.Version, uint32(head)
		return c.ep.Call(ctx, r.Targets[head].Node, MethodUpdate, req, &resp)
	}, chain)
	if err != nil {
		return 0, fmt.Errorf("write chunk %v: %w", chunk, err)
	}
	return resp.CommitVer, nil
}

// Remove deletes chunk from every replica of its chain (sent to the head).
// Removing a chunk that does not exist succeeds.
func (c *Client) Remove(ctx context.Context, chain routing.ChainID, chunk ID) error {
	err := c.retry(ctx, func(ctx context.Context, r *routing.Routing, ch routing.Chain) error {
		head, err := servingHead(ch)
		if err != nil {
			return err
		}
		req := &storagepb.RemoveRequest{Chain: uint32(chain), ChainVer: ch.Version, Target: uint32(head), Chunk: chunk.Proto()}
		var resp storagepb.RemoveReply
		return c.ep.Call(ctx, r.Targets[head].Node, MethodRemove, req, &resp)
	}, chain)
	if err != nil {
		return fmt.Errorf("remove chunk %v: %w", chunk, err)
	}
	return nil
}

// ReadRegistered reads chunk bytes at chunkOff into buf, which must lie in
// mr at offset off. It returns how many bytes the chunk had there and the
// version read. failIfDirty asks for ErrNotCommitted rather than a query of
// the tail when an update is in flight.
func (c *Client) ReadRegistered(ctx context.Context, chain routing.ChainID, chunk ID, chunkOff uint32, mr fabric.MR, off int, buf []byte, failIfDirty bool) (int, uint64, error) {
	rb := mr.Remote(off, len(buf))
	var res *storagepb.ReadResult
	err := c.retry(ctx, func(ctx context.Context, r *routing.Routing, ch routing.Chain) error {
		serving := ch.Serving()
		if len(serving) == 0 {
			return fmt.Errorf("chain %d: %w", chain, ErrUnavailable)
		}
		t := serving[int(c.next.Add(1))%len(serving)]
		req := &storagepb.ReadRequest{FailIfDirty: failIfDirty, Entries: []*storagepb.ReadEntry{{
			Chain: uint32(chain), ChainVer: ch.Version, Inode: chunk.Inode, Index: chunk.Index, Offset: chunkOff, Length: uint32(len(buf)),
			DstKey: rb.Key, DstOffset: rb.Offset, Target: uint32(t),
		}}}
		var resp storagepb.ReadReply
		if err := c.ep.Call(ctx, r.Targets[t].Node, MethodRead, req, &resp); err != nil {
			return err
		}
		if len(resp.Results) != 1 {
			return fmt.Errorf("%w: %d results for 1 read", fabric.ErrProtocol, len(resp.Results))
		}
		res = resp.Results[0]
		if int(res.Length) > len(buf) {
			return fmt.Errorf("%w: %d bytes read into %d", fabric.ErrProtocol, res.Length, len(buf))
		}
		if res.Code != 0 {
			err := fabric.RemoteError(fabric.Code(res.Code), res.Error)
			if failIfDirty && errors.Is(err, ErrNotCommitted) {
				return finalError{err}
			}
			return err
		}
		return nil
	}, chain)
	if err != nil {
		return 0, 0, fmt.Errorf("read chunk %v: %w", chunk, err)
	}
	mr.Fence()
	// The bytes came from disk checked block by block; this closes the loop
	// to the client's memory, whatever the wire did.
	if CRC(buf[:res.Length]) != res.Crc {
		return 0, 0, fmt.Errorf("read chunk %v: bytes received: %w", chunk, ErrChecksum)
	}
	return int(res.Length), res.Version, nil
}

// writable returns the chain's head, if the chain takes writes: its head
// serves (a chain whose last serving replica is down serves nothing until
// it returns), and no member's disk is full (then the write fails at once,
// not after every replica tried).
func writable(r *routing.Routing, ch routing.Chain) (routing.TargetID, error) {
	head, err := servingHead(ch)
	if err != nil {
		return 0, err
	}
	for _, t := range ch.Targets {
		if r.Targets[t].Full {
			return 0, finalError{fmt.Errorf("chain %d: target %d on %s is full: %w", ch.ID, t, r.Targets[t].Node, ErrNoSpace)}
		}
	}
	return head, nil
}

// servingHead is the chain's head, if it serves: a chain whose last serving
// replica is down (kept, offline, at its head) takes nothing until it
// returns.
func servingHead(ch routing.Chain) (routing.TargetID, error) {
	head := ch.Targets[0]
	if st := ch.State(head); st != routing.Serving {
		return 0, fmt.Errorf("chain %d: head %d is %v: %w", ch.ID, head, st, ErrUnavailable)
	}
	return head, nil
}

// retry runs attempt against the chain's current routing until it succeeds,
// fails for good, or ctx ends.
func (c *Client) retry(ctx context.Context, attempt func(context.Context, *routing.Routing, routing.Chain) error, chain routing.ChainID) error {
	for {
		changed := c.routing.Changed()
		r := c.routing.Routing()
		ch, ok := r.Chains[chain]
		var err error
		if !ok || len(ch.Targets) == 0 {
			err = fmt.Errorf("chain %d has no targets: %w", chain, ErrUnavailable)
		} else {
			actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
			err = attempt(actx, r, ch)
			cancel()
		}
		if err == nil {
			return nil
		}
		var final finalError
		if errors.As(err, &final) {
			return final.error
		}
		if !Retryable(err) || ctx.Err() != nil {
			return err
		}
		if c.OnRetry != nil {
			c.OnRetry(err)
		}
		select {
		case <-changed:
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
	}
}

// finalError ends retries: the caller asked for this answer.
type finalError struct{ error }

func (f finalError) Unwrap() error { return f.error }

// BatchRead is one range of a batched read: Dst.Len bytes of chunk Chunk
// (on chain Chain) at Offset, into Dst, memory registered with the client's
// own endpoint (a storage node pushes only to its caller).
type BatchRead struct {
	Chain  routing.ChainID
	Chunk  ID
	Offset uint32
	Dst    fabric.RemoteBuf
	// Set by ReadBatch: bytes read (short at a chunk's end), and the error
	// for this range alone.
	N   int
	CRC uint32 // of the N bytes, for the caller to check in Dst
	// Checked: the node summed the bytes as it stored them in Dst, in this
	// process (fabric.SummingEndpoint), and they matched CRC; the caller
	// need not check them again.
	Checked bool
	Err     error
}

// ReadBatch reads many ranges with one call per storage node: each range
// goes to a serving replica of its chain, ranges for the same node travel
// together, and each node pushes the bytes straight into Dst. Per-range
// failures are in each BatchRead's Err; the error returned is for the batch
// as a whole (routing, a node unreachable).
func (c *Client) ReadBatch(ctx context.Context, reads []BatchRead) error {
	r := c.routing.Routing()
	type group struct {
		node    fabric.NodeID
		entries []*storagepb.ReadEntry
		idx     []int
	}
	// One allocation for the whole batch's entries, and each chain's
	// serving replicas looked up once.
	entries := make([]storagepb.ReadEntry, len(reads))
	serving := map[routing.ChainID][]routing.TargetID{}
	var groups []*group
	for i := range reads {
		rd := &reads[i]
		if rd.Dst.Node != c.ep.ID() {
			rd.Err = fmt.Errorf("%w: read into %s, memory of another endpoint than %s", fabric.ErrBadRequest, rd.Dst, c.ep.ID())
			continue
		}
		ch, ok := r.Chains[rd.Chain]
		srv, seen := serving[rd.Chain]
		if !seen {
			srv = ch.Serving()
			serving[rd.Chain] = srv
		}
		if !ok || len(srv) == 0 {
			rd.Err = fmt.Errorf("chain %d: %w", rd.Chain, ErrUnavailable)
			continue
		}
		t := srv[int(c.next.Add(1))%len(srv)]
		node := r.Targets[t].Node
		var g *group
		for _, h := range groups {
			if h.node == node {
				g = h
				break
			}
		}
		if g == nil {
			g = &group{node: node, entries: make([]*storagepb.ReadEntry, 0, len(reads)), idx: make([]int, 0, len(reads))}
			groups = append(groups, g)
		}
		e := &entries[i]
		e.Chain, e.ChainVer, e.Inode, e.Index, e.Offset, e.Length, e.Target = uint32(rd.Chain), ch.Version, rd.Chunk.Inode, rd.Chunk.Index, rd.Offset, rd.Dst.Len, uint32(t)
		e.DstKey, e.DstOffset = rd.Dst.Key, rd.Dst.Offset
		g.entries = append(g.entries, e)
		g.idx = append(g.idx, i)
	}
	_, summing := c.ep.(fabric.SummingEndpoint)
	call := func(g *group) error {
		var resp storagepb.ReadReply
		err := c.ep.Call(ctx, g.node, MethodRead, &storagepb.ReadRequest{Entries: g.entries}, &resp)
		if err == nil && len(resp.Results) != len(g.entries) {
			err = fmt.Errorf("%w: %d results for %d reads", fabric.ErrProtocol, len(resp.Results), len(g.entries))
		}
		if err == nil {
			for k, res := range resp.Results {
				rd := &reads[g.idx[k]]
				if res.Code != 0 {
					rd.Err = fabric.RemoteError(fabric.Code(res.Code), res.Error)
				}
				// Only a copy within this process can be checked by the
				// node: from a peer over a wire the flag means nothing.
				rd.N, rd.CRC, rd.Checked = int(res.Length), res.Crc, res.Checked && summing
			}
		}
		return err
	}
	if len(groups) == 0 {
		return nil
	}
	// The first node's call runs here, the others alongside it.
	errs := make(chan error, len(groups)-1)
	for _, g := range groups[1:] {
		go func() { errs <- call(g) }()
	}
	first := call(groups[0])
	for range groups[1:] {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
