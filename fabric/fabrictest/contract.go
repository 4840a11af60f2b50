// Package fabrictest is the contract every fabric transport must meet: one
// suite, run by each implementation's tests (tcp, local, faulty, verbs) so
// that storage code can rely on the same behaviour whatever the wire.
package fabrictest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Pair makes a listening server endpoint and a client endpoint that can reach
// it by the server's ID. Both must be closed by the test's cleanup; Close
// being called again by the suite must be harmless.
type Pair func(t *testing.T) (server, client fabric.Endpoint)

// ErrApp is an application error code used to check that codes survive a
// trip across the wire; its code is outside Sluice's table (errcode).
var ErrApp = fabric.NewError(fabric.FirstAppCode+999, "fabrictest: application error")

// Run runs the contract suite against a transport.
func Run(t *testing.T, pair Pair) {
	t.Run("Call", func(t *testing.T) { testCall(t, pair) })
	t.Run("CallErrors", func(t *testing.T) { testCallErrors(t, pair) })
	t.Run("ConcurrentCalls", func(t *testing.T) { testConcurrentCalls(t, pair) })
	t.Run("ReadWrite", func(t *testing.T) { testReadWrite(t, pair) })
	t.Run("ServerPullsAndPushes", func(t *testing.T) { testServerSide(t, pair) })
	t.Run("Batch", func(t *testing.T) { testBatch(t, pair) })
	t.Run("FenceDuringBatches", func(t *testing.T) { testFenceDuringBatches(t, pair) })
	t.Run("AccessErrors", func(t *testing.T) { testAccessErrors(t, pair) })
	t.Run("Deadline", func(t *testing.T) { testDeadline(t, pair) })
	t.Run("PeerDeath", func(t *testing.T) { testPeerDeath(t, pair) })
	t.Run("ClosedEndpoint", func(t *testing.T) { testClosedEndpoint(t, pair) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func echo(ep fabric.Endpoint) {
	fabric.Handle(ep, "echo", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
		return wrapperspb.Bytes(req.Value), nil
	})
}

// RandBytes returns n pseudo-random bytes from seed.
func RandBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testCall(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	echo(srv)
	var from fabric.NodeID
	fabric.Handle(srv, "who", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		from = peer
		return wrapperspb.String("hello " + req.Value), nil
	})
	ctx := ctxT(t)
	for _, n := range []int{0, 1, 64, 64 << 10, 512 << 10} {
		in := RandBytes(uint64(n), n)
		var out wrapperspb.BytesValue
		if err := cli.Call(ctx, srv.ID(), "echo", wrapperspb.Bytes(in), &out); err != nil {
			t.Fatalf("echo %d bytes: %v", n, err)
		}
		if !bytes.Equal(out.Value, in) {
			t.Fatalf("echo %d bytes: got %d bytes back, differing", n, len(out.Value))
		}
	}
	var s wrapperspb.StringValue
	if err := cli.Call(ctx, srv.ID(), "who", wrapperspb.String("x"), &s); err != nil {
		t.Fatal(err)
	}
	if s.Value != "hello x" || from != cli.ID() {
		t.Fatalf("got %q from %q, want %q from %q", s.Value, from, "hello x", cli.ID())
	}
}

func testCallErrors(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	fabric.Handle(srv, "fail", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, fmt.Errorf("chain 7: %w", ErrApp)
	})
	fabric.Handle(srv, "plain", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, errors.New("disk on fire")
	})
	fabric.Handle(srv, "panic", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		panic("handler bug")
	})
	echo(srv)
	ctx := ctxT(t)
	var out wrapperspb.StringValue
	err := cli.Call(ctx, srv.ID(), "fail", wrapperspb.String(""), &out)
	if !errors.Is(err, ErrApp) || errors.Is(err, fabric.ErrInternal) {
		t.Fatalf("application error: got %v, want one matching ErrApp", err)
	}
	err = cli.Call(ctx, srv.ID(), "plain", wrapperspb.String(""), &out)
	if !errors.Is(err, fabric.ErrInternal) || !bytes.Contains([]byte(err.Error()), []byte("disk on fire")) {
		t.Fatalf("plain error: got %v, want ErrInternal carrying the message", err)
	}
	err = cli.Call(ctx, srv.ID(), "panic", wrapperspb.String(""), &out)
	if !errors.Is(err, fabric.ErrInternal) {
		t.Fatalf("panicking handler: got %v, want ErrInternal", err)
	}
	err = cli.Call(ctx, srv.ID(), "nope", wrapperspb.String(""), &out)
	if !errors.Is(err, fabric.ErrUnknownMethod) {
		t.Fatalf("unknown method: got %v, want ErrUnknownMethod", err)
	}
	// A body that does not parse as the handler's type is refused.
	err = cli.Call(ctx, srv.ID(), "fail", wrapperspb.Bytes([]byte{0xff, 0xff, 0xff}), &out)
	if !errors.Is(err, fabric.ErrBadRequest) {
		t.Fatalf("malformed body: got %v, want ErrBadRequest", err)
	}
	// The server still works after all that.
	var e wrapperspb.BytesValue
	if err := cli.Call(ctx, srv.ID(), "echo", wrapperspb.Bytes([]byte("ok")), &e); err != nil || string(e.Value) != "ok" {
		t.Fatalf("echo after errors: %v %q", err, e.Value)
	}
}

