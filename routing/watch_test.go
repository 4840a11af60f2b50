package routing

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// silentFirst is a Mgmtd client whose first watch stream never sends;
// later streams send one map at once.
type silentFirst struct {
	mgmtdpb.MgmtdClient
	streams atomic.Int32
}

func (c *silentFirst) WatchClusterMap(ctx context.Context, _ *mgmtdpb.Empty, _ ...grpc.CallOption) (grpc.ServerStreamingClient[mgmtdpb.ClusterMap], error) {
	return &stream{ctx: ctx, silent: c.streams.Add(1) == 1}, nil
}

type stream struct {
	grpc.ClientStream
	ctx    context.Context
	silent bool
	sent   bool
}

func (s *stream) Recv() (*mgmtdpb.ClusterMap, error) {
	if s.silent || s.sent {
		<-s.ctx.Done()
		return nil, s.ctx.Err()
	}
	s.sent = true
	return &mgmtdpb.ClusterMap{Version: 7}, nil
}

// TestWatchReopensASilentStream: a watch stream that never brings its
// first map is replaced, so WatchRouting returns instead of waiting forever.
func TestWatchReopensASilentStream(t *testing.T) {
	defer func(d time.Duration) { firstMapWait = d }(firstMapWait)
	firstMapWait = 100 * time.Millisecond
	c := &silentFirst{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := Watch(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if v := w.Routing().Version; v != 7 {
		t.Fatalf("routing version %d, want 7", v)
	}
	if n := c.streams.Load(); n != 2 {
		t.Fatalf("%d streams opened, want 2", n)
	}
}
