package fabric

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// NodeID names an endpoint. For endpoints that listen it is the address they
// listen on, so a peer can dial it; endpoints that only dial out get a unique
// name and are reached back over the connections they opened.
type NodeID string

// Access is a set of rights a peer has on a registered region. Local access
// through the buffer itself is always allowed.
type Access uint8

const (
	// AccessRemoteRead lets peers pull the region's bytes with Read.
	AccessRemoteRead Access = 1 << iota
	// AccessRemoteWrite lets peers push bytes into the region with Write.
	AccessRemoteWrite

	// AccessRemoteReadWrite is both.
	AccessRemoteReadWrite = AccessRemoteRead | AccessRemoteWrite
)

func (a Access) String() string {
	switch a {
	case 0:
		return "none"
	case AccessRemoteRead:
		return "read"
	case AccessRemoteWrite:
		return "write"
	case AccessRemoteReadWrite:
		return "read|write"
	}
	return fmt.Sprintf("Access(%#x)", uint8(a))
}

// RemoteBuf names Len bytes at Offset inside a region that Node registered
// under Key. It is what one side hands the other so that the other can Read
// from or Write to that memory.
type RemoteBuf struct {
	Node   NodeID
	Key    uint64
	Offset uint64
	Len    uint32
}

func (r RemoteBuf) String() string {
	return fmt.Sprintf("%s/%#x[%d:+%d]", r.Node, r.Key, r.Offset, r.Len)
}

// Op is one range of a batched one-sided operation: Local must be exactly
// Remote.Len bytes long.
type Op struct {
	Remote RemoteBuf
	Local  []byte
}

// MR is a registered memory region.
type MR interface {
	// Key is the region's remote key; it is unguessable and never reused.
	Key() uint64
	// Bytes is the registered buffer.
	Bytes() []byte
	// Remote names bytes [off, off+n) of the region for a peer.
	Remote(off, n int) RemoteBuf
	// Fence orders peers' accesses to the region with the caller's own: every
	// access already completed happens before what the caller does next, and
	// everything the caller did before happens before later ones. It does not
	// wait for accesses in progress, so call it once those you care about are
	// complete: when bytes change hands between this process and its peers
	// with no Go synchronization between them — before reading what a peer
	// wrote, and before letting a peer at bytes you touched, when word of the
	// hand-over came by another path (an RPC). Real RDMA hardware has its own
	// completion semantics; for software transports the wire is no
	// synchronization edge in Go's memory model, which matters when both ends
	// share a process. It costs an uncontended lock.
	Fence()
	// Deregister revokes the key at once. Accesses already in progress finish
	// first, so after it returns no peer touches the buffer again.
	Deregister() error
}

// Handler serves one RPC method. req is the marshaled request body and is only
// valid until the handler returns. The returned message is the response body;
// a returned error reaches the caller with its Code (see NewError).
type Handler func(ctx context.Context, peer NodeID, req []byte) (proto.Message, error)

// Endpoint is one node's attachment to a fabric. All methods are safe for
// concurrent use.
type Endpoint interface {
	// ID is how peers name this endpoint.
	ID() NodeID
	// Handle registers h for method. Register handlers before peers call.
	Handle(method string, h Handler)
	// Call sends req to peer's handler for method and unmarshals the reply
	// into resp. ctx's deadline travels with the request.
	Call(ctx context.Context, peer NodeID, method string, req, resp proto.Message) error
	// RegisterMemory registers buf for one-sided access by peers.
	RegisterMemory(buf []byte, access Access) (MR, error)
	// Read pulls remote's bytes into local (RDMA READ); len(local) must equal
	// remote.Len. If Read fails, the contents of local are undefined.
	Read(ctx context.Context, remote RemoteBuf, local []byte) error
	// Write pushes local into remote (RDMA WRITE); len(local) must equal
	// remote.Len. local must not change until Write returns.
	//
	// A handler's Write (or WriteBatch) into the memory of the caller whose
	// call it is serving, made with the handler's context, may be posted
	// ahead of the call's reply instead of acknowledged by itself, as an
	// RDMA WRITE before a SEND on one queue pair is (fabric/tcp does this):
	// it returns once local is sent, the bytes are in the caller's memory
	// when the call returns there, and a failure to store them reaches the
	// caller as the call's error rather than the handler.
	Write(ctx context.Context, local []byte, remote RemoteBuf) error
	// ReadBatch performs every op as a Read, in one round trip per peer.
	ReadBatch(ctx context.Context, ops []Op) error
	// WriteBatch performs every op as a Write, in one round trip per peer.
	WriteBatch(ctx context.Context, ops []Op) error
	// Close stops the endpoint, fails calls in flight and releases its
	// connections and goroutines.
	Close() error
}

// SummingEndpoint is an Endpoint whose one-sided writes are copies this
// process's CPU makes into peers in the same process (fabric/local), so it
// can say what it stored: WriteBatchSummed is WriteBatch that also returns
// the CRC32C of each op's bytes as they were stored, computed in the same
// pass as the copy, or no sums (nil) when some op went over a wire. Wire
// transports do not have it: what a socket or a NIC stores is checked
// where it lands.
type SummingEndpoint interface {
	Endpoint
	WriteBatchSummed(ctx context.Context, ops []Op) ([]uint32, error)
}

// Transport creates endpoints on one kind of wire.
type Transport interface {
	// Listen starts an endpoint that accepts connections at addr. Its ID is
	// the address it ended up listening on.
	Listen(addr string) (Endpoint, error)
	// Dialer starts an endpoint that accepts no connections: it reaches peers
	// by dialing them, and peers reach its registered memory back over the
	// connections it opened. name is a prefix for its generated ID.
	Dialer(name string) (Endpoint, error)
}

// CheckOp reports whether local fits remote, the one precondition every
// transport checks before sending anything.
func CheckOp(remote RemoteBuf, local []byte) error {
	if uint64(len(local)) != uint64(remote.Len) {
		return fmt.Errorf("%w: local buffer is %d bytes, remote range %s", ErrLengthMismatch, len(local), remote)
	}
	return nil
}

// ForEachNode splits ops into one batch per peer, keeping each peer's ops in
// their original order, and runs fn on every batch, concurrently when there is
// more than one peer. It returns the first error. Transports use it to send
// one batch per peer.
func ForEachNode(ctx context.Context, ops []Op, fn func(ctx context.Context, node NodeID, ops []Op) error) error {
	if len(ops) == 0 {
		return nil
	}
	node := ops[0].Remote.Node
	single := true
	for i := range ops {
		if err := CheckOp(ops[i].Remote, ops[i].Local); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
		single = single && ops[i].Remote.Node == node
	}
	if single {
		return fn(ctx, node, ops)
	}
	groups := make(map[NodeID][]Op)
	for _, op := range ops {
		groups[op.Remote.Node] = append(groups[op.Remote.Node], op)
	}
	errs := make(chan error, len(groups))
	for n, g := range groups {
		go func() { errs <- fn(ctx, n, g) }()
	}
	var first error
	for range groups {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
