package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"
	"github.com/sluicefs/sluice/server/chunkstore/chunkstoretest"

	"github.com/sluicefs/sluice/routing"

	"github.com/anishathalye/porcupine"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/faulty"
	"github.com/sluicefs/sluice/fabric/local"
	"github.com/sluicefs/sluice/proto/storagepb"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// cluster is an in-process chain: one target per node, each node its own
// fabric endpoint on a faulty network, and a static routing that the test
// changes as mgmtd would.
type cluster struct {
	t       *testing.T
	net     *faulty.Network
	routing *routing.StaticRouting
	eps     []fabric.Endpoint
	engines []*chunkstore.Engine
	nodes   []*Node
}

const testChain routing.ChainID = 1

func newCluster(t *testing.T, replicas int) *cluster {
	return newClusterOn(t, replicas, chunkstore.EngineConfig{})
}

// newClusterOn is newCluster with engines opened with cfg (each in a
// directory of its own).
func newClusterOn(t *testing.T, replicas int, cfg chunkstore.EngineConfig) *cluster {
	var members []routing.TargetID
	for i := 1; i <= replicas; i++ {
		members = append(members, routing.TargetID(i))
	}
	return newChains(t, replicas, map[routing.ChainID][]routing.TargetID{testChain: members}, cfg)
}

// newChains is a cluster of nodes targets (one a node) in the given chains,
// their engines opened with cfg.
func newChains(t *testing.T, nodes int, chains map[routing.ChainID][]routing.TargetID, cfg chunkstore.EngineConfig) *cluster {
	return newChainsWith(t, nodes, chains, cfg, nil)
}

