// Package faulty wraps any fabric transport and, by rule, drops, delays,
// duplicates, fails or partitions traffic between named nodes. Replication
// tests use it to produce the failures that real networks produce.
//
// Faults are applied on the sending side of each operation (Call, Read,
// Write and their batches), which covers every message: a reply is lost with
// DropReply, a request with Drop. With no rules it adds nothing but a rule
// check to each operation.
package faulty

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"google.golang.org/protobuf/proto"
)

// Kind is the kind of operation a rule matches.
type Kind uint8

const (
	AnyKind Kind = iota
	KindCall
	KindRead
	KindWrite
)

// Action is what happens to a matched operation.
type Action uint8

const (
	// Drop loses the request: the peer never sees it and the operation ends
	// when its context does.
	Drop Action = iota + 1
	// DropReply delivers the request and loses the reply: the peer acts on
	// it, and the operation ends when its context does.
	DropReply
	// Delay holds the request for Rule.Delay plus up to Rule.Jitter, which
	// also reorders it against later traffic.
	Delay
	// Duplicate delivers the request twice and returns the first outcome.
	Duplicate
	// Fail fails the operation at once with Rule.Err without sending it.
	Fail
	// Detach delivers the request as a network that already sent it does:
	// the peer works on it to the end even if the caller gives up first
	// (over TCP a handler's context is not its caller's), while the caller
	// returns when its context ends. With Rule.Delay it arrives that late.
	Detach
)

// Rule selects operations and says what to do with them. Empty From/To
// match any node; AnyKind matches every kind; an empty Method matches every
// call.
type Rule struct {
	From, To fabric.NodeID
	Kind     Kind
	Method   string
	Action   Action
	Delay    time.Duration
	Jitter   time.Duration
	// Err is returned by Fail (default: fabric.ErrUnreachable).
	Err error
	// Prob is the chance the rule applies to a matching operation; 0 means 1.
	Prob float64
	// Count, when positive, retires the rule after it applied that many times.
	Count int
}

type rule struct {
	Rule
	id   int
	left int
}

// Network wraps a transport; every endpoint it makes obeys its rules.
type Network struct {
	inner fabric.Transport

	mu    sync.Mutex
	rules []*rule
	next  int
	rng   *rand.Rand
}

// New wraps inner. seed makes probabilistic rules and jitter repeatable.
func New(inner fabric.Transport, seed uint64) *Network {
	return &Network{inner: inner, rng: rand.New(rand.NewPCG(seed, seed+1))}
}

var _ fabric.Transport = (*Network)(nil)

// Add installs r and returns a function that removes it.
func (n *Network) Add(r Rule) (remove func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	id := n.next
	n.rules = append(n.rules, &rule{Rule: r, id: id, left: r.Count})
	return func() { n.remove(id) }
}

func (n *Network) remove(id int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, r := range n.rules {
		if r.id == id {
			n.rules = append(n.rules[:i], n.rules[i+1:]...)
			return
		}
	}
}

// Partition cuts every path between a node in a and a node in b, both ways,
// until the returned function heals it.
func (n *Network) Partition(a, b []fabric.NodeID) (heal func()) {
	var removes []func()
	for _, x := range a {
		for _, y := range b {
			removes = append(removes, n.Add(Rule{From: x, To: y, Action: Drop}), n.Add(Rule{From: y, To: x, Action: Drop}))
		}
	}
	return func() {
		for _, r := range removes {
			r()
		}
	}
}

// Isolate cuts node off from everyone, both ways, until healed.
func (n *Network) Isolate(node fabric.NodeID) (heal func()) {
	r1 := n.Add(Rule{From: node, Action: Drop})
	r2 := n.Add(Rule{To: node, Action: Drop})
	return func() { r1(); r2() }
}

// Heal removes every rule.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rules = nil
}

