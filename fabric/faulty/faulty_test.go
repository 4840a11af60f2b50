package faulty

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/local"
	"github.com/sluicefs/sluice/fabric/tcp"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func tcpTransport(t *testing.T) fabric.Transport {
	tr, err := tcp.New(tcp.Config{Secret: []byte("faulty test secret")})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func listen(t *testing.T, tr fabric.Transport, addr string) fabric.Endpoint {
	ep, err := tr.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

// TestContract: with no rules the wrapper is transparent, over real TCP.
func TestContract(t *testing.T) {
	fabrictest.CheckGoroutines(t)
	fabrictest.Run(t, fabrictest.PairOn(func(t *testing.T) fabric.Transport { return New(tcpTransport(t), 1) }, "127.0.0.1:0"))
}

type cluster struct {
	net   *Network
	a, b  fabric.Endpoint
	calls atomic.Int32 // handler invocations on b
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{net: New(local.NewNetwork(), 7)}
	c.a = listen(t, c.net, "a")
	c.b = listen(t, c.net, "b")
	fabric.Handle(c.b, "ping", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		c.calls.Add(1)
		return wrapperspb.String("pong"), nil
	})
	return c
}

func (c *cluster) ping(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out wrapperspb.StringValue
	return c.a.Call(ctx, c.b.ID(), "ping", wrapperspb.String(""), &out)
}

func TestActions(t *testing.T) {
	custom := errors.New("custom failure")
	cases := []struct {
		name      string
		rule      Rule
		wantErr   error
		wantCalls int32
		minTime   time.Duration
	}{
		{"none", Rule{From: "b", Action: Drop}, nil, 1, 0},
		{"drop", Rule{From: "a", To: "b", Action: Drop}, context.DeadlineExceeded, 0, 0},
		{"drop reply", Rule{Action: DropReply}, context.DeadlineExceeded, 1, 0},
		{"delay", Rule{Action: Delay, Delay: 150 * time.Millisecond}, nil, 1, 150 * time.Millisecond},
		{"duplicate", Rule{Action: Duplicate}, nil, 2, 0},
		{"fail", Rule{Action: Fail}, fabric.ErrUnreachable, 0, 0},
		{"fail custom", Rule{Action: Fail, Err: custom}, custom, 0, 0},
		{"other method", Rule{Method: "other", Action: Fail}, nil, 1, 0},
		{"reads only", Rule{Kind: KindRead, Action: Fail}, nil, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.net.Add(tc.rule)
			t0 := time.Now()
			err := c.ping(300 * time.Millisecond)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if got := c.calls.Load(); got != tc.wantCalls {
				t.Fatalf("handler ran %d times, want %d", got, tc.wantCalls)
			}
			if el := time.Since(t0); el < tc.minTime {
				t.Fatalf("took %v, want at least %v", el, tc.minTime)
			}
		})
	}
}

func TestPartitionAndHeal(t *testing.T) {
	c := newCluster(t)
	third := listen(t, c.net, "c")
	buf := make([]byte, 64)
	mr, err := c.a.RegisterMemory(buf, fabric.AccessRemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	heal := c.net.Partition([]fabric.NodeID{"a"}, []fabric.NodeID{"b"})
	if err := c.ping(100 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a->b across the partition: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.b.Read(ctx, mr.Remote(0, 64), make([]byte, 64)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b->a across the partition: %v", err)
	}
	if err := third.Read(context.Background(), mr.Remote(0, 64), make([]byte, 64)); err != nil {
		t.Fatalf("c->a outside the partition: %v", err)
	}
	heal()
	if err := c.ping(time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	if c.calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", c.calls.Load())
	}
	healB := c.net.Isolate("b")
	if err := c.ping(50 * time.Millisecond); err == nil {
		t.Fatal("isolated node answered")
	}
	healB()
	if err := c.ping(time.Second); err != nil {
		t.Fatalf("after isolation healed: %v", err)
	}
}

func TestCountAndProb(t *testing.T) {
	c := newCluster(t)
	c.net.Add(Rule{Action: Fail, Count: 2})
	for i, want := range []bool{true, true, false, false} {
		if err := c.ping(time.Second); (err != nil) != want {
			t.Fatalf("call %d: err %v, want failure=%v", i, err, want)
		}
	}
	c.net.Heal()
	c.net.Add(Rule{Action: Fail, Prob: 0.5})
	failed := 0
	for i := 0; i < 200; i++ {
		if c.ping(time.Second) != nil {
			failed++
		}
	}
	if failed < 60 || failed > 140 {
		t.Fatalf("rule with Prob 0.5 failed %d of 200 calls", failed)
	}
}

func TestBatchesFollowRules(t *testing.T) {
	c := newCluster(t)
	bufA, bufB := make([]byte, 16), make([]byte, 16)
	mrB, _ := c.b.RegisterMemory(bufB, fabric.AccessRemoteReadWrite)
	third := listen(t, c.net, "c")
	bufC := make([]byte, 16)
	mrC, _ := third.RegisterMemory(bufC, fabric.AccessRemoteReadWrite)
	c.net.Add(Rule{To: "c", Kind: KindWrite, Action: Fail})
	ops := []fabric.Op{{Remote: mrB.Remote(0, 16), Local: bufA}, {Remote: mrC.Remote(0, 16), Local: make([]byte, 16)}}
	if err := c.a.ReadBatch(context.Background(), ops); err != nil {
		t.Fatalf("read batch: %v", err)
	}
	if err := c.a.WriteBatch(context.Background(), ops); !errors.Is(err, fabric.ErrUnreachable) {
		t.Fatalf("write batch to a failing node: %v", err)
	}
}
