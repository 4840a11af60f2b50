package local

import (
	"context"
	"fmt"

	"github.com/sluicefs/sluice/fabric"
	"google.golang.org/protobuf/proto"
)

// Shareable is an endpoint whose registered memory and handlers are Go
// tables (fabric/tcp's are), so that another transport in the same process
// can serve them too.
type Shareable interface {
	fabric.Endpoint
	Tables() (*fabric.Regions, *fabric.Handlers)
}

// Attach adds far to the network under far's own ID, with far's regions and
// handlers, and returns the endpoint to use in far's place: the same ID,
// handlers and memory, reaching peers on this network by memory copy and
// every other peer through far. A key it hands out is valid on both, so a
// RemoteBuf it names may travel to either kind of peer. Closing it closes
// far.
func (n *Network) Attach(far Shareable) (fabric.Endpoint, error) {
	regions, handlers := far.Tables()
	n.mu.Lock()
	defer n.mu.Unlock()
	id := far.ID()
	if _, ok := n.eps[id]; ok {
		return nil, fmt.Errorf("fabric/local: attach %s: name in use", id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	near := &Endpoint{net: n, id: id, regions: regions, Handlers: handlers, ctx: ctx, cancel: cancel, jobs: make(chan job)}
	near.OneSided = near.copyOps
	n.eps[id] = near
	return &attached{near: near, far: far}, nil
}

// attached is a far endpoint with a near side on a network.
type attached struct {
	near *Endpoint
	far  fabric.Endpoint
}

var _ fabric.SummingEndpoint = (*attached)(nil)

// via is the side that reaches node.
func (a *attached) via(node fabric.NodeID) fabric.Endpoint {
	if a.near.net.reaches(node) {
		return a.near
	}
	return a.far
}

func (a *attached) ID() fabric.NodeID                      { return a.far.ID() }
func (a *attached) Handle(method string, h fabric.Handler) { a.far.Handle(method, h) }

// HandleMessage keeps h in the far endpoint's table, which the near one
// shares: only in-process callers use it.
func (a *attached) HandleMessage(method string, h fabric.MessageHandler) {
	a.near.HandleMessage(method, h)
}

func (a *attached) RegisterMemory(buf []byte, access fabric.Access) (fabric.MR, error) {
	return a.far.RegisterMemory(buf, access)
}

func (a *attached) Call(ctx context.Context, peer fabric.NodeID, method string, req, resp proto.Message) error {
	return a.via(peer).Call(ctx, peer, method, req, resp)
}

func (a *attached) Read(ctx context.Context, remote fabric.RemoteBuf, local []byte) error {
	return a.via(remote.Node).Read(ctx, remote, local)
}

func (a *attached) Write(ctx context.Context, local []byte, remote fabric.RemoteBuf) error {
	return a.via(remote.Node).Write(ctx, local, remote)
}

func (a *attached) ReadBatch(ctx context.Context, ops []fabric.Op) error {
	return fabric.ForEachNode(ctx, ops, func(ctx context.Context, node fabric.NodeID, ops []fabric.Op) error {
		return a.via(node).ReadBatch(ctx, ops)
	})
}

func (a *attached) WriteBatch(ctx context.Context, ops []fabric.Op) error {
	return fabric.ForEachNode(ctx, ops, func(ctx context.Context, node fabric.NodeID, ops []fabric.Op) error {
		return a.via(node).WriteBatch(ctx, ops)
	})
}

// WriteBatchSummed sums what it copies when every op is for a peer on
// the network; when any goes through far it is WriteBatch, with no sums.
func (a *attached) WriteBatchSummed(ctx context.Context, ops []fabric.Op) ([]uint32, error) {
	for i, op := range ops {
		if (i == 0 || op.Remote.Node != ops[i-1].Remote.Node) && !a.near.net.reaches(op.Remote.Node) {
			return nil, a.WriteBatch(ctx, ops)
		}
	}
	return a.near.WriteBatchSummed(ctx, ops)
}

// Close takes the endpoint off the network, waits for the handlers its
// near side runs, and closes far.
func (a *attached) Close() error {
	a.near.Close()
	return a.far.Close()
}
