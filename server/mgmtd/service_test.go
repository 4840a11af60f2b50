package mgmtd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/server/gateway"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestServiceAndWatch: storage nodes register and heartbeat over gRPC, a
// client watches the routing stream, and sees a target whose heartbeats
// stop leave its chain, come back syncing, and serve again.
func TestServiceAndWatch(t *testing.T) {
	r := soloReplica(t, &metapb.Layout{ChunkSize: 1 << 20, Stripe: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := serveMgmtd(ctx, t, r)
	c := mgmtdpb.NewMgmtdClient(conn)
	if _, err := c.GetClusterMap(ctx, &mgmtdpb.Empty{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v", err)
	}
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")
	for n := 1; n <= 3; n++ {
		if _, err := c.Register(actx, &mgmtdpb.RegisterNode{Node: &mgmtdpb.Node{Id: fmt.Sprint("n", n), Address: fmt.Sprintf("127.0.0.1:%d", 7400+n)}, Targets: []uint32{uint32(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CreateTable(actx, &mgmtdpb.CreateChainTable{Table: 1, Replicas: 3, Chains: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTable(actx, &mgmtdpb.CreateChainTable{Table: 1, Replicas: 3, Chains: 1}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("table created twice: %v", err)
	}
	var twoBeats atomic.Bool
	go func() {
		for ctx.Err() == nil {
			alive := []uint32{1, 3}
			if twoBeats.Load() {
				alive = append(alive, 2)
			}
			c.Heartbeat(actx, &mgmtdpb.HeartbeatRequest{Node: "all", Targets: alive})
			time.Sleep(50 * time.Millisecond)
		}
	}()
	w, err := routing.Watch(actx, c, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wait := func(what string, ok func(*routing.Routing) bool) *routing.Routing {
		t.Helper()
		for {
			changed := w.Changed()
			if r := w.Routing(); ok(r) {
				return r
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("never: %s (routing %+v)", what, w.Routing())
			}
		}
	}
	rt := wait("chain 1 routed", func(r *routing.Routing) bool { return len(r.Chains[1].Targets) == 3 })
	if rt.Targets[2].Node != "127.0.0.1:7402" {
		t.Fatalf("target 2 at %q", rt.Targets[2].Node)
	}
	rt = wait("target 2 offline", func(r *routing.Routing) bool { return r.Targets[2].State == routing.Offline })
	if ch := rt.Chains[1]; len(ch.Targets) != 2 || ch.Version != 2 {
		t.Fatalf("chain after the lease lapsed: %+v", ch)
	}
	twoBeats.Store(true)
	wait("target 2 syncing", func(r *routing.Routing) bool { return r.Targets[2].State == routing.Syncing })
	if _, err := c.ReportSynced(actx, &mgmtdpb.TargetSynced{Chain: 1, Target: 2}); err != nil {
		t.Fatal(err)
	}
	rt = wait("target 2 serving", func(r *routing.Routing) bool { return r.Targets[2].State == routing.Serving })
	if ch := rt.Chains[1]; len(ch.Targets) != 3 || ch.Targets[2] != 2 {
		t.Fatalf("chain after resync: %+v", ch)
	}

	// The same service over REST/JSON, with the token and without.
	gw, err := gateway.Gateway(ctx, conn.Target(), nil, mgmtdpb.RegisterMgmtdHandlerFromEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(gw)
	defer hs.Close()
	req, _ := http.NewRequest("GET", hs.URL+"/v1/cluster/map", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"chains"`) || !strings.Contains(string(body), "127.0.0.1:7402") {
		t.Fatalf("GET /v1/cluster/map: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get(hs.URL + "/v1/cluster/map")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET without the token: %d", resp.StatusCode)
	}
}
