package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/local"
	"github.com/sluicefs/sluice/fabric/tcp"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// benchCluster is a chain of replicas on one machine, each target in its
// own directory on the same disk, nodes connected by transport tr.
func benchCluster(b *testing.B, replicas int, tr fabric.Transport, addr func(i int) string) (*routing.StaticRouting, []fabric.Endpoint) {
	r := &routing.Routing{Version: 1, Chains: map[routing.ChainID]routing.Chain{}, Targets: map[routing.TargetID]routing.Target{}}
	chain := routing.Chain{ID: testChain, Version: 1}
	var eps []fabric.Endpoint
	var engines []*chunkstore.Engine
	for i := 1; i <= replicas; i++ {
		ep, err := tr.Listen(addr(i))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ep.Close() })
		e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		eps, engines = append(eps, ep), append(engines, e)
		r.Targets[routing.TargetID(i)] = routing.Target{ID: routing.TargetID(i), Node: ep.ID(), State: routing.Serving}
		chain.Targets = append(chain.Targets, routing.TargetID(i))
	}
	r.Chains[testChain] = chain
	rt := routing.NewStaticRouting(r)
	for i, ep := range eps {
		n, err := NewNode(NodeConfig{Endpoint: ep, Routing: rt, Targets: map[routing.TargetID]*chunkstore.Engine{routing.TargetID(i + 1): engines[i]}, Buffers: 16, BufferSize: 1 << 20, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { n.Close() })
	}
	return rt, eps
}

// durableWriters returns a write for each of `parallel` writers of the
// baseline: writer w rewrites its own `files` size-byte files in place, in
// turn, and syncs each write, which is what "the same bytes at the same
// durability" costs on this disk without Sluice. files is the number of
// chunks each chain writer cycles through: the disk behind these machines
// is much faster at rewriting one file than at rewriting several (1.05 ms
// against 1.85 ms per synced 1 MiB with 16 files per writer, four writers),
// so a baseline over fewer places than the chain's chunks would measure
// the footprint, not the engine. The chain's second file per chunk (its
// copy-on-write slot) is the engine's own cost and stays in the ratio.
func durableWriters(b *testing.B, size, parallel, files int) func(w int) {
	dir := b.TempDir()
	data := fabrictest.RandBytes(1, size)
	fs := make([][]*os.File, parallel)
	for w := range fs {
		for i := 0; i < files; i++ {
			f, err := os.Create(filepath.Join(dir, fmt.Sprint(w, "-", i)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { f.Close() })
			fs[w] = append(fs[w], f)
		}
	}
	writes := make([]int, parallel)
	return func(w int) {
		writes[w]++
		f := fs[w][writes[w]%files]
		if _, err := f.WriteAt(data, 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// parallelVersus is fabrictest.Versus for `parallel` workers: op and base
// each run b.N times, spread over the workers, in alternating blocks so
// that drift in the machine's speed (other users of its disk and cores)
// hits both alike. b's timer covers op only. It returns base's time ÷ op's
// time.
func parallelVersus(b *testing.B, parallel int, op, base func(w int)) float64 {
	const block = 32
	run := func(fn func(w int), n int) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for w := 0; w < parallel; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					fn(w)
				}
			}()
		}
		wg.Wait()
		return time.Since(t0)
	}
	run(op, parallel)
	run(base, parallel)
	var opTime, baseTime time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		opTime += run(op, n)
		b.StopTimer()
		baseTime += run(base, n)
		b.StartTimer()
	}
	b.StopTimer()
	return baseTime.Seconds() / opTime.Seconds()
}

const benchParallel = 4

// benchChunks is how many chunks each writer of BenchmarkChainWrite cycles
// through.
const benchChunks = 8