// newChainsWith is newChains with each node's config changed by tweak
// (when not nil) before the node starts.
func newChainsWith(t *testing.T, nodes int, chains map[routing.ChainID][]routing.TargetID, cfg chunkstore.EngineConfig, tweak func(*NodeConfig)) *cluster {
	c := &cluster{t: t, net: faulty.New(local.NewNetwork(), 1)}
	r := &routing.Routing{Version: 1, Chains: map[routing.ChainID]routing.Chain{}, Targets: map[routing.TargetID]routing.Target{}}
	for id, members := range chains {
		r.Chains[id] = routing.Chain{ID: id, Version: 1, Targets: members}
	}
	for i := 1; i <= nodes; i++ {
		ep, err := c.net.Listen(fmt.Sprintf("node-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		e := chunkstoretest.Open(t, cfg)
		c.eps, c.engines = append(c.eps, ep), append(c.engines, e)
		r.Targets[routing.TargetID(i)] = routing.Target{ID: routing.TargetID(i), Node: ep.ID(), State: routing.Serving}
	}
	c.routing = routing.NewStaticRouting(r)
	for i, ep := range c.eps {
		nc := NodeConfig{Endpoint: ep, Routing: c.routing, Targets: map[routing.TargetID]*chunkstore.Engine{routing.TargetID(i + 1): c.engines[i]},
			Buffers: 8, BufferSize: 1 << 20, ForwardTimeout: 300 * time.Millisecond, Logger: quiet, OnSynced: c.synced}
		if tweak != nil {
			tweak(&nc)
		}
		n, err := NewNode(nc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		c.nodes = append(c.nodes, n)
	}
	return c
}

// synced is mgmtd's part when a target has caught up: it serves again.
func (c *cluster) synced(chain routing.ChainID, target routing.TargetID, chainVer uint64) error {
	c.routing.Update(func(r *routing.Routing) { r.SetServing(chain, target) })
	return nil
}

// rejoin brings an offline target back at its chain's end, syncing.
func (c *cluster) rejoin(target routing.TargetID) {
	c.routing.Update(func(r *routing.Routing) { r.Rejoin(testChain, target) })
}

// testClient is a storage client with a registered buffer.
type testClient struct {
	*chunkio.Client
	ep  fabric.Endpoint
	buf []byte
	mr  fabric.MR
}

func (c *cluster) client(name string) *testClient {
	ep, err := c.net.Dialer(name)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { ep.Close() })
	buf := make([]byte, 2<<20)
	mr, err := ep.RegisterMemory(buf, fabric.AccessRemoteReadWrite)
	if err != nil {
		c.t.Fatal(err)
	}
	cl := chunkio.NewClient(ep, c.routing)
	cl.AttemptTimeout = 500 * time.Millisecond
	return &testClient{Client: cl, ep: ep, buf: buf, mr: mr}
}

func (tc *testClient) write(ctx context.Context, chunk chunkio.ID, off uint32, data []byte, full bool) (uint64, error) {
	return tc.writeIn(ctx, testChain, chunk, off, data, full)
}

func (tc *testClient) writeIn(ctx context.Context, chain routing.ChainID, chunk chunkio.ID, off uint32, data []byte, full bool) (uint64, error) {
	copy(tc.buf, data)
	return tc.WriteRegistered(ctx, chain, chunk, off, full, tc.mr, 0, tc.buf[:len(data)])
}

func (tc *testClient) read(ctx context.Context, chunk chunkio.ID, off uint32, n int) ([]byte, uint64, error) {
	half := len(tc.buf) / 2
	got, ver, err := tc.ReadRegistered(ctx, testChain, chunk, off, tc.mr, half, tc.buf[half:half+n], false)
	if err != nil {
		return nil, 0, err
	}
	return bytes.Clone(tc.buf[half : half+got]), ver, nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sameReplicas checks that every target in the chain holds the chunk's same
// committed version and bytes.
func (c *cluster) sameReplicas(chunk chunkio.ID) {
	c.t.Helper()
	var first []byte
	var firstVer uint64
	for _, tid := range c.routing.Routing().Chains[testChain].Targets {
		e := c.engines[tid-1]
		buf := make([]byte, 1<<20)
		n, v, err := e.Read(chunk, 0, buf)
		if errors.Is(err, chunkio.ErrNotFound) {
			n, v, err = 0, &storagepb.Version{}, nil
		}
		if err != nil {
			c.t.Fatalf("target %d: %v", tid, err)
		}
		if first == nil {
			first, firstVer = buf[:n], v.Ver
			continue
		}
		if v.Ver != firstVer || !bytes.Equal(buf[:n], first) {
			c.t.Fatalf("target %d holds version %d (%d bytes), head %d (%d bytes)", tid, v.Ver, n, firstVer, len(first))
		}
	}
}

func TestChainWriteRead(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 30*time.Second)
	chunk := chunkio.ID{Inode: 100, Index: 0}
	a := fabrictest.RandBytes(1, 300<<10)
	if v, err := cl.write(ctx, chunk, 0, a, true); err != nil || v != 1 {
		t.Fatalf("write: version %d, %v", v, err)
	}
	b := fabrictest.RandBytes(2, 10<<10)
	if v, err := cl.write(ctx, chunk, 5000, b, false); err != nil || v != 2 {
		t.Fatalf("patch: version %d, %v", v, err)
	}
	want := bytes.Clone(a)
	copy(want[5000:], b)
	for i := 0; i < 3; i++ { // reads rotate over the replicas
		got, ver, err := cl.read(ctx, chunk, 0, 400<<10)
		if err != nil || ver != 2 || !bytes.Equal(got, want) {
			t.Fatalf("read %d: version %d, %d bytes, %v", i, ver, len(got), err)
		}
	}
	c.sameReplicas(chunk)
	// A chunk never written reads as empty.
	if got, _, err := cl.read(ctx, chunkio.ID{Inode: 101}, 0, 100); err != nil || len(got) != 0 {
		t.Fatalf("read of a hole: %d bytes, %v", len(got), err)
	}
}

func TestChainRefusesStaleAndMisrouted(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 10*time.Second)
	copy(cl.buf, "hello")
	rb := cl.mr.Remote(0, 5)
	req := &storagepb.UpdateRequest{Chain: uint32(testChain), ChainVer: 7, Chunk: chunkio.ID{Inode: 1}.Proto(), Length: 5, Crc: chunkio.CRC([]byte("hello")),
		Src: &storagepb.RemoteBuf{Node: string(rb.Node), Key: rb.Key, Offset: rb.Offset, Len: rb.Len}, Target: 1, Client: 1, Seq: 1}
	var resp storagepb.UpdateReply
	if err := cl.ep.Call(ctx, c.eps[0].ID(), chunkio.MethodUpdate, req, &resp); !errors.Is(err, chunkio.ErrStaleChainVersion) {
		t.Fatalf("stale chain version: %v", err)
	}
	req.ChainVer, req.Target = 1, 2
	if err := cl.ep.Call(ctx, c.eps[1].ID(), chunkio.MethodUpdate, req, &resp); !errors.Is(err, chunkio.ErrNotHead) {
		t.Fatalf("client write to the middle: %v", err)
	}
	req.Target, req.Crc = 1, 12345
	if err := cl.ep.Call(ctx, c.eps[0].ID(), chunkio.MethodUpdate, req, &resp); !errors.Is(err, chunkio.ErrChecksum) {
		t.Fatalf("bytes that fail their CRC: %v", err)
	}
	if m, _ := c.engines[0].Meta(chunkio.ID{Inode: 1}); m.Committed != nil || m.Pending != nil {
		t.Fatal("a refused update left a version")
	}
	head := c.nodes[0].m.target(1)
	if crc, w := testutil.ToFloat64(head.crcFailures), testutil.ToFloat64(head.writes); crc != 1 || w != 0 {
		t.Errorf("the head counts %v CRC failures and %v writes, want 1 and 0", crc, w)
	}
}

// TestRetryAppliedOnce: the head's reply is lost, the client retries with
// the same sequence number, and the update is applied once.
func TestRetryAppliedOnce(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 10*time.Second)
	c.net.Add(faulty.Rule{Method: chunkio.MethodUpdate, To: c.eps[0].ID(), Action: faulty.DropReply, Count: 1})
	v, err := cl.write(ctx, chunkio.ID{Inode: 5}, 0, []byte("once"), true)
	if err != nil || v != 1 {
		t.Fatalf("write with a lost reply: version %d, %v", v, err)
	}
	if m, _ := c.engines[2].Meta(chunkio.ID{Inode: 5}); m.Committed.GetVer() != 1 {
		t.Fatalf("tail at version %d, want 1", m.Committed.GetVer())
	}
}