// decide returns the rule that applies to an operation, if any, with the
// extra delay to use.
func (n *Network) decide(from, to fabric.NodeID, kind Kind, method string) (Rule, time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, r := range n.rules {
		if (r.From != "" && r.From != from) || (r.To != "" && r.To != to) ||
			(r.Kind != AnyKind && r.Kind != kind) || (r.Method != "" && r.Method != method) {
			continue
		}
		if r.Prob > 0 && r.Prob < 1 && n.rng.Float64() >= r.Prob {
			continue
		}
		if r.Count > 0 {
			if r.left--; r.left <= 0 {
				n.rules = append(n.rules[:i], n.rules[i+1:]...)
			}
		}
		d := r.Delay
		if r.Jitter > 0 {
			d += time.Duration(n.rng.Int64N(int64(r.Jitter)))
		}
		return r.Rule, d, true
	}
	return Rule{}, 0, false
}

// Listen wraps an endpoint of the inner transport.
func (n *Network) Listen(addr string) (fabric.Endpoint, error) {
	ep, err := n.inner.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &endpoint{Endpoint: ep, net: n}, nil
}

// Dialer wraps a dialing endpoint of the inner transport.
func (n *Network) Dialer(name string) (fabric.Endpoint, error) {
	ep, err := n.inner.Dialer(name)
	if err != nil {
		return nil, err
	}
	return &endpoint{Endpoint: ep, net: n}, nil
}

// endpoint applies the network's rules to its outgoing operations.
type endpoint struct {
	fabric.Endpoint
	net *Network
}

// apply runs op under the rule that matches (from this endpoint to node).
func (ep *endpoint) apply(ctx context.Context, node fabric.NodeID, kind Kind, method string, op func(context.Context) error) error {
	r, delay, ok := ep.net.decide(ep.ID(), node, kind, method)
	if !ok {
		return op(ctx)
	}
	switch r.Action {
	case Drop:
		<-ctx.Done()
		return fmt.Errorf("faulty: request to %s dropped: %w", node, ctx.Err())
	case DropReply:
		op(ctx)
		<-ctx.Done()
		return fmt.Errorf("faulty: reply from %s dropped: %w", node, ctx.Err())
	case Delay:
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		return op(ctx)
	case Duplicate:
		err := op(ctx)
		op(ctx)
		return err
	case Detach:
		done := make(chan error, 1)
		go func() {
			time.Sleep(delay)
			done <- op(context.WithoutCancel(ctx))
		}()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("faulty: request to %s detached: %w", node, ctx.Err())
		}
	case Fail:
		if r.Err != nil {
			return r.Err
		}
		return fmt.Errorf("faulty: %w: %s", fabric.ErrUnreachable, node)
	}
	return op(ctx)
}

func (ep *endpoint) Call(ctx context.Context, node fabric.NodeID, method string, req, resp proto.Message) error {
	return ep.apply(ctx, node, KindCall, method, func(ctx context.Context) error {
		return ep.Endpoint.Call(ctx, node, method, req, resp)
	})
}

func (ep *endpoint) Read(ctx context.Context, remote fabric.RemoteBuf, local []byte) error {
	return ep.apply(ctx, remote.Node, KindRead, "", func(ctx context.Context) error {
		return ep.Endpoint.Read(ctx, remote, local)
	})
}

func (ep *endpoint) Write(ctx context.Context, local []byte, remote fabric.RemoteBuf) error {
	return ep.apply(ctx, remote.Node, KindWrite, "", func(ctx context.Context) error {
		return ep.Endpoint.Write(ctx, local, remote)
	})
}

func (ep *endpoint) ReadBatch(ctx context.Context, ops []fabric.Op) error {
	return fabric.ForEachNode(ctx, ops, func(ctx context.Context, node fabric.NodeID, ops []fabric.Op) error {
		return ep.apply(ctx, node, KindRead, "", func(ctx context.Context) error {
			return ep.Endpoint.ReadBatch(ctx, ops)
		})
	})
}

func (ep *endpoint) WriteBatch(ctx context.Context, ops []fabric.Op) error {
	return fabric.ForEachNode(ctx, ops, func(ctx context.Context, node fabric.NodeID, ops []fabric.Op) error {
		return ep.apply(ctx, node, KindWrite, "", func(ctx context.Context) error {
			return ep.Endpoint.WriteBatch(ctx, ops)
		})
	})
}