// BenchmarkChainWrite: 1 MiB full-chunk writes through a chain, 4 writers
// on different chunks, reported against synced 1 MiB writes to the same
// disk by 4 writers, divided by the replica count (each replica writes the
// bytes once), the two alternating in blocks.
func BenchmarkChainWrite(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d/size=1MiB", replicas), func(b *testing.B) {
			const size = 1 << 20
			net := local.NewNetwork()
			rt, _ := benchCluster(b, replicas, net, func(i int) string { return fmt.Sprintf("node-%d", i) })
			var clients []*testClient
			for w := 0; w < benchParallel; w++ {
				ep, _ := net.Dialer("client")
				b.Cleanup(func() { ep.Close() })
				buf := fabrictest.RandBytes(uint64(w), size)
				mr, _ := ep.RegisterMemory(buf, fabric.AccessRemoteRead)
				clients = append(clients, &testClient{Client: chunkio.NewClient(ep, rt), buf: buf, mr: mr})
			}
			ctx := context.Background()
			var writes [benchParallel]int
			op := func(w int) {
				cl := clients[w]
				writes[w]++
				chunk := chunkio.ID{Inode: uint64(w + 1), Index: uint32(writes[w] % benchChunks)}
				if _, err := cl.WriteRegistered(ctx, testChain, chunk, 0, true, cl.mr, 0, cl.buf); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(size)
			x := parallelVersus(b, benchParallel, op, durableWriters(b, size, benchParallel, benchChunks))
			b.ReportMetric(x*float64(replicas), "x_disk")
		})
	}
}

// BenchmarkChainRead: reads of 1 MiB chunks over TCP against a plain
// loopback socket moving the same bytes (x_socket), and batched 4 KiB reads
// (iops).
func BenchmarkChainRead(b *testing.B) {
	tr, err := tcp.New(tcp.Config{Secret: []byte("bench"), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	rt, _ := benchCluster(b, 3, tr, func(int) string { return "127.0.0.1:0" })
	ep, _ := tr.Dialer("client")
	b.Cleanup(func() { ep.Close() })
	buf := make([]byte, 2<<20)
	mr, _ := ep.RegisterMemory(buf, fabric.AccessRemoteReadWrite)
	cl := &testClient{Client: chunkio.NewClient(ep, rt), buf: buf, mr: mr}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		if _, err := cl.write(ctx, chunkio.ID{Inode: 1, Index: uint32(i)}, 0, fabrictest.RandBytes(uint64(i), 1<<20), true); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("size=1MiB", func(b *testing.B) {
		const size = 1 << 20
		op := func() {
			if n, _, err := cl.ReadRegistered(ctx, testChain, chunkio.ID{Inode: 1, Index: 0}, 0, mr, 0, buf[:size], false); err != nil || n != size {
				b.Fatalf("read: %d %v", n, err)
			}
		}
		b.SetBytes(size)
		b.ReportMetric(fabrictest.Versus(b, op, fabrictest.SocketExchange(b, 8, size)), "x_socket")
	})
	b.Run("size=4KiB/batch=64", func(b *testing.B) {
		node := rt.Routing().Targets[1].Node
		ch := rt.Routing().Chains[testChain]
		req := batchRead(mr, ch, 64, 4<<10)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			var resp storagepb.ReadReply
			if err := ep.Call(ctx, node, chunkio.MethodRead, req, &resp); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "iops")
	})
}

// batchRead is a read request for n ranges of size bytes spread over the
// benchmark's chunks, pushed into consecutive parts of mr.
func batchRead(mr fabric.MR, ch routing.Chain, n, size int) *storagepb.ReadRequest {
	req := &storagepb.ReadRequest{}
	for i := 0; i < n; i++ {
		rb := mr.Remote(i*size, size)
		req.Entries = append(req.Entries, &storagepb.ReadEntry{
			Chain: uint32(ch.ID), ChainVer: ch.Version, Inode: 1, Index: uint32(i % 4),
			Offset: uint32(i*7919*size) % (1<<20 - uint32(size)), Length: uint32(size), Target: 1,
			DstKey: rb.Key, DstOffset: rb.Offset,
		})
	}
	return req
}