// TestChainFailover: each of head, middle and tail in turn fails while
// writes go on; mgmtd's move (here, by hand) takes it out of the chain; no
// acknowledged write is lost and the survivors agree.
func TestChainFailover(t *testing.T) {
	for victim := 1; victim <= 3; victim++ {
		t.Run(fmt.Sprintf("target=%d", victim), func(t *testing.T) {
			c := newCluster(t, 3)
			cl := c.client("client")
			ctx := ctxT(t, 60*time.Second)
			chunk := chunkio.ID{Inode: 9}
			var acked atomic.Uint64
			done := make(chan error, 1)
			go func() {
				for i := uint64(1); i <= 60; i++ {
					var b [8]byte
					binary.LittleEndian.PutUint64(b[:], i)
					if _, err := cl.write(ctx, chunk, 0, b[:], true); err != nil {
						done <- fmt.Errorf("write %d: %w", i, err)
						return
					}
					acked.Store(i)
				}
				done <- nil
			}()
			for acked.Load() < 20 {
				time.Sleep(time.Millisecond)
			}
			heal := c.net.Isolate(c.eps[victim-1].ID())
			defer heal()
			time.Sleep(100 * time.Millisecond) // writes stall on the dead target
			c.routing.SetOffline(routing.TargetID(victim))
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			got, _, err := cl.read(ctx, chunk, 0, 8)
			if err != nil || binary.LittleEndian.Uint64(got) != 60 {
				t.Fatalf("after failover: %v %v", got, err)
			}
			c.sameReplicas(chunk)
		})
	}
}

// TestLinearizable: 8 clients write and read 3 chunks while a target fails;
// the history, each chunk a register, must be linearizable. Writes that
// fail or time out are recorded as open-ended: they may or may not have
// taken effect.
func TestLinearizable(t *testing.T) {
	for victim := 1; victim <= 3; victim++ {
		t.Run(fmt.Sprintf("fail=%d", victim), func(t *testing.T) { linearizable(t, victim) })
	}
}

