package mgmtd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/faulty"
	"github.com/sluicefs/sluice/fabric/local"
	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/server/chunkstore"
	"github.com/sluicefs/sluice/server/meta"
	"github.com/sluicefs/sluice/server/mgmtd"
	"github.com/sluicefs/sluice/server/storage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStorageUnderMgmtd: three storage nodes run with routing from mgmtd's
// watch stream and mgmtd agents. One node goes silent and unreachable while
// a client writes; mgmtd takes its target out when the lease lapses, the
// chain carries on, the node comes back, mgmtd sets it syncing, its
// predecessor resyncs it and reports it, and it serves again with every
// replica the same.
func TestStorageUnderMgmtd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := soloReplica(t, &metapb.Layout{ChainTable: 1, ChunkSize: 64 << 10, Stripe: 1})
	// The nodes' connection brings the token with every call, as a storage
	// process's does.
	conn, err := grpc.NewClient(serveMgmtd(ctx, t, r).Target(), grpc.WithTransportCredentials(insecure.NewCredentials()), auth.Credentials("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mc := mgmtdpb.NewMgmtdClient(conn)

	fnet := faulty.New(local.NewNetwork(), 1)
	type node struct {
		ep     fabric.Endpoint
		eng    *chunkstore.Engine
		agent  *mgmtd.Agent
		cancel context.CancelFunc
	}
	nodes := map[uint32]*node{}
	for i := uint32(1); i <= 3; i++ {
		ep, err := fnet.Listen(fmt.Sprint("storage-", i))
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		eng, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		a, err := mgmtd.NewAgent(ctx, mc, &mgmtdpb.Node{Id: fmt.Sprint("n", i), Address: string(ep.ID())}, []uint32{i}, 50*time.Millisecond, quiet)
		if err != nil {
			t.Fatal(err)
		}
		nctx, ncancel := context.WithCancel(ctx)
		go a.Run(nctx)
		nodes[i] = &node{ep: ep, eng: eng, agent: a, cancel: ncancel}
	}
	if _, err := mc.CreateTable(ctx, &mgmtdpb.CreateChainTable{Table: 1, Replicas: 3, Chains: 1}); err != nil {
		t.Fatal(err)
	}
	rt, err := routing.Watch(ctx, mc, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for rt.Routing().Chains[1].Version == 0 {
		<-rt.Changed()
	}
	for i, n := range nodes {
		sn, err := storage.NewNode(storage.NodeConfig{Endpoint: n.ep, Routing: rt, Targets: map[routing.TargetID]*chunkstore.Engine{routing.TargetID(i): n.eng},
			Buffers: 8, BufferSize: 1 << 20, ForwardTimeout: 300 * time.Millisecond, Logger: quiet, OnSynced: n.agent.OnSynced})
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Close()
	}
	cep, _ := fnet.Dialer("client")
	defer cep.Close()
	buf := make([]byte, 1<<20)
	mr, _ := cep.RegisterMemory(buf, fabric.AccessRemoteReadWrite)
	cl := chunkio.NewClient(cep, rt)
	cl.AttemptTimeout = 500 * time.Millisecond
	write := func(i int) {
		data := fabrictest.RandBytes(uint64(i), 32<<10)
		copy(buf, data)
		if _, err := cl.WriteRegistered(ctx, 1, chunkio.ID{Inode: 9, Index: uint32(i % 5)}, 0, true, mr, 0, buf[:len(data)]); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for i := 0; i < 20; i++ {
		write(i)
	}
	// Node 2 goes silent and unreachable.
	nodes[2].cancel()
	heal := fnet.Isolate(nodes[2].ep.ID())
	for i := 20; i < 40; i++ {
		write(i)
	}
	if rt.Routing().Targets[2].State != routing.Offline {
		t.Fatalf("target 2 is %v after its lease lapsed", rt.Routing().Targets[2].State)
	}
	// It comes back.
	heal()
	nctx, ncancel := context.WithCancel(ctx)
	defer ncancel()
	go nodes[2].agent.Run(nctx)
	for rt.Routing().Targets[2].State != routing.Serving {
		select {
		case <-rt.Changed():
		case <-ctx.Done():
			t.Fatalf("target 2 never served again: %+v", rt.Routing().Targets[2])
		}
	}
	for i := 40; i < 45; i++ {
		write(i)
	}
	for c := 0; c < 5; c++ {
		var first []byte
		for i, n := range nodes {
			got := make([]byte, 1<<20)
			k, _, err := n.eng.Read(chunkio.ID{Inode: 9, Index: uint32(c)}, 0, got)
			if err != nil {
				t.Fatalf("target %d chunk %d: %v", i, c, err)
			}
			if first == nil {
				first = got[:k]
			} else if !bytes.Equal(first, got[:k]) {
				t.Fatalf("chunk %d differs on target %d", c, i)
			}
		}
	}

	// A file's chunks go when the collector collects the unlinked file.
	res, err := r.Do(ctx, &metapb.Command{Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: meta.RootIno, Name: "data.bin"}}})
	if err != nil || res.Code != 0 {
		t.Fatal(err, res)
	}
	file := res.Inode
	m, _ := r.ClusterMap()
	for i := uint64(0); i < 3; i++ {
		chain := fsmeta.ChunkChain(m.Tables[0].Chains, file.Layout, file.Ino, i)
		copy(buf, "chunk")
		if _, err := cl.WriteRegistered(ctx, routing.ChainID(chain), chunkio.ID{Inode: file.Ino, Index: uint32(i)}, 0, true, mr, 0, buf[:5]); err != nil {
			t.Fatal(err)
		}
	}
	size := uint64(2*64<<10 + 100)
	r.Do(ctx, &metapb.Command{Op: &metapb.Command_CloseSession{CloseSession: &metapb.SessionOp{Ino: file.Ino, Session: 1, Size: &size}}})
	r.Do(ctx, &metapb.Command{Op: &metapb.Command_Unlink{Unlink: &metapb.RemoveOp{Parent: meta.RootIno, Name: "data.bin"}}})
	col := meta.NewCollector(r, meta.StorageRemover{Client: cl, Map: r.ClusterMap}, meta.CollectorConfig{Delay: time.Millisecond, Logger: quiet})
	if n, err := col.Collect(ctx, time.Now().Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("collected %d: %v", n, err)
	}
	for i, n := range nodes {
		for c := uint32(0); c < 3; c++ {
			if _, _, err := n.eng.Read(chunkio.ID{Inode: file.Ino, Index: c}, 0, make([]byte, 8)); !errors.Is(err, chunkio.ErrNotFound) {
				t.Fatalf("target %d still holds chunk %d of the collected file: %v", i, c, err)
			}
		}
	}
}
