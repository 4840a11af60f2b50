package mgmtd_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/meta"
	"github.com/sluicefs/sluice/server/mgmtd"
)

// soloReplica starts a one-replica metadata group with the given root layout
// and waits until it leads.
func soloReplica(t *testing.T, layout *metapb.Layout) *meta.Replica {
	t.Helper()
	r, err := meta.StartReplica(meta.ReplicaConfig{ID: "m", Dir: t.TempDir(), Bind: "127.0.0.1:0", RootLayout: layout, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := r.Bootstrap(map[string]string{"m": r.Addr()}); err != nil {
		t.Fatal(err)
	}
	for !r.IsLeader() {
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// serveMgmtd runs a detector (one-second leases) under ctx and mgmtd's gRPC
// service over r, guarded by the token "tok", and returns a client
// connection to it.
func serveMgmtd(ctx context.Context, t *testing.T, r *meta.Replica) *grpc.ClientConn {
	t.Helper()
	d := mgmtd.NewDetector(r, time.Second, quiet)
	go d.Run(ctx)
	unary, stream := auth.TokenAuth("tok")
	gs := grpc.NewServer(grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	mgmtdpb.RegisterMgmtdServer(gs, mgmtd.NewService(r, d))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