// regInput is an operation on one chunk seen as a register.
type regInput struct {
	chunk int
	write bool
	value uint64
}

// registerModel: each chunk a register holding the last value written.
func registerModel(chunks int) porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			parts := make([][]porcupine.Operation, chunks)
			for _, op := range h {
				k := op.Input.(regInput).chunk
				parts[k] = append(parts[k], op)
			}
			return parts
		},
		Init: func() interface{} { return uint64(0) },
		Step: func(state, in, out interface{}) (bool, interface{}) {
			i := in.(regInput)
			if i.write {
				return true, i.value
			}
			return out.(uint64) == state.(uint64), state
		},
		Equal: func(a, b interface{}) bool { return a == b },
	}
}

// TestRegisterModelCatchesStaleRead: the checker set-up used above does
// reject a history with a stale read, so its approval means something.
func TestRegisterModelCatchesStaleRead(t *testing.T) {
	h := []porcupine.Operation{
		{Input: regInput{write: true, value: 1}, Call: 0, Return: 10},
		{Input: regInput{write: true, value: 2}, Call: 20, Return: 30},
		{Input: regInput{}, Call: 40, Output: uint64(1), Return: 50},
	}
	if porcupine.CheckOperations(registerModel(1), h) {
		t.Fatal("a stale read passed as linearizable")
	}
	h[2].Output = uint64(2)
	if !porcupine.CheckOperations(registerModel(1), h) {
		t.Fatal("a correct history failed")
	}
}

func linearizable(t *testing.T, victim int) {
	c := newCluster(t, 3)
	const clients, chunks = 8, 3
	type input = regInput
	var mu sync.Mutex
	var history []porcupine.Operation
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for ci := 0; ci < clients; ci++ {
		cl := c.client(fmt.Sprintf("client-%d", ci))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(ci), 1))
			for seq := uint64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				in := input{chunk: rng.IntN(chunks), write: rng.IntN(2) == 0, value: uint64(ci)<<32 | seq}
				chunk := chunkio.ID{Inode: 1000, Index: uint32(in.chunk)}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				call := now()
				var out uint64
				var err error
				if in.write {
					var b [8]byte
					binary.LittleEndian.PutUint64(b[:], in.value)
					_, err = cl.write(ctx, chunk, 0, b[:], true)
				} else {
					var got []byte
					got, _, err = cl.read(ctx, chunk, 0, 8)
					if err == nil && len(got) == 8 {
						out = binary.LittleEndian.Uint64(got)
					} else if err == nil && len(got) != 0 {
						err = fmt.Errorf("read %d bytes", len(got))
					}
				}
				ret := now()
				cancel()
				if err != nil {
					if !in.write {
						continue // a failed read observed nothing
					}
					ret = 1 << 62 // may have happened at any time from now on
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: ci, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	heal := c.net.Isolate(c.eps[victim-1].ID())
	time.Sleep(100 * time.Millisecond)
	c.routing.SetOffline(routing.TargetID(victim))
	time.Sleep(700 * time.Millisecond)
	close(stop)
	wg.Wait()
	heal()

	model := registerModel(chunks)
	writes := 0
	for _, op := range history {
		if op.Input.(input).write {
			writes++
		}
	}
	if writes < 50 || len(history)-writes < 50 {
		t.Fatalf("history too thin to mean anything: %d writes, %d reads", writes, len(history)-writes)
	}
	res := porcupine.CheckOperationsTimeout(model, history, 60*time.Second)
	if res != porcupine.Ok {
		t.Fatalf("history of %d operations is not linearizable (%v)", len(history), res)
	}
	t.Logf("%d operations (%d writes) linearizable", len(history), writes)
}

