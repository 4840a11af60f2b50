// Package local is fabric inside one process: the embedded single-machine
// cluster uses it between its storage targets and for clients in its own
// process, and tests use it where sockets would only add noise. One-sided
// Read and Write are a single memory copy between registered regions and the
// caller's buffer; calls marshal their bodies exactly as on the wire, so a
// handler sees the same bytes on every transport and caller and handler never
// share memory. Because a push is this process's own copy, it can also say
// what it stored: WriteBatchSummed (fabric.SummingEndpoint) returns each
// op's CRC32C, summed in the same pass as the copy.
//
// [Network.Attach] puts an endpoint of another software transport (a TCP
// listener) on the network under its own ID, sharing its memory regions and
// handlers: peers in the process reach it by memory copy, peers outside over
// its own wire, and the keys it hands out are valid on both.
//
// It owns nothing but that in-process wiring; region checks are fabric.Regions.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/internal/crc32c"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Network is a set of endpoints that reach each other by ID within one
// process. It implements fabric.Transport.
type Network struct {
	mu   sync.Mutex
	eps  map[fabric.NodeID]*Endpoint
	next int
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{eps: make(map[fabric.NodeID]*Endpoint)}
}

var _ fabric.Transport = (*Network)(nil)

// Listen adds an endpoint named addr (a generated name when addr is empty).
func (n *Network) Listen(addr string) (fabric.Endpoint, error) {
	return n.add(addr)
}

// Dialer adds an endpoint with a generated name starting with name.
func (n *Network) Dialer(name string) (fabric.Endpoint, error) {
	return n.add("")
}

func (n *Network) add(name string) (*Endpoint, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if name == "" {
		n.next++
		name = fmt.Sprintf("local-%d", n.next)
	}
	id := fabric.NodeID(name)
	if _, ok := n.eps[id]; ok {
		return nil, fmt.Errorf("fabric/local: listen %s: name in use", name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ep := &Endpoint{
		net:      n,
		id:       id,
		regions:  fabric.NewRegions(id),
		Handlers: &fabric.Handlers{},
		ctx:      ctx,
		cancel:   cancel,
		jobs:     make(chan job),
	}
	ep.OneSided = ep.copyOps
	n.eps[id] = ep
	return ep, nil
}

// reaches reports whether node is an endpoint of this network.
func (n *Network) reaches(node fabric.NodeID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.eps[node] != nil
}

func (n *Network) lookup(id fabric.NodeID) (*Endpoint, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep := n.eps[id]
	if ep == nil {
		return nil, fmt.Errorf("%w: %s", fabric.ErrUnreachable, id)
	}
	return ep, nil
}

// Endpoint is an in-process fabric endpoint.
type Endpoint struct {
	net     *Network
	id      fabric.NodeID
	regions *fabric.Regions

	*fabric.Handlers
	fabric.OneSided // Read, Write and batches, over ep.copyOps

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // handler workers of this endpoint
	jobs   chan job       // to idle workers
	mu     sync.Mutex
	closed bool
}

var _ fabric.SummingEndpoint = (*Endpoint)(nil)

func (ep *Endpoint) ID() fabric.NodeID { return ep.id }

func (ep *Endpoint) RegisterMemory(buf []byte, access fabric.Access) (fabric.MR, error) {
	return ep.regions.Register(buf, access)
}

// Close removes the endpoint from the network, cancels its handlers and
// waits for them; calls in flight to it fail with fabric.ErrPeerClosed.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return nil
	}
	ep.closed = true
	ep.mu.Unlock()
	ep.net.mu.Lock()
	delete(ep.net.eps, ep.id)
	ep.net.mu.Unlock()
	ep.cancel()
	ep.wg.Wait()
	return nil
}

// peer returns node's endpoint, failing when either side is closed.
func (ep *Endpoint) peer(node fabric.NodeID) (*Endpoint, error) {
	if ep.ctx.Err() != nil {
		return nil, fabric.ErrClosed
	}
	return ep.net.lookup(node)
}

type result struct {
	body []byte
	msg  proto.Message // the reply itself, from a MessageHandler
	err  error
}

// handOver makes resp the reply msg: the same fields, sharing their
// memory (the handler gave msg up), or through the wire form when the
// caller asked for another type than the handler answers with.
func handOver(msg, resp proto.Message) error {
	src := msg.ProtoReflect()
	if src.Descriptor() != resp.ProtoReflect().Descriptor() {
		body, err := proto.Marshal(msg)
		if err == nil {
			err = proto.Unmarshal(body, resp)
		}
		if err != nil {
			return fmt.Errorf("unmarshal response: %w", err)
		}
		return nil
	}
	proto.Reset(resp)
	dst := resp.ProtoReflect()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	return nil
}