func testConcurrentCalls(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	echo(srv)
	ctx := ctxT(t)
	const workers, calls = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				in := RandBytes(uint64(w*1000+i), 1+(w*i)%3000)
				var out wrapperspb.BytesValue
				if err := cli.Call(ctx, srv.ID(), "echo", wrapperspb.Bytes(in), &out); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(in, out.Value) {
					errs <- fmt.Errorf("worker %d call %d: reply belongs to another call", w, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Sizes are the transfer sizes every transport must move intact.
var Sizes = []int{0, 1, 4 << 10, 1 << 20, 64 << 20}

func testReadWrite(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	ctx := ctxT(t)
	const off = 3 // unaligned on purpose
	for _, n := range Sizes {
		region := RandBytes(uint64(n)+1, n+off+5)
		mr, err := srv.RegisterMemory(region, fabric.AccessRemoteReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := cli.Read(ctx, mr.Remote(off, n), got); err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
		if !bytes.Equal(got, region[off:off+n]) {
			t.Fatalf("read %d: bytes differ", n)
		}
		in := RandBytes(uint64(n)+2, n)
		before := bytes.Clone(region)
		mr.Fence()
		if err := cli.Write(ctx, in, mr.Remote(off, n)); err != nil {
			t.Fatalf("write %d: %v", n, err)
		}
		mr.Fence()
		if !bytes.Equal(region[off:off+n], in) {
			t.Fatalf("write %d: bytes differ", n)
		}
		if !bytes.Equal(region[:off], before[:off]) || !bytes.Equal(region[off+n:], before[off+n:]) {
			t.Fatalf("write %d: bytes outside the range changed", n)
		}
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
}

// testServerSide checks the RDMA pattern the storage write path depends on:
// the server pulls from and pushes into the client's memory, over whatever
// connection the client opened.
func testServerSide(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	ctx := ctxT(t)
	buf := RandBytes(11, 1<<20)
	mr, err := cli.RegisterMemory(buf, fabric.AccessRemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	fabric.Handle(srv, "pull", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.UInt64Value) (*wrapperspb.BytesValue, error) {
		rb := mr.Remote(0, len(buf))
		if rb.Node != peer {
			return nil, fmt.Errorf("remote buffer names %s, caller is %s", rb.Node, peer)
		}
		got := make([]byte, len(buf))
		if err := srv.Read(ctx, rb, got); err != nil {
			return nil, err
		}
		// Push it back reversed into the second half.
		half := len(got) / 2
		rev := make([]byte, half)
		for i := range rev {
			rev[i] = got[half-1-i]
		}
		if err := srv.Write(ctx, rev, mr.Remote(half, half)); err != nil {
			return nil, err
		}
		return wrapperspb.Bytes(got[:16]), nil
	})
	orig := bytes.Clone(buf)
	var out wrapperspb.BytesValue
	if err := cli.Call(ctx, srv.ID(), "pull", wrapperspb.UInt64(0), &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Value, orig[:16]) {
		t.Fatal("server pulled the wrong bytes")
	}
	mr.Fence()
	half := len(orig) / 2
	for i := 0; i < half; i++ {
		if buf[half+i] != orig[half-1-i] {
			t.Fatalf("server push: byte %d differs", half+i)
		}
	}
}

func testBatch(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	ctx := ctxT(t)
	regions := [][]byte{RandBytes(21, 3<<20), RandBytes(22, 1<<20)}
	var mrs []fabric.MR
	for _, r := range regions {
		mr, err := srv.RegisterMemory(r, fabric.AccessRemoteReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		mrs = append(mrs, mr)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	type rng2 struct{ region, off, n int }
	var ranges []rng2
	// Non-overlapping ranges: region r is cut into 100 slots.
	for i := 0; i < 100; i++ {
		r := i % 2
		slot := len(regions[r]) / 50
		n := rng.IntN(slot)
		if i%17 == 0 {
			n = 0
		}
		ranges = append(ranges, rng2{r, (i / 2) * slot, n})
	}
	ops := make([]fabric.Op, len(ranges))
	for i, rg := range ranges {
		ops[i] = fabric.Op{Remote: mrs[rg.region].Remote(rg.off, rg.n), Local: make([]byte, rg.n)}
	}
	if err := cli.ReadBatch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	for i, rg := range ranges {
		if !bytes.Equal(ops[i].Local, regions[rg.region][rg.off:rg.off+rg.n]) {
			t.Fatalf("batched read range %d differs", i)
		}
	}
	for i := range ops {
		ops[i].Local = RandBytes(uint64(1000+i), len(ops[i].Local))
	}
	for _, mr := range mrs {
		mr.Fence()
	}
	if err := cli.WriteBatch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	for _, mr := range mrs {
		mr.Fence()
	}
	for i, rg := range ranges {
		if !bytes.Equal(ops[i].Local, regions[rg.region][rg.off:rg.off+rg.n]) {
			t.Fatalf("batched write range %d differs", i)
		}
	}
	// A batch with one bad range is refused before any byte moves.
	before := [][]byte{bytes.Clone(regions[0]), bytes.Clone(regions[1])}
	bad := append([]fabric.Op(nil), ops...)
	for i := range bad {
		bad[i].Local = bytes.Repeat([]byte{0xAB}, len(bad[i].Local))
	}
	bad[len(bad)-1].Remote.Offset = uint64(len(regions[1]))
	bad[len(bad)-1].Remote.Len = 1
	bad[len(bad)-1].Local = []byte{1}
	for _, mr := range mrs {
		mr.Fence()
	}
	if err := cli.WriteBatch(ctx, bad); !errors.Is(err, fabric.ErrOutOfBounds) {
		t.Fatalf("batch with a bad range: got %v, want ErrOutOfBounds", err)
	}
	for _, mr := range mrs {
		mr.Fence()
	}
	for r := range regions {
		if !bytes.Equal(regions[r], before[r]) {
			t.Fatalf("refused batch changed region %d", r)
		}
	}
	if err := cli.ReadBatch(ctx, nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

// testFenceDuringBatches runs batches that hold several spans of one region
// at once while the owner fences it without pause: a fence must never wedge
// a batch between its first and second span.
func testFenceDuringBatches(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	ctx := ctxT(t)
	region := RandBytes(31, 1<<20)
	mr, err := srv.RegisterMemory(region, fabric.AccessRemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	fenced := make(chan struct{})
	go func() {
		defer close(fenced)
		for {
			select {
			case <-stop:
				return
			default:
				mr.Fence()
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				ops := make([]fabric.Op, 8)
				for k := range ops {
					ops[k] = fabric.Op{Remote: mr.Remote((g*8+k)*4096, 4096), Local: make([]byte, 4096)}
				}
				if err := cli.ReadBatch(ctx, ops); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-fenced
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testAccessErrors(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	ctx := ctxT(t)
	rw := make([]byte, 4096)
	ro := make([]byte, 4096)
	wo := make([]byte, 4096)
	mrRW, _ := srv.RegisterMemory(rw, fabric.AccessRemoteReadWrite)
	mrRO, _ := srv.RegisterMemory(ro, fabric.AccessRemoteRead)
	mrWO, _ := srv.RegisterMemory(wo, fabric.AccessRemoteWrite)
	buf := make([]byte, 16)

	cases := []struct {
		name string
		op   func() error
		want error
	}{
		{"read past end", func() error { return cli.Read(ctx, mrRW.Remote(4090, 16), buf) }, fabric.ErrOutOfBounds},
		{"write past end", func() error { return cli.Write(ctx, buf, mrRW.Remote(4090, 16)) }, fabric.ErrOutOfBounds},
		{"offset overflow", func() error {
			rb := mrRW.Remote(0, 16)
			rb.Offset = ^uint64(0) - 4
			return cli.Read(ctx, rb, buf)
		}, fabric.ErrOutOfBounds},
		{"wrong key", func() error {
			rb := mrRW.Remote(0, 16)
			rb.Key ^= 1 << 40
			return cli.Read(ctx, rb, buf)
		}, fabric.ErrUnknownKey},
		{"never issued key", func() error {
			rb := mrRW.Remote(0, 16)
			rb.Key = rb.Key&^0xffffffff | 0xfffffff0
			return cli.Read(ctx, rb, buf)
		}, fabric.ErrUnknownKey},
		{"write to read-only", func() error { return cli.Write(ctx, buf, mrRO.Remote(0, 16)) }, fabric.ErrAccessDenied},
		{"read from write-only", func() error { return cli.Read(ctx, mrWO.Remote(0, 16), buf) }, fabric.ErrAccessDenied},
		{"length mismatch", func() error { return cli.Read(ctx, mrRW.Remote(0, 8), buf) }, fabric.ErrLengthMismatch},
	}
	for _, c := range cases {
		if err := c.op(); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	mrRO.Fence()
	if !bytes.Equal(ro, make([]byte, 4096)) {
		t.Fatal("refused write changed a read-only region")
	}
	// Revocation takes effect at once and is told apart from a bad key.
	rb := mrRW.Remote(0, 16)
	if err := cli.Read(ctx, rb, buf); err != nil {
		t.Fatal(err)
	}
	if err := mrRW.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := cli.Read(ctx, rb, buf); !errors.Is(err, fabric.ErrRevoked) {
		t.Fatalf("read after deregister: got %v, want ErrRevoked", err)
	}
	if err := cli.Write(ctx, buf, rb); !errors.Is(err, fabric.ErrRevoked) {
		t.Fatalf("write after deregister: got %v, want ErrRevoked", err)
	}
	if err := mrRW.Deregister(); err == nil {
		t.Fatal("second deregister succeeded")
	}
}

// blocker registers a "block" handler that waits for its context to end and
// reports its deadline.
func blocker(ep fabric.Endpoint) (started chan time.Time) {
	started = make(chan time.Time, 16)
	fabric.Handle(ep, "block", func(ctx context.Context, peer fabric.NodeID, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		dl, _ := ctx.Deadline()
		started <- dl
		<-ctx.Done()
		return nil, ctx.Err()
	})
	return started
}

func testDeadline(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	started := blocker(srv)
	echo(srv)
	var out wrapperspb.StringValue

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	want, _ := ctx.Deadline()
	t0 := time.Now()
	err := cli.Call(ctx, srv.ID(), "block", wrapperspb.String(""), &out)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked call: got %v, want DeadlineExceeded", err)
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Fatalf("deadline of 200ms honoured only after %v", el)
	}
	dl := <-started
	if dl.IsZero() || dl.Sub(want) > time.Second || want.Sub(dl) > time.Second {
		t.Fatalf("handler deadline %v, caller's %v: the deadline did not travel", dl, want)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { <-started; cancel2() }()
	if err := cli.Call(ctx2, srv.ID(), "block", wrapperspb.String(""), &out); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: got %v, want Canceled", err)
	}

	// An already expired context fails before anything is sent.
	ctx3, cancel3 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel3()
	if err := cli.Read(ctx3, fabric.RemoteBuf{Node: srv.ID()}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired read: got %v, want DeadlineExceeded", err)
	}
	// The endpoint is still usable.
	var e wrapperspb.BytesValue
	if err := cli.Call(ctxT(t), srv.ID(), "echo", wrapperspb.Bytes([]byte("alive")), &e); err != nil {
		t.Fatalf("call after deadlines: %v", err)
	}
}

func testPeerDeath(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	started := blocker(srv)
	echo(srv)
	ctx := ctxT(t)
	var e wrapperspb.BytesValue
	if err := cli.Call(ctx, srv.ID(), "echo", wrapperspb.Bytes([]byte("x")), &e); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		var out wrapperspb.StringValue
		errc <- cli.Call(ctx, srv.ID(), "block", wrapperspb.String(""), &out)
	}()
	<-started
	srv.Close()
	select {
	case err := <-errc:
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call to a dead peer: got %v, want a connection error", err)
		}
		if !errors.Is(err, fabric.ErrPeerClosed) {
			t.Fatalf("call to a dead peer: got %v, want ErrPeerClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("call to a dead peer hung")
	}
	ctx2, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := cli.Call(ctx2, srv.ID(), "echo", wrapperspb.Bytes([]byte("x")), &e)
	if !errors.Is(err, fabric.ErrUnreachable) && !errors.Is(err, fabric.ErrPeerClosed) {
		t.Fatalf("call after peer death: got %v, want ErrUnreachable or ErrPeerClosed", err)
	}
}

func testClosedEndpoint(t *testing.T, pair Pair) {
	srv, cli := pair(t)
	echo(srv)
	cli.Close()
	var e wrapperspb.BytesValue
	err := cli.Call(ctxT(t), srv.ID(), "echo", wrapperspb.Bytes([]byte("x")), &e)
	if !errors.Is(err, fabric.ErrClosed) {
		t.Fatalf("call on a closed endpoint: got %v, want ErrClosed", err)
	}
	if err := cli.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// CheckGoroutines fails t if, once cleanup has run, more goroutines are left
// than when it was called. Call it first in a test.
func CheckGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines left running (was %d):\n%s", n, before, buf)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// PairOn returns a Pair that listens on tr at addr and dials from a second
// endpoint of tr, closing both when the test ends.
func PairOn(tr func(t *testing.T) fabric.Transport, addr string) Pair {
	return func(t *testing.T) (fabric.Endpoint, fabric.Endpoint) {
		n := tr(t)
		srv, err := n.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		cli, err := n.Dialer("client")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return srv, cli
	}
}
