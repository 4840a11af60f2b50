package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// read serves a batch of reads and pushes the bytes into the caller's
// buffers in one round trip.
func (n *Node) read(ctx context.Context, peer fabric.NodeID, req *storagepb.ReadRequest) (*storagepb.ReadReply, error) {
	total := 0
	for _, e := range req.Entries {
		total += int(e.Length)
	}
	if total > n.cfg.MaxReadBatch {
		return nil, fmt.Errorf("%w: read batch of %d bytes, limit %d", fabric.ErrBadRequest, total, n.cfg.MaxReadBatch)
	}
	if err := n.ready(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	defer func() { n.m.readSeconds.Observe(since(t0)) }()
	// Bytes are pushed from views of the chunk files where they can be
	// (Engine.View), else copied into a pooled buffer, taken only then.
	var buf []byte
	var bp *[]byte
	defer func() {
		if bp != nil {
			readBuffers.Put(bp)
		}
	}()
	copyBuf := func(k uint32) []byte {
		if bp == nil {
			bp = readBuffers.Get().(*[]byte)
			if cap(*bp) < total {
				*bp = make([]byte, total)
			}
			buf = (*bp)[:total]
		}
		b := buf[:k:k]
		buf = buf[k:]
		return b
	}
	reply := &storagepb.ReadReply{Results: make([]*storagepb.ReadResult, len(req.Entries))}
	results := make([]storagepb.ReadResult, len(req.Entries))
	ops := make([]fabric.Op, 0, len(req.Entries))
	opEntry := make([]int, 0, len(req.Entries)) // the entry of each op
	views := make([]int, 0, len(req.Entries))   // entries served from views
	dones := make([]func() bool, 0, len(req.Entries))
	for i, e := range req.Entries {
		res := &results[i]
		reply.Results[i] = res
		data, done, ver, crc, err := n.readEntry(ctx, e, req.FailIfDirty, copyBuf)
		tm := n.m.target(e.Target)
		if err != nil {
			if tm != nil && errors.Is(err, chunkio.ErrChecksum) {
				tm.crcFailures.Inc()
			}
			res.Code, res.Error = uint32(fabric.CodeOf(err)), err.Error()
			continue
		}

		res.Length, res.Version, res.Crc = uint32(len(data)), ver, crc
		if done != nil {
			views, dones = append(views, i), append(dones, done)
		}
		if len(data) > 0 {
			ops = append(ops, fabric.Op{
				Remote: fabric.RemoteBuf{Node: peer, Key: e.DstKey, Offset: e.DstOffset, Len: uint32(len(data))},
				Local:  data,
			})
			opEntry = append(opEntry, i)
		}
	}
	// A copy into a caller in this process sums the bytes as it stores
	// them: one pass both to push and to check them, here instead of at the
	// caller.
	var sums []uint32
	var err error
	if se, ok := n.ep.(fabric.SummingEndpoint); ok {
		sums, err = se.WriteBatchSummed(ctx, ops)
	} else {
		err = n.ep.WriteBatch(ctx, ops)
	}
	for k, done := range dones {
		if !done() {
			res := reply.Results[views[k]]
			err := fmt.Errorf("chunk %v: rewritten while being sent: %w", entryChunk(req.Entries[views[k]]), chunkio.ErrNotCommitted)
			*res = storagepb.ReadResult{Code: uint32(fabric.CodeOf(err)), Error: err.Error()}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("push read data: %w", err)
	}
	for k, sum := range sums {
		res, e := reply.Results[opEntry[k]], req.Entries[opEntry[k]]
		switch {
		case res.Code != 0: // rewritten while being sent
		case sum == res.Crc:
			res.Checked = true
		default:
			err := fmt.Errorf("chunk %v: [%d, +%d) does not match its checksum: %w", entryChunk(e), e.Offset, res.Length, chunkio.ErrChecksum)
			if tm := n.m.target(e.Target); tm != nil {
				tm.crcFailures.Inc()
			}
			*res = storagepb.ReadResult{Code: uint32(fabric.CodeOf(err)), Error: err.Error()}
		}
	}
	for i, res := range reply.Results {
		if tm := n.m.target(req.Entries[i].Target); tm != nil && res.Code == 0 {
			tm.reads.Inc()
			tm.readBytes.Add(float64(res.Length))
		}
	}
	return reply, nil
}

func entryChunk(e *storagepb.ReadEntry) chunkio.ID { return chunkio.ID{Inode: e.Inode, Index: e.Index} }

// readBuffers recycles the buffers reads are copied into when they cannot
// be served from views.
var readBuffers = sync.Pool{New: func() any { return new([]byte) }}

// readEntry reads one entry's committed bytes (CRAQ: a dirty chunk is
// resolved by asking the tail which version is committed) and returns
// them with their CRC for the client to check. The bytes are a view of the
// chunk's file, with done to call once they are sent (see Engine.View),
// or, when the version cannot be viewed, copied into copyBuf(e.Length)
// (done is nil).
func (n *Node) readEntry(ctx context.Context, e *storagepb.ReadEntry, failIfDirty bool, copyBuf func(uint32) []byte) ([]byte, func() bool, uint64, uint32, error) {
	chain, eng, err := n.routeReady(e.Chain, e.ChainVer, e.Target)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	self := routing.TargetID(e.Target)
	if st := chain.State(self); st != routing.Serving {
		return nil, nil, 0, 0, fmt.Errorf("target %d is %v in chain %d: %w", e.Target, st, e.Chain, chunkio.ErrUnavailable)
	}
	id := entryChunk(e)
	m, err := eng.Meta(id)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	ver := uint64(0)
	if p := m.GetPending(); p != nil {
		if failIfDirty {
			return nil, nil, 0, 0, fmt.Errorf("chunk %v: %w", id, chunkio.ErrNotCommitted)
		}
		if servingTail(chain) == self {
			// Settled, the chunk has no pending version: ver 0 reads the committed one.
			if _, err = n.settleAtTail(ctx, chain, self, eng, id); err != nil {
				return nil, nil, 0, 0, err
			}
		} else {
			tailVer, tailCRC, err := n.queryTail(ctx, chain, id.Proto())
			if err != nil {
				return nil, nil, 0, 0, err
			}
			c := m.GetCommitted()
			switch {
			case tailVer == p.Ver && tailCRC == p.Crc:
				ver = p.Ver
			case tailVer == c.GetVer() && tailCRC == c.GetCrc():
			default:
				return nil, nil, 0, 0, fmt.Errorf("chunk %v: tail has version %d, here %d/%d: %w", id, tailVer, c.GetVer(), p.Ver, chunkio.ErrNotCommitted)
			}
		}
	}
	data, v, crc, done, viewed, err := eng.View(id, ver, e.Offset, int(e.Length))
	if !viewed {
		data = copyBuf(e.Length)
		var got int
		got, v, err = eng.ReadVersion(id, ver, e.Offset, data)
		data = data[:got]
		if err == nil {
			crc = chunkstore.RangeCRC(v, e.Offset, data)
		}
	}
	if errors.Is(err, chunkio.ErrNotFound) {
		return nil, nil, 0, 0, nil // never written: a hole (the CRC of nothing is 0)
	}
	if errors.Is(err, chunkio.ErrVersion) {
		// The version moved on (committed or replaced) since we looked.
		return nil, nil, 0, 0, fmt.Errorf("chunk %v: %w", id, chunkio.ErrNotCommitted)
	}
	if err != nil {
		return nil, nil, 0, 0, err
	}
	return data, done, v.Ver, crc, nil
}
