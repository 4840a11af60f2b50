package rpc

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// replica serves the health service; while refuse is set it answers every
// call Unavailable, as a follower answers a write. hits counts the calls.
type replica struct {
	addr   string
	refuse atomic.Bool
	hits   atomic.Int32
}

func startReplica(t *testing.T, refuse bool) *replica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{addr: ln.Addr().String()}
	r.refuse.Store(refuse)
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		r.hits.Add(1)
		if r.refuse.Load() {
			return nil, status.Error(codes.Unavailable, "not the leader")
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return r
}

func check(ctx context.Context, l *LeaderConn) error {
	_, err := healthpb.NewHealthClient(l).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// TestLeaderConnFollows: calls pass over replicas that refuse them and
// over addresses nobody listens on, stay with the one that answered, and
// move when it starts refusing.
func TestLeaderConnFollows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	a, b := startReplica(t, true), startReplica(t, false)
	l, err := Dial(a.addr + ", " + deadAddr + "," + b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := check(ctx, l); err != nil {
		t.Fatalf("call with a leader among the replicas: %v", err)
	}
	if l.Addr() != b.addr || a.hits.Load() != 1 {
		t.Fatalf("after the first call: at %s (leader %s), follower asked %d times", l.Addr(), b.addr, a.hits.Load())
	}
	for range 5 {
		if err := check(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if a.hits.Load() != 1 || b.hits.Load() != 6 {
		t.Fatalf("calls did not stay with the leader: follower %d, leader %d", a.hits.Load(), b.hits.Load())
	}
	// Leadership moves from b to a.
	b.refuse.Store(true)
	a.refuse.Store(false)
	if err := check(ctx, l); err != nil {
		t.Fatalf("call after leadership moved: %v", err)
	}
	if l.Addr() != a.addr {
		t.Fatalf("after leadership moved: at %s, want %s", l.Addr(), a.addr)
	}
}

// TestLeaderConnGivesUp: with no replica taking calls, a call returns
// Unavailable once RetryFor has passed, or when its context ends.
func TestLeaderConnGivesUp(t *testing.T) {
	a, b := startReplica(t, true), startReplica(t, true)
	l, err := Dial(a.addr + "," + b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.RetryFor = 300 * time.Millisecond
	start := time.Now()
	if err := check(context.Background(), l); status.Code(err) != codes.Unavailable {
		t.Fatalf("no leader: got %v, want Unavailable", err)
	}
	if d := time.Since(start); d < l.RetryFor || d > 10*time.Second {
		t.Fatalf("gave up after %v, RetryFor %v", d, l.RetryFor)
	}
	if a.hits.Load() < 2 || b.hits.Load() < 2 {
		t.Fatalf("replicas asked %d and %d times: want rounds over both", a.hits.Load(), b.hits.Load())
	}
	l.RetryFor = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := check(ctx, l); err == nil || time.Since(start) > 20*time.Second {
		t.Fatalf("a call whose context ends: %v", err)
	}
	if _, err := Dial(" , "); err == nil {
		t.Fatal("Dial with no address: no error")
	}
}
