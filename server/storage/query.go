package storage

import (
	"context"
	"fmt"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// queryTail asks the chain's serving tail for its committed version of
// the chunk and that version's CRC.
func (n *Node) queryTail(ctx context.Context, c routing.Chain, chunk *storagepb.ChunkID) (uint64, uint32, error) {
	r := n.routing.Routing()
	tail := servingTail(c)
	node := r.Targets[tail].Node
	var resp storagepb.QueryReply
	err := n.ep.Call(ctx, node, chunkio.MethodQuery, &storagepb.QueryRequest{Chain: uint32(c.ID), ChainVer: c.Version, Chunk: chunk, Target: uint32(tail)}, &resp)
	if err != nil {
		return 0, 0, fmt.Errorf("ask tail %d: %w", tail, err)
	}
	return resp.CommitVer, resp.Crc, nil
}

// query answers for the chain's committed version of a chunk, as its tail.
func (n *Node) query(ctx context.Context, peer fabric.NodeID, req *storagepb.QueryRequest) (*storagepb.QueryReply, error) {
	id, err := chunkOf(req.Chunk)
	if err != nil {
		return nil, err
	}
	chain, e, err := n.route(req.Chain, req.ChainVer, req.Target)
	if err != nil {
		return nil, err
	}
	self := routing.TargetID(req.Target)
	if servingTail(chain) != self {
		return nil, fmt.Errorf("target %d is not chain %d's serving tail: %w", self, req.Chain, chunkio.ErrStaleChainVersion)
	}
	m, err := e.Meta(id)
	if err != nil {
		return nil, err
	}
	if m.GetPending() != nil {
		if m, err = n.settleAtTail(ctx, chain, self, e, id); err != nil {
			return nil, err
		}
	}
	return &storagepb.QueryReply{CommitVer: m.GetCommitted().GetVer(), Crc: m.GetCommitted().GetCrc()}, nil
}