// Call runs node's handler in a goroutine of node's, under ctx's deadline.
func (ep *Endpoint) Call(ctx context.Context, node fabric.NodeID, method string, req, resp proto.Message) error {
	if err := ep.call(ctx, node, method, req, resp); err != nil {
		return fmt.Errorf("call %s %s: %w", node, method, err)
	}
	return nil
}

func (ep *Endpoint) call(ctx context.Context, node fabric.NodeID, method string, req, resp proto.Message) error {
	p, err := ep.peer(node)
	if err != nil {
		return err
	}
	if h := p.LookupMessage(method); h.Serve != nil && req.ProtoReflect().Descriptor() == h.Req {
		// In process, with nothing to marshal: the handler reads the
		// request as it is and its reply is handed over. It runs here,
		// on the caller's goroutine: a read handler only copies, and
		// handing it to a worker and its reply back cost two wake-ups
		// of other threads a call, as much as a batch of small reads.
		if err := ctx.Err(); err != nil {
			return err
		}
		r, ok := p.inline(ctx, func(hctx context.Context) result { return p.serveMessage(hctx, ep.id, method, h, req) })
		if !ok {
			return fmt.Errorf("%w: %s", fabric.ErrPeerClosed, node)
		}
		if r.err != nil {
			return r.err
		}
		return handOver(r.msg, resp)
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("marshal request: %w", err)
	}
	done := make(chan result, 1)
	if !p.spawn(ctx, func(hctx context.Context) { done <- p.serve(hctx, ep.id, method, body) }) {
		return fmt.Errorf("%w: %s", fabric.ErrPeerClosed, node)
	}
	select {
	case r := <-done:
		if r.err != nil {
			return r.err
		}
		if err := proto.Unmarshal(r.body, resp); err != nil {
			return fmt.Errorf("unmarshal response: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.ctx.Done():
		return fmt.Errorf("%w: %s closed", fabric.ErrPeerClosed, node)
	case <-ep.ctx.Done():
		return fabric.ErrClosed
	}
}

// spawn runs fn on a goroutine owned by ep, with a context that ends with
// ep or at ctx's deadline. It reports false if ep is closed. An idle worker
// takes it if one is waiting, so that a handler's stack, once grown, serves
// later calls too; otherwise a new worker starts.
func (ep *Endpoint) spawn(ctx context.Context, fn func(context.Context)) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return false
	}
	j := job{ctx: ctx, fn: fn}
	select {
	case ep.jobs <- j:
		return true
	default:
	}
	ep.wg.Add(1)
	go ep.worker(j)
	return true
}

// inline runs fn as a handler of ep on the calling goroutine, under a
// context that ends with ep or at ctx's deadline (as spawn's), counted
// among ep's handlers so that Close waits for it. It reports false if ep
// is closed. The caller returns only when fn does: fn must be bounded by
// that context, as message handlers are (they neither change nor keep the
// request, and only read and copy).
func (ep *Endpoint) inline(ctx context.Context, fn func(context.Context) result) (result, bool) {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return result{}, false
	}
	ep.wg.Add(1)
	ep.mu.Unlock()
	defer ep.wg.Done()
	var r result
	ep.run(job{ctx: ctx, fn: func(hctx context.Context) { r = fn(hctx) }})
	return r, true
}

// job is one handler run: fn under a context with ctx's deadline.
type job struct {
	ctx context.Context
	fn  func(context.Context)
}

// workerIdle is how long a worker waits for another job before it exits.
const workerIdle = time.Second

func (ep *Endpoint) worker(j job) {
	defer ep.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		ep.run(j)
		idle.Reset(workerIdle)
		select {
		case j = <-ep.jobs:
		case <-idle.C:
			return
		case <-ep.ctx.Done():
			return
		}
	}
}

func (ep *Endpoint) run(j job) {
	hctx := ep.ctx
	if dl, ok := j.ctx.Deadline(); ok {
		var cancel context.CancelFunc
		hctx, cancel = context.WithDeadline(hctx, dl)
		defer cancel()
	}
	j.fn(hctx)
}