// TestResync: the middle target dies, writes go on (full chunks and
// patches, plus a chunk removed meanwhile), it comes back as syncing, is
// brought in line while writes continue, and serves again; then every
// replica holds the same versions and bytes.
func TestResync(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 60*time.Second)
	const chunks = 12
	chunk := func(i int) chunkio.ID { return chunkio.ID{Inode: 77, Index: uint32(i)} }
	writeRound := func(round int) {
		for i := 0; i < chunks; i++ {
			data := fabrictest.RandBytes(uint64(round*100+i), 20<<10)
			off, full := uint32(0), true
			if (round+i)%3 == 1 {
				off, full, data = uint32(round*512%(16<<10)), false, data[:3000]
			}
			if _, err := cl.write(ctx, chunk(i), off, data, full); err != nil {
				t.Fatalf("round %d chunk %d: %v", round, i, err)
			}
		}
	}
	writeRound(0)
	writeRound(1)
	heal := c.net.Isolate(c.eps[1].ID())
	c.routing.SetOffline(2)
	writeRound(2)
	writeRound(3)
	// A chunk removed while the target was away (as the collector would).
	for _, e := range []*chunkstore.Engine{c.engines[0], c.engines[2]} {
		if err := e.Remove(chunk(chunks - 1)); err != nil {
			t.Fatal(err)
		}
	}
	heal()
	c.rejoin(2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for round := 4; round < 8; round++ {
			for i := 0; i < chunks-1; i++ {
				data := fabrictest.RandBytes(uint64(round*100+i), 4000)
				if _, err := cl.write(ctx, chunk(i), uint32(round*700), data, false); err != nil {
					t.Errorf("write during sync: %v", err)
					return
				}
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for c.routing.Routing().Targets[2].State != routing.Serving {
		if time.Now().After(deadline) {
			t.Fatal("target 2 never finished syncing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-done
	if got := c.routing.Routing().Chains[testChain].Targets; !slices.Equal(got, []routing.TargetID{1, 3, 2}) {
		t.Fatalf("chain %v after resync", got)
	}
	for i := 0; i < chunks; i++ {
		c.sameReplicas(chunk(i))
	}
	if _, _, err := c.engines[1].Read(chunk(chunks-1), 0, make([]byte, 1)); !errors.Is(err, chunkio.ErrNotFound) {
		t.Fatalf("chunk removed meanwhile still on the synced target: %v", err)
	}
	// Target 3, its predecessor, counted what it sent, and its resync ends.
	if b := testutil.ToFloat64(c.nodes[2].m.resyncBytes); b < 20<<10 {
		t.Errorf("target 3 counts %v bytes resynced", b)
	}
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(c.nodes[2].m.resyncs) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a resync still counted in progress after the target serves")
		}
	}
	// And it serves reads again.
	for i := 0; i < 3; i++ {
		if _, _, err := cl.read(ctx, chunk(0), 0, 100); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemove: a chunk removed through the head is gone from every replica;
// removing it again, or a chunk never written, succeeds.
func TestRemove(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 10*time.Second)
	chunk := chunkio.ID{Inode: 31}
	if _, err := cl.write(ctx, chunk, 0, []byte("doomed"), true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := cl.Remove(ctx, testChain, chunk); err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
	}
	for i, e := range c.engines {
		if _, _, err := e.Read(chunk, 0, make([]byte, 8)); !errors.Is(err, chunkio.ErrNotFound) {
			t.Fatalf("target %d still has the chunk: %v", i+1, err)
		}
	}
	if err := cl.Remove(ctx, testChain, chunkio.ID{Inode: 32}); err != nil {
		t.Fatalf("remove of a chunk never written: %v", err)
	}
}

// TestOnlyTheCallersMemory: a node moves bytes only between itself and its
// caller. A read naming another client's key pushes nothing there, an
// update naming another client's buffer pulls nothing from it, and the
// client library refuses a batch range in memory not its own.
func TestOnlyTheCallersMemory(t *testing.T) {
	c := newCluster(t, 1)
	victim, mallory := c.client("victim"), c.client("mallory")
	ctx := ctxT(t, 10*time.Second)
	data := bytes.Repeat([]byte("chunk data "), 100)
	if _, err := victim.write(ctx, chunkio.ID{Inode: 1}, 0, data, true); err != nil {
		t.Fatal(err)
	}
	for i := range victim.buf {
		victim.buf[i] = 0xee
	}
	vb := victim.mr.Remote(0, 64)
	read := &storagepb.ReadRequest{Entries: []*storagepb.ReadEntry{{Chain: uint32(testChain), ChainVer: 1, Target: 1,
		Inode: 1, Length: 64, DstKey: vb.Key, DstOffset: vb.Offset}}}
	if err := mallory.ep.Call(ctx, c.eps[0].ID(), chunkio.MethodRead, read, new(storagepb.ReadReply)); !errors.Is(err, fabric.ErrUnknownKey) {
		t.Fatalf("read into another client's key: %v", err)
	}
	update := &storagepb.UpdateRequest{Chain: uint32(testChain), ChainVer: 1, Chunk: chunkio.ID{Inode: 2}.Proto(), Length: 64,
		Crc: chunkio.CRC(victim.buf[:64]), Src: &storagepb.RemoteBuf{Node: string(vb.Node), Key: vb.Key, Offset: vb.Offset, Len: vb.Len},
		Target: 1, Client: 9, Seq: 1, FullChunk: true}
	if err := mallory.ep.Call(ctx, c.eps[0].ID(), chunkio.MethodUpdate, update, new(storagepb.UpdateReply)); !errors.Is(err, fabric.ErrBadRequest) {
		t.Fatalf("update pulling another client's buffer: %v", err)
	}
	if m, _ := c.engines[0].Meta(chunkio.ID{Inode: 2}); m.GetCommitted() != nil || m.GetPending() != nil {
		t.Fatal("an update from a third party's memory was stored")
	}
	if !bytes.Equal(victim.buf[:64], bytes.Repeat([]byte{0xee}, 64)) {
		t.Fatal("bytes were pushed into another client's memory")
	}
	reads := []chunkio.BatchRead{{Chain: testChain, Chunk: chunkio.ID{Inode: 1}, Dst: vb}}
	if err := mallory.ReadBatch(ctx, reads); err != nil || !errors.Is(reads[0].Err, fabric.ErrBadRequest) {
		t.Fatalf("batch range in another endpoint's memory: %v, %v", err, reads[0].Err)
	}
}

// TestHeadSettlesPending: an update whose forward failed after the rest of
// the chain committed it (a lost reply) leaves it pending at the head.
// Acted out by storing that update straight into the replicas' engines:
// committed at the others, pending at the head. The next update, a patch,
// is numbered after the chain's committed version (the head asks the tail)
// and applies to it, and every replica ends with the same bytes.
func TestHeadSettlesPending(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client("client")
	ctx := ctxT(t, 20*time.Second)
	chunk := chunkio.ID{Inode: 5}
	want := fabrictest.RandBytes(1, 64<<10)
	if _, err := cl.write(ctx, chunk, 0, want, true); err != nil {
		t.Fatal(err)
	}
	head := c.engines[0]
	patch := fabrictest.RandBytes(2, 4<<10)
	chainVer := c.routing.Routing().Chains[testChain].Version
	if _, err := head.Prepare(chunk, 2, 1000, patch, false, chainVer); err != nil {
		t.Fatal(err)
	}
	for _, e := range c.engines[1:] {
		chunkstoretest.Write(t, e, chunk, 2, 1000, patch, false)
	}
	copy(want[1000:], patch)
	if m, _ := head.Meta(chunk); m.GetCommitted().GetVer() != 1 || m.GetPending().GetVer() != 2 {
		t.Fatalf("head's record before the next update: %v; want version 1 committed, 2 pending", m)
	}
	patch = fabrictest.RandBytes(3, 4<<10)
	if v, err := cl.write(ctx, chunk, 9000, patch, false); err != nil || v != 3 {
		t.Fatalf("patch after the head's commit was lost: version %d, %v", v, err)
	}
	copy(want[9000:], patch)
	c.sameReplicas(chunk)
	if got := chunkstoretest.ReadAll(t, c.engines[2], chunk); !bytes.Equal(got, want) {
		t.Fatal("the replicas agree on the wrong bytes")
	}
}
