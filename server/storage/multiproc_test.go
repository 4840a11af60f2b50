package storage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/tcp"
	"github.com/sluicefs/sluice/internal/testproc"
)

// TestMain runs this binary's child processes: storage nodes.
func TestMain(m *testing.M) {
	testproc.Main(m, map[string]func(string) error{"storage-node": nodeChild})
}

// Storage nodes as child processes: this test binary, in role
// "storage-node" with a nodeChildConfig, runs one node until killed.
type nodeChildConfig struct {
	Listen  string
	Dir     string
	Routing string
	Target  routing.TargetID
	Secret  string
}

func nodeChild(cfgJSON string) error {
	var cfg nodeChildConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return err
	}
	tr, err := tcp.New(tcp.Config{Secret: []byte(cfg.Secret), Logger: quiet})
	if err != nil {
		return err
	}
	ep, err := tr.Listen(cfg.Listen)
	if err != nil {
		return err
	}
	e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: cfg.Dir})
	if err != nil {
		return err
	}
	rt, err := routing.NewFileRouting(cfg.Routing, 20*time.Millisecond)
	if err != nil {
		return err
	}
	_, err = NewNode(NodeConfig{Endpoint: ep, Routing: rt, Targets: map[routing.TargetID]*chunkstore.Engine{cfg.Target: e},
		Buffers: 8, BufferSize: 1 << 20, ForwardTimeout: 500 * time.Millisecond, Logger: quiet,
		OnSynced: func(chain routing.ChainID, target routing.TargetID, _ uint64) error {
			fmt.Printf("synced %d %d\n", chain, target)
			return nil
		}})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	select {}
}

func startNode(t *testing.T, cfg nodeChildConfig) *testproc.Proc {
	t.Helper()
	b, _ := json.Marshal(cfg)
	p := testproc.Start(t, testproc.Command("storage-node", string(b)))
	p.Expect(t, "ready", 30*time.Second)
	return p
}

// TestMultiProcess: three storage nodes in their own processes over TCP.
// One is SIGKILLed during writes, taken out of the chain, restarted on its
// data, resynced while writes go on, and serves again; every acknowledged
// write reads back from every replica.
func TestMultiProcess(t *testing.T) {
	dir := t.TempDir()
	routingPath := filepath.Join(dir, "routing.json")
	const secret = "multi-process secret"
	r := &routing.Routing{Version: 1, Chains: map[routing.ChainID]routing.Chain{}, Targets: map[routing.TargetID]routing.Target{}}
	chain := routing.Chain{ID: testChain, Version: 1}
	cfgs := map[routing.TargetID]nodeChildConfig{}
	for i := routing.TargetID(1); i <= 3; i++ {
		addr := testproc.FreeAddr(t)
		r.Targets[i] = routing.Target{ID: i, Node: fabric.NodeID(addr), State: routing.Serving}
		chain.Targets = append(chain.Targets, i)
		cfgs[i] = nodeChildConfig{Listen: addr, Dir: filepath.Join(dir, fmt.Sprint(i)), Routing: routingPath, Target: i, Secret: secret}
	}
	r.Chains[testChain] = chain
	if err := routing.WriteRoutingFile(routingPath, r); err != nil {
		t.Fatal(err)
	}
	children := map[routing.TargetID]*testproc.Proc{}
	for i := routing.TargetID(1); i <= 3; i++ {
		children[i] = startNode(t, cfgs[i])
	}
	update := func(fn func(*routing.Routing)) {
		r = r.Next()
		fn(r)
		if err := routing.WriteRoutingFile(routingPath, r); err != nil {
			t.Fatal(err)
		}
	}

	tr, _ := tcp.New(tcp.Config{Secret: []byte(secret), Logger: quiet})
	ep, err := tr.Dialer("client")
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	rt, err := routing.NewFileRouting(routingPath, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	buf := make([]byte, 2<<20)
	mr, _ := ep.RegisterMemory(buf, fabric.AccessRemoteReadWrite)
	cl := &testClient{Client: chunkio.NewClient(ep, rt), buf: buf, mr: mr}
	cl.AttemptTimeout = time.Second

	ctx := ctxT(t, 120*time.Second)
	const chunks, writes = 8, 240
	value := func(i int) []byte { return fabrictest.RandBytes(uint64(i), 64<<10) }
	var acked atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := 1; i <= writes; i++ {
			if _, err := cl.write(ctx, chunkio.ID{Inode: 500, Index: uint32(i % chunks)}, 0, value(i), true); err != nil {
				done <- fmt.Errorf("write %d: %w", i, err)
				return
			}
			acked.Store(int64(i))
		}
		done <- nil
	}()
	waitFor := func(n int64) {
		for acked.Load() < n {
			select {
			case err := <-done:
				t.Fatalf("writer stopped early: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitFor(60)
	children[2].Cmd.Process.Kill() // SIGKILL
	children[2].Cmd.Wait()
	update(func(r *routing.Routing) { r.SetOffline(2) })
	waitFor(120)
	children[2] = startNode(t, cfgs[2])
	update(func(r *routing.Routing) { r.Rejoin(testChain, 2) })
	select {
	case l := <-children[3].Lines:
		if l != fmt.Sprintf("synced %d %d", testChain, 2) {
			t.Fatalf("predecessor said %q", l)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("target 2 never synced")
	}
	update(func(r *routing.Routing) { r.SetServing(testChain, 2) })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && rt.Routing().Version != r.Version; {
		time.Sleep(10 * time.Millisecond)
	}
	for c := 0; c < chunks; c++ {
		last := writes - (writes-c)%chunks
		for replica := 0; replica < 3; replica++ {
			got, _, err := cl.read(ctx, chunkio.ID{Inode: 500, Index: uint32(c)}, 0, 64<<10)
			if err != nil {
				t.Fatalf("chunk %d: %v", c, err)
			}
			if !bytes.Equal(got, value(last)) {
				t.Fatalf("chunk %d on a replica does not hold write %d", c, last)
			}
		}
	}
	if !strings.Contains(fmt.Sprint(rt.Routing().Chains[testChain].Targets), "2") {
		t.Fatal("target 2 not back in the chain")
	}
}
