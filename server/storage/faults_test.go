package storage

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"
	"github.com/sluicefs/sluice/server/chunkstore/chunkstoretest"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/faulty"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// Tests of the faults an operator met with separate processes: each fails
// without the fix it names.

// waitFor waits up to 20 s for the routing to satisfy ok.
func (c *cluster) waitFor(what string, ok func(*routing.Routing) bool) {
	c.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(c.routing.Routing()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			r := c.routing.Routing()
			c.t.Fatalf("never: %s (chains %v)", what, r.Chains)
		}
	}
}

// chunkChains lists the chunks a target holds, by the chain their records
// name.
func chunkChains(t *testing.T, e *chunkstore.Engine) map[chunkio.ID]uint32 {
	t.Helper()
	out := map[chunkio.ID]uint32{}
	if err := e.Chunks(func(id chunkio.ID, m *storagepb.ChunkMeta) bool {
		out[id] = m.Chain
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestResyncTouchesOnlyItsChain: target 2 is in chains 1 (after target 1)
// and 2 (before target 3); target 1 also holds chain 3's chunks. Target 2
// goes away and comes back in chain 1 only: the resync from target 1 must
// neither remove target 2's chunks of chain 2 (target 1 has none of them)
// nor copy chain 3's chunks onto target 2. (Resync used to walk every chunk
// of the predecessor's target, whatever its chain.)
func TestResyncTouchesOnlyItsChain(t *testing.T) {
	c := newChains(t, 3, map[routing.ChainID][]routing.TargetID{1: {1, 2}, 2: {2, 3}, 3: {1, 3}}, chunkstore.EngineConfig{})
	cl := c.client("client")
	ctx := ctxT(t, 30*time.Second)
	for chain := routing.ChainID(1); chain <= 3; chain++ {
		for i := 0; i < 4; i++ {
			id := chunkio.ID{Inode: uint64(chain) * 100, Index: uint32(i)}
			if _, err := cl.writeIn(ctx, chain, id, 0, fabrictest.RandBytes(uint64(chain)*10+uint64(i), 8<<10), true); err != nil {
				t.Fatalf("chain %d: %v", chain, err)
			}
		}
	}
	c.routing.SetOffline(2)
	// Chain 1 moves on without target 2.
	if _, err := cl.writeIn(ctx, 1, chunkio.ID{Inode: 100}, 0, []byte("newer"), true); err != nil {
		t.Fatal(err)
	}
	c.routing.Update(func(r *routing.Routing) { r.Rejoin(1, 2) })
	c.waitFor("target 2 serving in chain 1", func(r *routing.Routing) bool { return r.Chains[1].State(2) == routing.Serving })
	held := chunkChains(t, c.engines[1])
	perChain := map[uint32]int{}
	for _, chain := range held {
		perChain[chain]++
	}
	if perChain[1] != 4 || perChain[2] != 4 || perChain[3] != 0 {
		t.Fatalf("target 2 holds chunks of chains %v; want 4 of chain 1, 4 of chain 2 and none of chain 3", perChain)
	}
	c.sameReplicas(chunkio.ID{Inode: 100})
}

// TestChainKeepsLastServing: the chain's replicas leave one by one; the last
// one stays in the chain, offline, and the chain serves nothing; when it
// returns it serves at once and the others resync from it, with every
// acknowledged write.
func TestChainKeepsLastServing(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 30*time.Second)
	chunk := chunkio.ID{Inode: 9}
	if _, err := cl.write(ctx, chunk, 0, []byte("first"), true); err != nil {
		t.Fatal(err)
	}
	c.routing.SetOffline(3)
	c.routing.SetOffline(2)
	if _, err := cl.write(ctx, chunk, 0, []byte("alone"), true); err != nil {
		t.Fatal(err)
	}
	c.routing.SetOffline(1)
	ch := c.routing.Routing().Chains[testChain]
	if len(ch.Targets) != 1 || ch.Targets[0] != 1 || ch.State(1) != routing.Offline {
		t.Fatalf("chain after every replica left: %v %v; want target 1 kept, offline", ch.Targets, ch.States)
	}
	short := ctxT(t, 300*time.Millisecond)
	if _, err := cl.write(short, chunk, 0, []byte("lost?"), true); err == nil {
		t.Fatal("a chain with no serving replica took a write")
	}
	// The others come back first: they wait behind the offline one.
	c.rejoin(2)
	c.rejoin(3)
	time.Sleep(200 * time.Millisecond)
	if st := c.routing.Routing().Chains[testChain].State(2); st != routing.Syncing {
		t.Fatalf("target 2 is %v before the chain's source came back", st)
	}
	c.rejoin(1)
	c.waitFor("every replica serving", func(r *routing.Routing) bool { return len(r.Chains[testChain].Serving()) == 3 })
	for i := 0; i < 3; i++ {
		got, _, err := cl.read(ctx, chunk, 0, 100)
		if err != nil || string(got) != "alone" {
			t.Fatalf("read %d: %q, %v; want the acknowledged write", i, got, err)
		}
	}
	c.sameReplicas(chunk)
}

// TestRetryAppliedOnceAcrossRestart: an update is applied and its reply
// lost; the head restarts (its memory of recent updates gone), another
// client writes the same bytes over, and then the first client's retry
// arrives: it is answered with the version it made, not applied again over
// the later write.
func TestRetryAppliedOnceAcrossRestart(t *testing.T) {
	c := newCluster(t, 3)
	a, b := c.client("a"), c.client("b")
	ctx := ctxT(t, 20*time.Second)
	chunk := chunkio.ID{Inode: 3}
	copy(a.buf, "AAAA")
	req := &storagepb.UpdateRequest{Chain: uint32(testChain), Chunk: chunk.Proto(), Length: 4, Crc: chunkio.CRC([]byte("AAAA")),
		Src: &storagepb.RemoteBuf{Node: string(a.mr.Remote(0, 4).Node), Key: a.mr.Key(), Len: 4}, Client: 42, Seq: 7, FullChunk: true}
	send := func() *storagepb.UpdateReply {
		t.Helper()
		ch := c.routing.Routing().Chains[testChain]
		req.ChainVer, req.Target = ch.Version, uint32(ch.Targets[0])
		var resp storagepb.UpdateReply
		if err := a.ep.Call(ctx, c.routing.Routing().Targets[ch.Targets[0]].Node, chunkio.MethodUpdate, req, &resp); err != nil {
			t.Fatal(err)
		}
		return &resp
	}
	if r := send(); r.CommitVer != 1 {
		t.Fatalf("first attempt made version %d", r.CommitVer)
	}
	// The head restarts: a new node on the same engine, nothing in memory.
	c.nodes[0].Close()
	n, err := NewNode(NodeConfig{Endpoint: c.eps[0], Routing: c.routing, Targets: map[routing.TargetID]*chunkstore.Engine{1: c.engines[0]},
		Buffers: 8, BufferSize: 1 << 20, ForwardTimeout: 300 * time.Millisecond, Logger: quiet, OnSynced: c.synced})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if v, err := b.write(ctx, chunk, 0, []byte("BBBB"), true); err != nil || v != 2 {
		t.Fatalf("later write: version %d, %v", v, err)
	}
	if r := send(); r.CommitVer != 1 {
		t.Fatalf("the retry made version %d; want the first attempt's answer, 1", r.CommitVer)
	}
	got, ver, err := b.read(ctx, chunk, 0, 10)
	if err != nil || string(got) != "BBBB" || ver != 2 {
		t.Fatalf("after the retry: %q at version %d (%v); want BBBB at 2", got, ver, err)
	}
}

// TestNoNumberReusedAfterLostForward: the head's forward of version 2
// times out while it is still on its way down the chain (the middle's
// forward to the tail is slow); the next update must not be numbered 2
// with other bytes. It used to be: the head asked the tail, which did not
// have 2 yet, gave 2 to the next update, and the middle, which committed
// the first 2 meanwhile, took the second for a retry of it.
func TestNoNumberReusedAfterLostForward(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 30*time.Second)
	chunk := chunkio.ID{Inode: 4}
	if _, err := cl.write(ctx, chunk, 0, bytes.Repeat([]byte("0"), 8<<10), true); err != nil {
		t.Fatal(err)
	}
	// The middle works on the forward to its end, as over TCP, though the
	// head gives up on it; its own forward to the tail is slow.
	c.net.Add(faulty.Rule{From: c.eps[0].ID(), To: c.eps[1].ID(), Method: chunkio.MethodUpdate, Action: faulty.Detach, Count: 1})
	c.net.Add(faulty.Rule{From: c.eps[1].ID(), To: c.eps[2].ID(), Method: chunkio.MethodUpdate, Action: faulty.Delay, Delay: time.Second, Count: 1})
	cl.AttemptTimeout = 200 * time.Millisecond
	short := ctxT(t, 300*time.Millisecond)
	if _, err := cl.write(short, chunk, 0, []byte("XXXX"), false); err == nil {
		t.Log("the slow write finished in time")
	}
	// The next update comes from another client: the first one's memory
	// may still be pulled from by the update it gave up on.
	next := c.client("next")
	if _, err := next.write(ctx, chunk, 100, []byte("YYYY"), false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the slow forward lands
	c.sameReplicas(chunk)
	got, _, err := next.read(ctx, chunk, 100, 4)
	if err != nil || string(got) != "YYYY" {
		t.Fatalf("read %q, %v; want YYYY", got, err)
	}
}

// TestNewTailSettlesPending: version 2 was committed at the tail (and could
// have been read there) but is still pending at the others when the tail
// leaves. The new tail must answer 2, for reads at it and for the head's
// question, not fall back to 1.
func TestNewTailSettlesPending(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 20*time.Second)
	chunk := chunkio.ID{Inode: 6}
	if _, err := cl.write(ctx, chunk, 0, []byte("one"), true); err != nil {
		t.Fatal(err)
	}
	for i, e := range c.engines {
		var err error
		if i == 2 {
			_, err = e.PrepareCommit(chunk, 2, 0, []byte("two"), true, 1)
		} else {
			_, err = e.Prepare(chunk, 2, 0, []byte("two"), true, 1)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	c.routing.SetOffline(3)
	for i := 0; i < 4; i++ { // reads spread over both replicas
		got, ver, err := cl.read(ctx, chunk, 0, 10)
		if err != nil || string(got) != "two" || ver != 2 {
			t.Fatalf("read %d: %q at version %d (%v); want two at 2", i, got, ver, err)
		}
	}
}

// TestNodeNotReadyIsRetried: a node that may not serve yet (no lease, or
// its handlers not registered) is retried by clients, not reported.
func TestNodeNotReadyIsRetried(t *testing.T) {
	c := newCluster(t, 1)
	cl := c.client("client")
	ctx := ctxT(t, 20*time.Second)
	// Target 1 moves to a node that listens but has no handlers yet.
	ep, err := c.net.Listen("late")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	c.routing.Update(func(r *routing.Routing) { r.Targets[1] = routing.Target{ID: 1, Node: ep.ID(), State: routing.Serving} })
	var ready atomic.Bool
	time.AfterFunc(300*time.Millisecond, func() {
		n, err := NewNode(NodeConfig{Endpoint: ep, Routing: c.routing, Targets: map[routing.TargetID]*chunkstore.Engine{1: c.engines[0]}, Logger: quiet,
			Ready: func() error {
				if !ready.Load() {
					return fmt.Errorf("no lease yet: %w", chunkio.ErrUnavailable)
				}
				return nil
			}})
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { n.Close() })
		time.AfterFunc(300*time.Millisecond, func() { ready.Store(true) })
	})
	start := time.Now()
	if _, err := cl.write(ctx, chunkio.ID{Inode: 1}, 0, []byte("late"), true); err != nil {
		t.Fatalf("write to a starting node: %v", err)
	}
	if !ready.Load() || time.Since(start) < 600*time.Millisecond {
		t.Fatal("the write went through before the node was ready")
	}
}

// TestBadRequestsRefused: requests that name no chunk are refused, not
// answered with success.
func TestBadRequestsRefused(t *testing.T) {
	c := newCluster(t, 1)
	cl := c.client("client")
	ctx := ctxT(t, 10*time.Second)
	ch := c.routing.Routing().Chains[testChain]
	var rr storagepb.RemoveReply
	err := cl.ep.Call(ctx, c.eps[0].ID(), chunkio.MethodRemove, &storagepb.RemoveRequest{Chain: uint32(testChain), ChainVer: ch.Version, Target: 1}, &rr)
	if !errors.Is(err, fabric.ErrBadRequest) {
		t.Fatalf("remove without a chunk: %v", err)
	}
	var qr storagepb.QueryReply
	err = cl.ep.Call(ctx, c.eps[0].ID(), chunkio.MethodQuery, &storagepb.QueryRequest{Chain: uint32(testChain), ChainVer: ch.Version, Target: 1}, &qr)
	if !errors.Is(err, fabric.ErrBadRequest) {
		t.Fatalf("query without a chunk: %v", err)
	}
}

// TestFullTargetFailsFast: a chain with a full target refuses writes at
// once with ErrNoSpace, and takes them again when it has room.
func TestFullTargetFailsFast(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 10*time.Second)
	setFull := func(full bool) {
		c.routing.Update(func(r *routing.Routing) {
			t := r.Targets[2]
			t.Full = full
			r.Targets[2] = t
		})
	}
	setFull(true)
	start := time.Now()
	_, err := cl.write(ctx, chunkio.ID{Inode: 1}, 0, []byte("x"), true)
	if !errors.Is(err, chunkio.ErrNoSpace) || time.Since(start) > time.Second {
		t.Fatalf("write to a chain with a full target: %v after %v", err, time.Since(start))
	}
	setFull(false)
	if _, err := cl.write(ctx, chunkio.ID{Inode: 1}, 0, []byte("x"), true); err != nil {
		t.Fatal(err)
	}
}

// TestResyncClearsStalePending: a target left with a pending version that
// the chain never committed (it was restarted mid-update) is resynced; the
// resync must replace it, or that version would surface later, when the
// target is the chain's tail and settles what it finds pending.
func TestResyncClearsStalePending(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 20*time.Second)
	chunk := chunkio.ID{Inode: 8}
	if _, err := cl.write(ctx, chunk, 0, []byte("committed"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.engines[2].Prepare(chunk, 2, 0, []byte("abandoned"), true, 1); err != nil {
		t.Fatal(err)
	}
	c.routing.SetOffline(3)
	c.rejoin(3)
	c.waitFor("target 3 serving", func(r *routing.Routing) bool { return r.Chains[testChain].State(3) == routing.Serving })
	c.routing.SetOffline(1)
	c.routing.SetOffline(2)
	got, ver, err := cl.read(ctx, chunk, 0, 20)
	if err != nil || string(got) != "committed" || ver != 1 {
		t.Fatalf("read %q at version %d (%v); want the committed write", got, ver, err)
	}
}

// TestTornPendingDropped: a pending version whose bytes did not survive (a
// power loss before its sync: acted out by a disk that loses its writes) is
// dropped when the head settles it, never committed, and the next update
// goes through.
func TestTornPendingDropped(t *testing.T) {
	ffs := chunkstoretest.NewFaultFS(chunkstore.OSFS{})
	c := newClusterOn(t, 1, chunkstore.EngineConfig{FS: ffs})
	cl := c.client("client")
	ctx := ctxT(t, 10*time.Second)
	chunk := chunkio.ID{Inode: 2}
	if _, err := cl.write(ctx, chunk, 0, bytes.Repeat([]byte("a"), 8<<10), true); err != nil {
		t.Fatal(err)
	}
	e := c.engines[0]
	ffs.Inject(chunkstoretest.Fault{Op: "write", LoseWrites: true}) // torn
	_, err := e.Prepare(chunk, 2, 0, bytes.Repeat([]byte("b"), 8<<10), true, 1)
	ffs.Clear()
	if err != nil {
		t.Fatal(err)
	}
	if ver, err := cl.write(ctx, chunk, 0, []byte("c"), false); err != nil || ver != 2 {
		t.Fatalf("write after a torn pending version: version %d, %v", ver, err)
	}
	got, _, err := cl.read(ctx, chunk, 0, 2)
	if err != nil || string(got) != "ca" {
		t.Fatalf("read %q, %v; want the update over the committed version", got, err)
	}
}
