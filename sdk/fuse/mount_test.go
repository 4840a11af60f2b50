package fuse

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// mounted is a cluster in this process, an SDK client on it and the
// cluster mounted through FUSE.
type mounted struct {
	c   *cluster.Cluster
	cl  *sdk.Client
	m   *Mount
	dir string
}

// mount starts a cluster and mounts it; tests that need FUSE skip only
// where the machine has no /dev/fuse (CI has it and runs them as root).
func mount(t testing.TB, chunkSize int) *mounted {
	t.Helper()
	return mountWith(t, cluster.Config{Targets: 3, ChunkSize: chunkSize})
}

// mountWith mounts a new cluster started with cfg (its Dir a temporary
// one).
func mountWith(t testing.TB, cfg cluster.Config) *mounted {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg.Dir = t.TempDir()
	c, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return mountOn(t, c)
}

// mountOn mounts cluster c once more, through a client of its own, as
// another machine would.
func mountOn(t testing.TB, c *cluster.Cluster) *mounted {
	t.Helper()
	return mountOnWith(t, c, Config{AllowOther: true})
}

// mountOnWith is mountOn with the mount configured by cfg.
func mountOnWith(t testing.TB, c *cluster.Cluster, cfg Config) *mounted {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: c.Addr, Token: c.Token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	dir := t.TempDir()
	m, err := New(cl, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return &mounted{c: c, cl: cl, m: m, dir: dir}
}

func TestSmoke(t *testing.T) {
	mt := mount(t, 64<<10)
	p := mt.dir + "/hello"
	if err := os.WriteFile(p, []byte("hello world"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "hello world" {
		t.Fatalf("%q %v", b, err)
	}
}