// serve runs a handler and shapes its outcome as the wire would.
func (ep *Endpoint) serve(ctx context.Context, from fabric.NodeID, method string, body []byte) (r result) {
	h := ep.Lookup(method)
	if h == nil {
		return result{err: fabric.RemoteError(fabric.CodeUnknownMethod, fmt.Sprintf("%v: %q", fabric.ErrUnknownMethod, method))}
	}
	defer recoverHandler(method, from, &r)
	resp, err := h(ctx, from, body)
	if err != nil {
		return result{err: fabric.RemoteError(fabric.CodeOf(err), err.Error())}
	}
	out, err := proto.Marshal(resp)
	if err != nil {
		return result{err: fabric.RemoteError(fabric.CodeInternal, fmt.Sprintf("marshal response: %v", err))}
	}
	return result{body: out}
}

// recoverHandler, deferred, turns a handler's panic into an internal
// error for its caller, as a wire transport's server would.
func recoverHandler(method string, from fabric.NodeID, r *result) {
	if p := recover(); p != nil {
		slog.Error("fabric handler panicked", "method", method, "peer", from, "panic", p, "stack", string(debug.Stack()))
		*r = result{err: fabric.RemoteError(fabric.CodeInternal, fmt.Sprintf("%s panicked: %v", method, p))}
	}
}

// serveMessage is serve for a MessageHandler: the request and the reply
// stay messages.
func (ep *Endpoint) serveMessage(ctx context.Context, from fabric.NodeID, method string, h fabric.MessageHandler, req proto.Message) (r result) {
	defer recoverHandler(method, from, &r)
	resp, err := h.Serve(ctx, from, req)
	if err != nil {
		return result{err: fabric.RemoteError(fabric.CodeOf(err), err.Error())}
	}
	return result{msg: resp}
}

// copyOps checks every range first, as the wire transports do, then copies.
func (ep *Endpoint) copyOps(ctx context.Context, node fabric.NodeID, verb fabric.Verb, ops []fabric.Op) error {
	return ep.copySummed(ctx, node, verb, ops, nil)
}

// WriteBatchSummed pushes every op as WriteBatch does, and returns the
// CRC32C of each op's bytes, taken as they were copied (crc32c.Copy).
func (ep *Endpoint) WriteBatchSummed(ctx context.Context, ops []fabric.Op) ([]uint32, error) {
	sums := make([]uint32, len(ops))
	err := fabric.ForEachNode(ctx, ops, func(ctx context.Context, node fabric.NodeID, group []fabric.Op) error {
		gsums := sums // the common case: every op for one peer, group is ops
		if len(group) < len(ops) {
			gsums = make([]uint32, len(group))
		}
		if err := ep.copySummed(ctx, node, fabric.VerbWrite, group, gsums); err != nil {
			return fmt.Errorf("%v batch of %d with %s: %w", fabric.VerbWrite, len(group), node, err)
		}
		if len(group) < len(ops) { // ForEachNode keeps each peer's ops in order
			k := 0
			for i := range ops {
				if ops[i].Remote.Node == node {
					sums[i], k = gsums[k], k+1
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sums, nil
}

// copySummed checks every range first, as the wire transports do, then
// copies; with sums (writes only), it sums each op's bytes as it copies.
func (ep *Endpoint) copySummed(ctx context.Context, node fabric.NodeID, verb fabric.Verb, ops []fabric.Op, sums []uint32) error {
	want := fabric.AccessRemoteRead
	if verb == fabric.VerbWrite {
		want = fabric.AccessRemoteWrite
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := ep.peer(node)
	if err != nil {
		return err
	}
	spans := make([]fabric.Span, 0, len(ops))
	defer func() {
		for _, s := range spans {
			s.Release()
		}
	}()
	for i, op := range ops {
		s, err := p.regions.Acquire(op.Remote.Key, op.Remote.Offset, op.Remote.Len, want)
		if err != nil {
			if len(ops) > 1 {
				err = fmt.Errorf("range %d: %w", i, err)
			}
			var fe *fabric.Error
			if errors.As(err, &fe) {
				return fabric.RemoteError(fe.Code, err.Error())
			}
			return err
		}
		spans = append(spans, s)
	}
	for i, op := range ops {
		switch {
		case want == fabric.AccessRemoteRead:
			copy(op.Local, spans[i].B)
		case sums != nil:
			sums[i] = crc32c.Copy(spans[i].B, op.Local)
		default:
			copy(spans[i].B, op.Local)
		}
	}
	return nil
}
