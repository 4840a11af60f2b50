package sdk

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/internal/testproc"
	"github.com/sluicefs/sluice/server/cluster"
)

// TestLeaderFailover: a client given the addresses of a three-replica
// control plane follows its leader. It works whichever replica leads, and
// when the leader stops, its next calls go through once another is
// elected; so do the storage node's heartbeats, whose lapse would take
// the node's target offline.
func TestLeaderFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const token = "failover-test-token-0123456789"
	ids := []string{"m1", "m2", "m3"}
	rafts, listens := map[string]string{}, map[string]string{}
	for _, id := range ids {
		rafts[id], listens[id] = testproc.FreeAddr(t), testproc.FreeAddr(t)
	}
	controls := map[string]*cluster.Control{}
	for _, id := range ids {
		c, err := cluster.StartControl(ctx, cluster.ControlConfig{Dir: filepath.Join(dir, id), ID: id, RaftBind: rafts[id], Listen: listens[id],
			Token: token, Members: rafts, ChunkSize: 64 << 10, ExpectTargets: 1, Replicas: 1})
		if err != nil {
			t.Fatal(err)
		}
		controls[id] = c
		defer func() { c.Close() }()
	}
	var addrs []string
	for _, id := range ids {
		addrs = append(addrs, listens[id])
	}
	all := strings.Join(addrs, ",")
	s, err := cluster.StartStorage(ctx, cluster.StorageConfig{Dir: filepath.Join(dir, "storage"), Cluster: all, Token: token,
		NodeID: "node-1", Targets: []uint32{1}, ChunkSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl, err := Connect(ctx, Config{Cluster: all, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// The chain table appears once the target has registered.
	before := fabrictest.RandBytes(31, 150<<10)
	for i := 0; ; i++ {
		err := cl.WriteFile(ctx, fmt.Sprint("/before-", i), before)
		if err == nil {
			if err := cl.Rename(ctx, fmt.Sprint("/before-", i), "/before"); err != nil {
				t.Fatal(err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no write went through: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	var leader string
	for _, id := range ids {
		if controls[id].IsLeader() {
			leader = id
		}
	}
	if leader == "" {
		t.Fatal("no leader")
	}
	controls[leader].Close()
	t.Logf("stopped the leader %s", leader)

	after := fabrictest.RandBytes(32, 150<<10)
	if err := cl.WriteFile(ctx, "/after", after); err != nil {
		t.Fatalf("write after the leader stopped: %v", err)
	}
	for name, want := range map[string][]byte{"/before": before, "/after": after} {
		f, err := cl.Open(ctx, name)
		if err != nil {
			t.Fatalf("open %s after failover: %v", name, err)
		}
		got := make([]byte, len(want))
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %s after failover: %v, equal=%v", name, err, bytes.Equal(got, want))
		}
		f.Close()
	}
	ents, err := cl.ReadDir(ctx, "/")
	if err != nil || len(ents) != 2 {
		t.Fatalf("after failover the namespace holds %d names (%v), want 2", len(ents), err)
	}
	// The target kept its lease through the election: still serving, a
	// few leases later.
	time.Sleep(4 * time.Second)
	st, err := cl.ClusterStatus(ctx)
	if err != nil || len(st.Targets) == 0 || st.Targets[0].ID != 1 || st.Targets[0].State != "serving" {
		t.Fatalf("status after failover: %v %+v", err, st)
	}
}
