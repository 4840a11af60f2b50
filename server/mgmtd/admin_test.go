package mgmtd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/gateway"
)

// TestAdminOverGRPCAndREST: drain, undrain, retire, rebalance and moves
// answer over gRPC and over REST (with the token only), each idempotent,
// and bad names get one clear refusal.
func TestAdminOverGRPCAndREST(t *testing.T) {
	r := soloReplica(t, &metapb.Layout{ChunkSize: 1 << 20, Stripe: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := serveMgmtd(ctx, t, r)
	c := mgmtdpb.NewMgmtdClient(conn)
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")
	for n := 1; n <= 4; n++ {
		if _, err := c.Register(actx, &mgmtdpb.RegisterNode{Node: &mgmtdpb.Node{Id: fmt.Sprint("n", n), Address: fmt.Sprintf("127.0.0.1:%d", 7400+n)}, Targets: []uint32{uint32(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	go func() { // keep every target's lease
		for ctx.Err() == nil {
			c.Heartbeat(actx, &mgmtdpb.HeartbeatRequest{Node: "all", Targets: []uint32{1, 2, 3, 4}})
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if _, err := c.CreateTable(actx, &mgmtdpb.CreateChainTable{Table: 1, Replicas: 3, Chains: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Drain(actx, &mgmtdpb.DrainRequest{Nodes: []string{"nope"}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `no storage node "nope"`) {
		t.Fatalf("drain of an unknown node: %v", err)
	}
	if _, err := c.Retire(actx, &mgmtdpb.DrainRequest{Targets: []uint32{1}}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("retire of a target not draining: %v", err)
	}
	for range 2 {
		p, err := c.Drain(actx, &mgmtdpb.DrainRequest{Nodes: []string{"n1"}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Draining, []uint32{1}) || p.ToGo != 3 || len(p.Drained) != 0 {
			t.Fatalf("after drain: %v", p)
		}
	}

	gw, err := gateway.Gateway(ctx, conn.Target(), nil, mgmtdpb.RegisterMgmtdHandlerFromEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(gw)
	defer hs.Close()
	do := func(method, path, body string, token bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		if token {
			req.Header.Set("Authorization", "Bearer tok")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := do("POST", "/v1/cluster/rebalance", "{}", false); code != http.StatusUnauthorized {
		t.Fatalf("rebalance without the token: %d", code)
	}
	for range 2 {
		if code, body := do("POST", "/v1/cluster/rebalance", "{}", true); code != 200 || !strings.Contains(body, `"rebalance":true`) {
			t.Fatalf("POST /v1/cluster/rebalance: %d %s", code, body)
		}
	}
	if code, body := do("GET", "/v1/cluster/moves", "", true); code != 200 || !strings.Contains(body, `"draining":[1]`) {
		t.Fatalf("GET /v1/cluster/moves: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/cluster/drain", `{"targets":[1],"undrain":true}`, true); code != 200 || !strings.Contains(body, `"draining":[]`) {
		t.Fatalf("POST /v1/cluster/drain (undrain): %d %s", code, body)
	}
	if code, body := do("POST", "/v1/cluster/rebalance", `{"stop":true}`, true); code != 200 || !strings.Contains(body, `"rebalance":false`) {
		t.Fatalf("POST /v1/cluster/rebalance (stop): %d %s", code, body)
	}
	if code, body := do("POST", "/v1/cluster/retire", `{"nodes":["gone"]}`, true); code != 200 {
		t.Fatalf("retire of what is gone: %d %s", code, body)
	}
	m, err := c.GetClusterMap(actx, &mgmtdpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range m.Targets {
		if tg.Draining {
			t.Fatalf("target %d still draining", tg.Id)
		}
	}
}
