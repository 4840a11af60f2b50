package fabric

import (
	"context"
	"fmt"
	"sync"
)

// Verb is the direction of a one-sided operation.
type Verb uint8

const (
	VerbRead  Verb = iota + 1 // pull from the peer's memory
	VerbWrite                 // push into the peer's memory
)

func (v Verb) String() string {
	if v == VerbWrite {
		return "write"
	}
	return "read"
}

// OneSided is a transport's one per-peer primitive for one-sided operations:
// perform ops, all addressed to node, in one round trip. Its methods give
// the transport its Read, Write, ReadBatch and WriteBatch, with the same
// checks and error context on every transport; embed it in an Endpoint.
type OneSided func(ctx context.Context, node NodeID, verb Verb, ops []Op) error

func (f OneSided) one(ctx context.Context, verb Verb, remote RemoteBuf, local []byte) error {
	if err := CheckOp(remote, local); err != nil {
		return err
	}
	if err := f(ctx, remote.Node, verb, []Op{{Remote: remote, Local: local}}); err != nil {
		return fmt.Errorf("%v %s: %w", verb, remote, err)
	}
	return nil
}

func (f OneSided) batch(ctx context.Context, verb Verb, ops []Op) error {
	return ForEachNode(ctx, ops, func(ctx context.Context, node NodeID, ops []Op) error {
		if err := f(ctx, node, verb, ops); err != nil {
			return fmt.Errorf("%v batch of %d with %s: %w", verb, len(ops), node, err)
		}
		return nil
	})
}

// Read pulls remote into local.
func (f OneSided) Read(ctx context.Context, remote RemoteBuf, local []byte) error {
	return f.one(ctx, VerbRead, remote, local)
}

// Write pushes local into remote.
func (f OneSided) Write(ctx context.Context, local []byte, remote RemoteBuf) error {
	return f.one(ctx, VerbWrite, remote, local)
}

// ReadBatch pulls every op, one round trip per peer.
func (f OneSided) ReadBatch(ctx context.Context, ops []Op) error { return f.batch(ctx, VerbRead, ops) }

// WriteBatch pushes every op, one round trip per peer.
func (f OneSided) WriteBatch(ctx context.Context, ops []Op) error {
	return f.batch(ctx, VerbWrite, ops)
}

// Handlers is an endpoint's table of RPC handlers; embed it in an Endpoint
// for its Handle method.
type Handlers struct {
	mu  sync.RWMutex
	m   map[string]Handler
	msg map[string]MessageHandler
}

// Handle registers h for method, replacing any handler before it (and
// its MessageHandler, if it had one).
func (t *Handlers) Handle(method string, h Handler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[string]Handler)
	}
	t.m[method] = h
	delete(t.msg, method)
}

// HandleMessage adds h, method's in-process form, to the Handler
// registered for method (register that first: Handle drops h).
func (t *Handlers) HandleMessage(method string, h MessageHandler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.msg == nil {
		t.msg = make(map[string]MessageHandler)
	}
	t.msg[method] = h
}

// LookupMessage returns method's in-process handler, or a zero one.
func (t *Handlers) LookupMessage(method string) MessageHandler {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.msg[method]
}

// Lookup returns method's handler, or nil.
func (t *Handlers) Lookup(method string) Handler {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.m[method]
}
